// The data a built-in model trains on, as the models see it: a stream of
// batches with a resumable position. parallax-trainer adapts the core/data
// readers to these; tests feed in-memory data. Field layouts are those of
// core/data's TokenBatch and CtrBatch.
#ifndef PARALLAX_TRAINER_MODELS_DATA_SOURCE_H_
#define PARALLAX_TRAINER_MODELS_DATA_SOURCE_H_

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "parallax/status.h"

namespace parallax::models {

struct TokenBatch {
  std::vector<uint32_t> context;  // batch × context ids, oldest first, row-major
  std::vector<uint32_t> targets;  // batch ids
};

struct CtrBatch {
  std::vector<float> labels;         // batch, 0 or 1
  std::vector<float> dense;          // batch × dense features
  std::vector<int64_t> categorical;  // batch × tables row ids
};

// A stream of batches of this rank's shard. Next() fills *out (reusing its
// storage) and wraps around at the end of the data. Not thread-safe.
template <typename Batch>
class BatchSource {
 public:
  virtual ~BatchSource() = default;
  virtual void Next(size_t batch_size, Batch* out) = 0;
  // Opaque position; RestorePosition(SavePosition()) replays the same batches.
  virtual std::string SavePosition() const = 0;
  virtual Status RestorePosition(std::string_view position) = 0;
};

using TokenSource = BatchSource<TokenBatch>;
using CtrSource = BatchSource<CtrBatch>;

// What a model trains and evaluates on. Which fields a model needs is up to
// the model (lm: tokens, heldout_tokens, counts; ctr: ctr, ctr_heldout; mlp:
// none, it generates its own).
struct ModelData {
  std::unique_ptr<TokenSource> tokens;
  std::vector<uint32_t> heldout_tokens;  // a token sequence
  std::vector<uint64_t> counts;          // training-split count of each id
  std::unique_ptr<CtrSource> ctr;
  CtrBatch ctr_heldout;  // the whole held-out split
  double ctr_bayes_auc = 0;  // the generator's own held-out AUC when known; 0: unknown
};

}  // namespace parallax::models

#endif  // PARALLAX_TRAINER_MODELS_DATA_SOURCE_H_
