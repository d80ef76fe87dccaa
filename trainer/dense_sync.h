// DenseSync: the all-reduce path of a Session. It holds the variables the
// plan put on all-reduce — dense variables, and sparse tables whose gradient
// is the whole table — with their values and optimizers on every rank.
// Dense gradients are registered with GradientFusion (core/comm) as
// backward produces them, so full buckets are reduced while backward goes
// on; Finish() reduces the rest, averages, and applies each optimizer.
//
// Thread-compatible: the training thread calls it. GradientFusion's thread
// reads the registered gradient buffers until Finish() returns.
#ifndef PARALLAX_TRAINER_DENSE_SYNC_H_
#define PARALLAX_TRAINER_DENSE_SYNC_H_

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <vector>

#include "core/comm/communicator.h"
#include "core/comm/gradient_fusion.h"
#include "core/optim/optimizer.h"
#include "core/plan/job_plan.h"
#include "trainer/checkpoint.h"
#include "trainer/step_metrics.h"
#include "trainer/timeline.h"

namespace parallax::trainer {

class DenseSync {
 public:
  struct Options {
    size_t fusion_bucket_bytes = 64u << 20;  // 0: every gradient is its own call
    std::chrono::milliseconds step_timeout{300'000};
  };

  // `comm` is the job's communicator (null with one rank: gradients are
  // applied as they are); it, `timeline` and `metrics` must outlive this.
  DenseSync(const Options& options, comm::Communicator* comm, Timeline* timeline,
            StepMetrics* metrics);
  ~DenseSync();  // stops the fusion thread before the buffers go
  DenseSync(const DenseSync&) = delete;
  DenseSync& operator=(const DenseSync&) = delete;

  // Adds `v` (REQUIRES: v.path == kAllReduce) with its initial values:
  // v.size elements for a dense variable, rows × dim for a sparse table.
  void Add(const plan::PlannedVariable& v, std::vector<float> values);
  bool Holds(uint32_t id) const { return index_.count(id) > 0; }

  // Rank 0's values of every dense variable replace the others' (explicit
  // initial values may differ between ranks). Sparse tables start from the
  // initializer, the same everywhere.
  Status BroadcastDenseValues();

  // A dense variable's gradient of this step (REQUIRES: Holds(id), size
  // checked): copied, and reduced with the bucket it completes.
  Status Gradient(uint32_t id, std::span<const float> grad);
  // A dense variable's gradient already averaged over the ranks (on the
  // device, Session::GradientDevice): copied, and only applied by Finish().
  void ReducedGradient(uint32_t id, std::span<const float> mean);
  bool HasGradient(uint32_t id) const;
  // Rows of a sparse table's gradient, summed into its whole-table gradient.
  void AddRows(uint32_t id, std::span<const int64_t> ids, std::span<const float> rows);

  // Ends the step: dense variables with no gradient count as zero, the
  // whole-table gradients of sparse tables follow them into the buckets,
  // every rank's gradients are averaged, and each optimizer is applied.
  // `extra` buffers (the PS tables' hot-row blocks, SparseSync::HotBlocks;
  // the same sizes in the same order on every rank) are averaged with them,
  // in the last buckets; their owner applies them. The waiting is charged
  // to `metrics` as dense wait.
  Status Finish(std::span<const std::span<float>> extra = {});

  std::span<const float> Values(uint32_t id) const;
  // The learning rate of `id`'s optimizer from the next Finish() on.
  // REQUIRES: lr finite and > 0.
  void SetLearningRate(uint32_t id, float lr) { At(id).optimizer->set_lr(lr); }
  // The variables with their optimizers, for checkpoints.
  void AppendHeld(std::vector<HeldVariable>* held);

 private:
  struct Slot {
    plan::PlannedVariable var;
    std::vector<float> values, grad;
    bool grad_given = false;
    std::unique_ptr<optim::DenseOptimizer> optimizer;
  };
  Slot& At(uint32_t id) { return slots_[index_.at(id)]; }
  const Slot& At(uint32_t id) const { return slots_[index_.at(id)]; }
  std::chrono::steady_clock::time_point Deadline() const {
    return std::chrono::steady_clock::now() + options_.step_timeout;
  }

  // Constant after construction.
  const Options options_;
  comm::Communicator* const comm_;
  Timeline* const timeline_;
  StepMetrics* const metrics_;

  std::vector<Slot> slots_;
  std::map<uint32_t, size_t> index_;              // variable id -> slot
  std::unique_ptr<comm::GradientFusion> fusion_;  // null with one rank
};

}  // namespace parallax::trainer

#endif  // PARALLAX_TRAINER_DENSE_SYNC_H_
