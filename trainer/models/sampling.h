// Deterministic randomness for the built-in models: counter-based hashing
// (so a batch's random choices are a pure function of seed, step and example,
// the same after a restart and across rank counts) and Walker's alias table
// for drawing ids from a fixed distribution in O(1).
#ifndef PARALLAX_TRAINER_MODELS_SAMPLING_H_
#define PARALLAX_TRAINER_MODELS_SAMPLING_H_

#include <cstdint>
#include <span>
#include <vector>

namespace parallax::models {

// SplitMix64 finaliser.
inline uint64_t Mix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

inline uint64_t Hash(uint64_t a, uint64_t b) { return Mix64(a ^ Mix64(b)); }
inline uint64_t Hash(uint64_t a, uint64_t b, uint64_t c) { return Hash(Hash(a, b), c); }

// Uniform in [0, 1) from 53 bits of x.
inline double UnitDouble(uint64_t x) { return static_cast<double>(x >> 11) * 0x1.0p-53; }

// A counter-based stream: Next() hashes (key, counter++).
class HashRng {
 public:
  explicit HashRng(uint64_t key) : key_(key) {}
  uint64_t Next() { return Mix64(key_ + 0x632be59bd9b4e019ull * ++counter_); }
  double Uniform() { return UnitDouble(Next()); }
  // Standard normal (Box-Muller).
  double Normal();

 private:
  uint64_t key_;
  uint64_t counter_ = 0;
};

// Walker's alias method over weights (not all zero).
class AliasTable {
 public:
  AliasTable() = default;
  explicit AliasTable(std::span<const double> weights);
  uint32_t Sample(uint64_t random) const;
  size_t size() const { return prob_.size(); }

 private:
  std::vector<double> prob_;
  std::vector<uint32_t> alias_;
};

}  // namespace parallax::models

#endif  // PARALLAX_TRAINER_MODELS_SAMPLING_H_
