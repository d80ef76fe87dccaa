// A tiny model for the equivalence tests: a sparse embedding (100 × 4) looked
// up by 3 ids per sample and mean-pooled, a dot product with a dense
// 4-vector, squared loss against a target. Data is a pure function of
// (seed, step, global sample index), so N ranks × batch B see exactly the
// samples of one process with batch N·B.
#ifndef PARALLAX_TESTS_TRAINER_TINY_MODEL_H_
#define PARALLAX_TESTS_TRAINER_TINY_MODEL_H_

#include <cstdint>
#include <span>
#include <vector>

namespace parallax::testing {

struct TinyModel {
  static constexpr int64_t kRows = 100;
  static constexpr uint32_t kDim = 4;
  static constexpr int kIdsPerSample = 3;
  static constexpr uint64_t kDataSeed = 42;

  struct Batch {
    std::vector<int64_t> ids;    // kIdsPerSample per sample
    std::vector<float> targets;  // one per sample
  };
  struct Grads {
    std::vector<float> dw;         // kDim
    std::vector<float> row_grads;  // one row per entry of Batch::ids
    double loss = 0;               // mean over the batch
  };

  static uint64_t Mix(uint64_t x) {
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
  }

  // Samples [first, first + count) of global step `step`. Ids are skewed
  // toward small rows so batches repeat ids and leave rows untouched.
  static Batch MakeBatch(int64_t step, int64_t first, int64_t count) {
    Batch b;
    for (int64_t s = first; s < first + count; ++s) {
      uint64_t h =
          Mix(kDataSeed ^ Mix(static_cast<uint64_t>(step) * 1000003u + static_cast<uint64_t>(s)));
      for (int k = 0; k < kIdsPerSample; ++k) {
        h = Mix(h);
        const uint64_t a = h % kRows, c = (h >> 20) % kRows;
        b.ids.push_back(static_cast<int64_t>(a * c / kRows));  // skewed to small ids
      }
      h = Mix(h);
      b.targets.push_back(static_cast<float>(static_cast<int64_t>(h % 2001) - 1000) / 1000.0f);
    }
    return b;
  }

  // Forward and backward; `rows` holds the embedding row of every entry of
  // batch.ids. Gradients are of the batch-mean loss.
  static Grads ForwardBackward(const Batch& batch, std::span<const float> rows,
                               std::span<const float> w) {
    Grads g;
    const size_t n = batch.targets.size();
    g.dw.assign(kDim, 0.0f);
    g.row_grads.assign(batch.ids.size() * kDim, 0.0f);
    for (size_t s = 0; s < n; ++s) {
      float h[kDim] = {0, 0, 0, 0};
      for (int k = 0; k < kIdsPerSample; ++k) {
        for (uint32_t j = 0; j < kDim; ++j)
          h[j] += rows[(s * kIdsPerSample + k) * kDim + j] / kIdsPerSample;
      }
      float pred = 0;
      for (uint32_t j = 0; j < kDim; ++j) pred += w[j] * h[j];
      const float err = pred - batch.targets[s];
      g.loss += 0.5 * static_cast<double>(err) * err / static_cast<double>(n);
      const float dpred = err / static_cast<float>(n);
      for (uint32_t j = 0; j < kDim; ++j) g.dw[j] += dpred * h[j];
      for (int k = 0; k < kIdsPerSample; ++k) {
        for (uint32_t j = 0; j < kDim; ++j) {
          g.row_grads[(s * kIdsPerSample + k) * kDim + j] = dpred * w[j] / kIdsPerSample;
        }
      }
    }
    return g;
  }
};

}  // namespace parallax::testing

#endif  // PARALLAX_TESTS_TRAINER_TINY_MODEL_H_
