// The checkpoint protocol of a rank (docs/RELIABILITY.md, "Checkpoints"):
// its registered per-rank state, the worker-held variables it snapshots and
// restores, and the Checkpointer that writes, commits and resumes; the files
// themselves are trainer/checkpoint_files.h.
#ifndef PARALLAX_TRAINER_CHECKPOINT_H_
#define PARALLAX_TRAINER_CHECKPOINT_H_

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/optim/optimizer.h"
#include "core/plan/job_plan.h"
#include "parallax/status.h"
#include "trainer/checkpoint_files.h"

namespace parallax {
class CoordinatorClient;
namespace ps {
class PsClient;
}
}  // namespace parallax

namespace parallax::trainer {

// Named per-rank state (Session::RegisterState): saved into and restored
// from rank-<r>.state.
class StateRegistry {
 public:
  using Save = std::function<std::string()>;
  using Restore = std::function<Status(std::string_view)>;
  // ALREADY_EXISTS for a name used twice; INVALID_ARGUMENT for empty hooks.
  Status Register(const std::string& name, Save save, Restore restore);
  std::map<std::string, std::string> SaveAll() const;
  // FAILED_PRECONDITION naming a registered state missing from `blobs`;
  // a restore's own error with the state's name.
  Status RestoreAll(const std::map<std::string, std::string>& blobs) const;

 private:
  std::map<std::string, std::pair<Save, Restore>> hooks_;
};

// A worker-held variable as a session keeps it (exactly one optimizer set).
struct HeldVariable {
  uint32_t id = 0;
  std::string name;
  std::vector<float>* values = nullptr;
  optim::DenseOptimizer* dense_opt = nullptr;
  optim::SparseOptimizer* sparse_opt = nullptr;
};
std::vector<DenseEntry> SnapshotHeld(const std::vector<HeldVariable>& vars);
// FAILED_PRECONDITION when `entries` lack a variable or its size differs;
// nothing is half-restored per variable.
Status RestoreHeld(const std::vector<DenseEntry>& entries, const std::vector<HeldVariable>& vars);

// A plan may move a variable between the workers and the PS (a re-plan, or
// a restart whose plan uses the hosts' measured figures); a resumed attempt
// carries its state across (docs/RELIABILITY.md, "Checkpoints"). Workers ->
// PS needs nothing here: each shard reads the variable's dense.pxck entry
// when it loads (ps/shard_core.h, LoadCheckpoint).
//
// PS -> workers: the variable `var` of the current plan (on a worker path)
// from its partition files in the checkpoint directory `dir`, as the
// DenseEntry dense.pxck would hold: every row's weights and optimizer state
// (rows the PS never touched: the initializer's values and the optimizer's
// initial state), a dense variable's padding dropped. The steps are those
// of the optimizer its path keeps: a DenseOptimizer's on all-reduce (one
// count: the rows' Adam step, else `step`), a SparseOptimizer's on
// all-gather (per row, Adam only).
// FAILED_PRECONDITION naming the file when one is missing, corrupt, or of
// another shape or optimizer.
StatusOr<DenseEntry> ReadPsVariable(const std::string& dir, const plan::PlannedVariable& var,
                                    int64_t step);

// The checkpoint protocol of one rank (what a Session does at a checkpoint
// step and in Start()). Thread-compatible.
class Checkpointer {
 public:
  struct Options {
    int64_t job_id = 0;
    int attempt = 1;
    int rank = 0;
    int world_size = 1;
    std::string root;  // SessionOptions::checkpoint_dir
    int keep = 3;
    int64_t timeout_ms = 300'000;  // waits for peers and shards
  };
  // `coord` may be null (no coordinator: files are written, nothing is
  // committed, nothing is resumed); it must outlive this object.
  Checkpointer(Options options, CoordinatorClient* coord)
      : options_(std::move(options)), coord_(coord) {}

  // Writes this rank's part of the checkpoint of `step`: rank-<r>.state on
  // every rank; on rank 0 also dense.pxck (`dense`), a SAVE of every PS
  // shard into the same directory (`ps`, may be null), and, once every
  // rank's state file is written (each rank announces its file's SHA-256
  // in the coordinator's key-value store), MANIFEST.json; then it commits
  // the checkpoint and prunes old ones. A failure leaves an uncommitted
  // directory that no reader trusts. Errors name the file or the rank.
  Status Write(int64_t step, const std::string& plan_json, const std::vector<DenseEntry>& dense,
               const std::map<std::string, std::string>& rank_state, ps::PsClient* ps);

  struct ResumePoint {
    int64_t step = 0;
    std::string dir;
    int from_world = 0;  // the world size that wrote the checkpoint
    std::vector<DenseEntry> dense;
    std::map<std::string, std::string> rank_state;  // this rank's blobs
  };
  // Rank 0 picks the newest committed checkpoint that verifies and
  // publishes its choice (job/<id>/<attempt>/resume) for the other ranks;
  // each rank then reads dense.pxck and its own state file (with another
  // world size than the checkpoint's: rank r reads the state of rank
  // r mod that size). nullopt: start from scratch.
  StatusOr<std::optional<ResumePoint>> FindResumePoint();

 private:

  const Options options_;
  CoordinatorClient* const coord_;
};

}  // namespace parallax::trainer

#endif  // PARALLAX_TRAINER_CHECKPOINT_H_
