// Little-endian encoding and a content hash, shared by the data files and the
// readers' saved positions. Internal to core/data.
#ifndef PARALLAX_CORE_DATA_BYTES_H_
#define PARALLAX_CORE_DATA_BYTES_H_

#include <cstdint>
#include <string>
#include <string_view>

namespace parallax::data::internal {

inline void PutU64(std::string* out, uint64_t v) {
  for (int i = 0; i < 8; ++i) out->push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}
inline void PutU32(std::string* out, uint32_t v) {
  for (int i = 0; i < 4; ++i) out->push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}
// REQUIRES: p points at 8 (GetU64) or 4 (GetU32) readable bytes.
inline uint64_t GetU64(const char* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | static_cast<unsigned char>(p[i]);
  return v;
}
inline uint32_t GetU32(const char* p) {
  uint32_t v = 0;
  for (int i = 3; i >= 0; --i) v = (v << 8) | static_cast<unsigned char>(p[i]);
  return v;
}

// FNV-1a, 64 bits: a check against foreign or damaged bytes, not a MAC.
inline uint64_t Fnv1a(std::string_view bytes, uint64_t h = 0xcbf29ce484222325ULL) {
  for (unsigned char c : bytes) {
    h ^= c;
    h *= 0x100000001b3ULL;
  }
  return h;
}

// SplitMix64: a small, fully specified generator (std::shuffle and the std
// distributions differ between standard libraries; ours must not).
class SplitMix64 {
 public:
  explicit SplitMix64(uint64_t seed) : state_(seed) {}
  uint64_t Next() {
    uint64_t z = (state_ += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
  }
  // Uniform in [0, n), unbiased (Lemire's multiply-and-reject). REQUIRES: n > 0.
  uint64_t Below(uint64_t n) {
    while (true) {
      unsigned __int128 m = static_cast<unsigned __int128>(Next()) * n;
      uint64_t low = static_cast<uint64_t>(m);
      if (low >= n || low >= (-n) % n) return static_cast<uint64_t>(m >> 64);
    }
  }
  // Uniform in [0, 1) with 53 bits.
  double Uniform() { return static_cast<double>(Next() >> 11) * 0x1.0p-53; }

 private:
  uint64_t state_;
};

}  // namespace parallax::data::internal

#endif  // PARALLAX_CORE_DATA_BYTES_H_
