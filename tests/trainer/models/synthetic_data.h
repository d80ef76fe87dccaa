// In-memory data for the built-in models' tests: a token sequence from a
// sparse first-order Markov chain (so the true next-token distribution is
// known and far better than the unigram one), a token source that shards
// and shuffles like core/data's TokenReader, and a CTR data set drawn from a
// known logistic model (so its Bayes AUC is known).
#ifndef PARALLAX_TESTS_TRAINER_MODELS_SYNTHETIC_DATA_H_
#define PARALLAX_TESTS_TRAINER_MODELS_SYNTHETIC_DATA_H_

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "trainer/models/data_source.h"
#include "trainer/models/layers.h"
#include "trainer/models/sampling.h"

namespace parallax::testing {

// Each token has 3 successors (probabilities 0.6, 0.3, 0.1) chosen at random.
inline std::vector<uint32_t> MarkovTokens(uint32_t vocab, size_t count, uint64_t seed) {
  models::HashRng rng(seed);
  std::vector<uint32_t> next(vocab * 3);
  for (auto& n : next) n = static_cast<uint32_t>(rng.Next() % vocab);
  std::vector<uint32_t> out(count);
  uint32_t t = 0;
  for (size_t i = 0; i < count; ++i) {
    const double u = rng.Uniform();
    t = next[t * 3 + (u < 0.6 ? 0 : u < 0.9 ? 1 : 2)];
    out[i] = t;
  }
  return out;
}

inline std::vector<uint64_t> Counts(const std::vector<uint32_t>& tokens, uint32_t vocab) {
  std::vector<uint64_t> c(vocab, 0);
  for (uint32_t t : tokens) ++c[t];
  return c;
}

// Examples are positions [context, n); epoch e is a permutation seeded by
// (seed, e); step i of shard s takes perm[(i·B + j)·N + s].
class MemoryTokenSource final : public models::TokenSource {
 public:
  MemoryTokenSource(std::vector<uint32_t> tokens, uint32_t context, int shard, int shards,
                    uint64_t seed)
      : tokens_(std::move(tokens)), context_(context), shard_(shard), shards_(shards), seed_(seed) {
    Shuffle();
  }
  void Next(size_t batch, models::TokenBatch* out) override {
    out->context.resize(batch * context_);
    out->targets.resize(batch);
    const uint64_t size = tokens_.size() - context_;
    for (size_t j = 0; j < batch; ++j) {
      const uint64_t g = (offset_ + j) * static_cast<uint64_t>(shards_) + static_cast<uint64_t>(shard_);
      if (g / size != epoch_) {
        epoch_ = g / size;
        Shuffle();
      }
      const size_t p = perm_[g % size];
      out->targets[j] = tokens_[p];
      for (uint32_t c = 0; c < context_; ++c) out->context[j * context_ + c] = tokens_[p - context_ + c];
    }
    offset_ += batch;
  }
  std::string SavePosition() const override { return std::to_string(offset_); }
  Status RestorePosition(std::string_view p) override {
    offset_ = std::stoull(std::string(p));
    return Status::Ok();
  }

 private:
  void Shuffle() {
    perm_.resize(tokens_.size() - context_);
    std::iota(perm_.begin(), perm_.end(), static_cast<size_t>(context_));
    std::mt19937_64 g(seed_ * 1000003u + epoch_);
    std::shuffle(perm_.begin(), perm_.end(), g);
  }
  std::vector<uint32_t> tokens_;
  uint32_t context_;
  int shard_, shards_;
  uint64_t seed_;
  uint64_t epoch_ = 0;
  uint64_t offset_ = 0;
  std::vector<size_t> perm_;
};

// CTR data: `tables` categorical features of `rows` rows each (ids uniform)
// and `dense` standard-normal features; P(click) = σ(b + Σ_f w_f[id_f] +
// u·x) with w ~ N(0, 0.8²), u ~ N(0, 0.5²).
struct CtrTruth {
  int tables, dense;
  int64_t rows;
  std::vector<double> w, u;
  double b = -0.5;
  CtrTruth(int t, int d, int64_t r, uint64_t seed) : tables(t), dense(d), rows(r) {
    models::HashRng rng(seed);
    for (int64_t i = 0; i < t * r; ++i) w.push_back(0.8 * rng.Normal());
    for (int i = 0; i < d; ++i) u.push_back(0.5 * rng.Normal());
  }
  // n examples into *out; their true probabilities into *p.
  void Draw(size_t n, uint64_t seed, models::CtrBatch* out, std::vector<float>* p) const {
    models::HashRng rng(seed);
    out->labels.resize(n);
    out->dense.resize(n * static_cast<size_t>(dense));
    out->categorical.resize(n * static_cast<size_t>(tables));
    p->resize(n);
    for (size_t i = 0; i < n; ++i) {
      double z = b;
      for (int f = 0; f < tables; ++f) {
        const int64_t id = static_cast<int64_t>(rng.Next() % static_cast<uint64_t>(rows));
        out->categorical[i * static_cast<size_t>(tables) + static_cast<size_t>(f)] = id;
        z += w[static_cast<size_t>(f * rows + id)];
      }
      for (int k = 0; k < dense; ++k) {
        const double x = rng.Normal();
        out->dense[i * static_cast<size_t>(dense) + static_cast<size_t>(k)] = static_cast<float>(x);
        z += u[static_cast<size_t>(k)] * x;
      }
      (*p)[i] = static_cast<float>(1 / (1 + std::exp(-z)));
      out->labels[i] = rng.Uniform() < (*p)[i] ? 1.0f : 0.0f;
    }
  }
};

// Batches of a fixed in-memory data set, in order, wrapping; shard s of N
// takes examples s, s+N, ….
class MemoryCtrSource final : public models::CtrSource {
 public:
  MemoryCtrSource(models::CtrBatch all, int shard, int shards) : all_(std::move(all)) {
    const size_t n = all_.labels.size();
    for (size_t i = static_cast<size_t>(shard); i < n; i += static_cast<size_t>(shards)) mine_.push_back(i);
    tables_ = all_.categorical.size() / n;
    dense_ = all_.dense.size() / n;
  }
  void Next(size_t batch, models::CtrBatch* out) override {
    out->labels.resize(batch);
    out->dense.resize(batch * dense_);
    out->categorical.resize(batch * tables_);
    for (size_t j = 0; j < batch; ++j) {
      const size_t i = mine_[at_];
      at_ = (at_ + 1) % mine_.size();
      out->labels[j] = all_.labels[i];
      std::copy_n(all_.dense.begin() + static_cast<std::ptrdiff_t>(i * dense_), dense_, out->dense.begin() + static_cast<std::ptrdiff_t>(j * dense_));
      std::copy_n(all_.categorical.begin() + static_cast<std::ptrdiff_t>(i * tables_), tables_, out->categorical.begin() + static_cast<std::ptrdiff_t>(j * tables_));
    }
  }
  std::string SavePosition() const override { return std::to_string(at_); }
  Status RestorePosition(std::string_view p) override {
    at_ = std::stoull(std::string(p));
    return Status::Ok();
  }

 private:
  models::CtrBatch all_;
  std::vector<size_t> mine_;
  size_t tables_ = 0, dense_ = 0, at_ = 0;
};

}  // namespace parallax::testing

#endif  // PARALLAX_TESTS_TRAINER_MODELS_SYNTHETIC_DATA_H_
