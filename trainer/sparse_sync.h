// SparseSync: the sparse paths of a Session.
//  - PS: a variable's rows live on the PS shards (core/ps/client.h). A
//    batch's rows are pulled (or prefetched during the previous step), its
//    gradient rows pushed at the end of the step; a dense variable there is
//    pushed and pulled whole each step. With local aggregation the ranks of
//    a host sum their rows first and the host's first rank pushes them.
//  - All-gather: every rank keeps a replica of the table; at the end of the
//    step every rank's (ids, rows) are gathered, summed in rank order,
//    averaged, and applied to every replica by its sparse optimizer.
//
// Thread-compatible: the training thread calls it. The PS client's I/O
// thread writes pulled rows into buffers this object owns until their
// tickets complete; the destructor stops the client first.
#ifndef PARALLAX_TRAINER_SPARSE_SYNC_H_
#define PARALLAX_TRAINER_SPARSE_SYNC_H_

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "core/comm/communicator.h"
#include "core/optim/optimizer.h"
#include "core/plan/hot_presence.h"
#include "core/plan/job_plan.h"
#include "core/ps/client.h"
#include "trainer/checkpoint.h"
#include "trainer/step_metrics.h"
#include "trainer/timeline.h"

namespace parallax::ps {
class RowCache;  // core/ps/row_cache.h
}  // namespace parallax::ps

namespace parallax {
class CoordinatorClient;
struct SessionOptions;
}  // namespace parallax

namespace parallax::trainer {

// The PS client of a rank: the shards' endpoints (and CURVE keys when the
// control plane has a secret and the job keeps [ps] curve) from the
// coordinator's key-value store, then one connection per shard.
struct PsConnection {
  std::unique_ptr<ps::PsClient> client;
  std::vector<std::string> endpoints;  // per shard, for errors
};
StatusOr<PsConnection> ConnectPs(CoordinatorClient* coord, const SessionOptions& options,
                                 const plan::JobPlan& plan, Timeline* timeline);

// Rows `ids` of a local table (rows × dim, row-major) into *rows.
void GatherRows(std::span<const float> table, uint32_t dim, std::span<const int64_t> ids,
                std::vector<float>* rows);

class SparseSync {
 public:
  struct Options {
    int rank = 0;  // for log lines
    int local_rank = 0;
    std::chrono::milliseconds step_timeout{300'000};
    // A step's pushes to the PS as one message per shard (PsClient::Batch,
    // the job's [ps] batch); false: one per variable and partition.
    bool batch = true;
    // async and ssp steps: a row cache per sparse PS table
    // (core/ps/row_cache.h; the job's [ps] cache_staleness and cache_rows).
    // 0: none.
    int64_t cache_staleness = 0;
    size_t cache_rows = 100'000;
    bool cache_accumulate = false;  // gradients of cached rows summed until due
    // The cache's rule ([ps] cache_rule = "version"): rows past their
    // cache_staleness steps are checked against their shard's row versions
    // (core/ps/row_cache.h).
    bool cache_check_versions = false;
    // Rank 0 of a job with [ps] hot_rows under sync: counts in how many steps
    // each row of each sparse PS table of fixed rows appears
    // (core/plan/hot_presence.h), for TakePresence().
    bool count_presence = false;
  };

  // `plan`, `world` (the job's communicator; null with one rank),
  // `timeline` and `metrics` must outlive this. `host` is the communicator
  // of this host's ranks for local aggregation (null without it); `ps` is
  // null when the plan puts nothing on the PS.
  SparseSync(const Options& options, const plan::JobPlan* plan, comm::Communicator* world,
             std::unique_ptr<comm::Communicator> host, PsConnection ps, Timeline* timeline,
             StepMetrics* metrics);
  ~SparseSync();
  SparseSync(const SparseSync&) = delete;
  SparseSync& operator=(const SparseSync&) = delete;

  // Adds a sparse table on the all-gather path with its initial rows.
  void AddAllGather(const plan::PlannedVariable& v, std::vector<float> table);
  // Adds a variable on the PS path (a dense one keeps a local copy of its
  // values, pulled by PullDenseValues and after every step).
  void AddPs(const plan::PlannedVariable& v);
  bool Holds(uint32_t id) const { return index_.count(id) > 0; }

  // Start(): every shard loads the checkpoint in `dir` (rank 0 asks, then
  // all ranks meet at a barrier), and under ssp the shards learn the step
  // this rank resumes at. A PS variable the checkpoint held on workers
  // comes from its dense.pxck (each shard reads it: ShardCore::LoadCheckpoint).
  Status LoadCheckpoint(const std::string& dir, int64_t step, bool rank0);
  // Start() of a job that does not resume: rank 0 (`rank0`) writes the
  // given initial values of PS variables to their shards (`values` by
  // variable id: rows × dim for a sparse one, size() for a dense one), then
  // all ranks meet at a barrier, so no rank pulls a row before it is
  // written. Rows of a variable not in `values` keep the initializer's.
  Status WriteInitialValues(const std::map<uint32_t, std::span<const float>>& values, bool rank0);
  // Start(): the current values of the dense variables on the PS.
  Status PullDenseValues();

  // Hot rows (plan::PlannedVariable::hot_rows, core/plan/hot_rows.h): every
  // rank keeps a copy of a PS table's hot rows with their lazy optimizer,
  // looks them up locally, and sums their gradients with the dense ones.
  // Start(): their whole state (weights, optimizer slots, step) taken over
  // from the shards as of step `step` (initial, written or loaded): the
  // shards hold every row between checkpoints' hand-backs.
  Status PullHotRows(int64_t step);
  // Step: StartPushes() leaves each hot table's gradient block here, one
  // buffer a table: rows × dim gradients, then a count per row of the ranks
  // that touched it. DenseSync::Finish() averages them over the ranks with
  // the dense gradients; ApplyHotRows() then applies them as a shard applies
  // a sync step (the rows some rank touched, the mean or the sum).
  std::vector<std::span<float>> HotBlocks();
  Status ApplyHotRows();
  // A checkpoint: rank 0 hands the hot rows' whole state back to their
  // shards before they save, so that a shard's checkpoint holds every row as
  // if none were hot: what export reads, and what a resumed attempt takes
  // its hot rows from, whichever rows its plan makes hot (rows that cooled
  // keep their optimizer state on the shards, rows that warmed bring
  // theirs).
  Status WriteHotRows();
  // Rows `ids` of PS variable `var` become `states` (RowStateWidth values a
  // row), in WRITE requests of at most 32 MiB.
  Status WriteRowStates(const plan::PlannedVariable& var, std::span<const int64_t> ids,
                        std::span<const float> states, const std::string& what);
  // Options::count_presence: the counts since the last call (or the start),
  // through step `step` of attempt `attempt`, and a new window from there.
  // Empty without counting.
  std::optional<plan::MeasuredPresence> TakePresence(int attempt, int64_t step);

  // Starts pulling `next_ids` of PS variable `id` for step `step` (the next
  // one); a second prefetch of the variable in one step replaces the first.
  // A replica needs no prefetch.
  Status Prefetch(uint32_t id, std::span<const int64_t> next_ids, int64_t step);
  // Prefetch() of each (variable, ids), their pulls as one batch (one
  // message per shard) with options.batch.
  Status PrefetchMany(std::span<const std::pair<uint32_t, std::span<const int64_t>>> vars,
                      int64_t step);
  // Rows of `ids` as of the start of step `step`: from the replica, from the
  // step's prefetch when it holds every id of `ids` (as often as the model
  // looks the table up), or a pull.
  Status Lookup(uint32_t id, std::span<const int64_t> ids, int64_t step, std::vector<float>* rows);
  // After the step: its prefetches are spent (the reply of one no lookup
  // waited for is collected); those made during the step serve the next.
  Status AdvancePrefetches();
  // Gradient rows of this step (repeated ids are summed when pushed).
  void AddRows(uint32_t id, std::span<const int64_t> ids, std::span<const float> rows);
  // A dense PS variable's gradient of this step (REQUIRES: size checked).
  void DenseGradient(uint32_t id, std::span<const float> grad);
  bool HasGradient(uint32_t id) const;

  // Step, in this order around the dense all-reduce: StartPushes sends
  // every PS variable's push (in sync mode exactly one per variable, empty
  // when there was no gradient); ExchangeAllGather updates the replicas;
  // FinishPushes waits for the pushes (sync: the step applied on every
  // shard) and, under ssp, tells the shards this rank finished the step.
  // With row caches that accumulate, the gradients of cached rows wait in
  // the cache until due; `flush_caches` (a checkpoint or the last step
  // follows) pushes them all and empties the caches.
  Status StartPushes(int64_t step, bool flush_caches = false);
  Status ExchangeAllGather();
  Status FinishPushes(int64_t step);

  // The job's consistency mode (its PS variables) from step `from` on:
  // every shard is told (a SET; waits for every ack) and this rank's pushes
  // and clocks follow it. `now` is the step this rank is about to run.
  Status SetConsistency(int64_t from, const ps::ConsistencyMode& mode, int64_t now);

  // The learning rate of `id`'s optimizer from step `step` on: a replica's
  // own, or the shards' for a PS variable (a SET message; waits for every
  // shard's ack). REQUIRES: lr finite and > 0.
  Status SetLearningRate(uint32_t id, double lr, int64_t step);

  // Rows [first_row, first_row + count) as of now.
  Status ReadSparse(uint32_t id, int64_t first_row, int64_t count, int64_t step,
                    std::vector<float>* out);
  // A dense PS variable's values (valid until the next step).
  std::span<const float> DenseValues(uint32_t id) const;

  // The replicas with their optimizers, for checkpoints.
  void AppendHeld(std::vector<HeldVariable>* held);
  ps::PsClient* ps() const { return ps_.get(); }
  const comm::Communicator* host_comm() const { return host_.get(); }

 private:
  // Rows pulled into a buffer the PS client's thread writes until its
  // ticket completes: it lives behind a pointer that never moves, and a
  // pull whose wait timed out keeps its buffer alive until the client is
  // gone.
  using PullBuffer = std::unique_ptr<std::vector<float>>;
  // A checked pull's versions (ps::RowVersionCheck), written by the PS
  // client until its ticket completes.
  using VersionBuffer = std::unique_ptr<std::vector<uint32_t>>;
  // A pull started by Prefetch(). The step it is for looks rows up in it
  // once it arrived, as often as it likes (a model may call a table several
  // times).
  struct Prefetched {
    int64_t clock = 0;
    std::vector<int64_t> ids;
    PullBuffer rows = std::make_unique<std::vector<float>>();
    ps::Ticket ticket = 0;
    bool arrived = false;                          // rows holds ids.size() × dim values
    std::unordered_map<int64_t, uint32_t> row_of;  // id → its first position in ids, once arrived
    VersionBuffer versions;  // a cache with version checks: what the shard answered
  };
  // A PS table's hot rows on this rank.
  struct Hot {
    std::unordered_map<int64_t, uint32_t> index;  // row id → position in var.hot_rows
    std::vector<float> values;                     // rows × dim
    std::unique_ptr<optim::SparseOptimizer> optimizer;
    std::vector<float> block;  // this step's: rows × dim gradients, then rows touched counts
  };
  struct Slot {
    plan::PlannedVariable var;
    std::vector<float> values;  // replica, or a dense PS variable's copy
    std::vector<float> grad;    // a dense PS variable's gradient
    std::vector<float> pulled;  // a dense PS variable's push-pull reply
    bool grad_given = false;
    std::vector<int64_t> pending_ids;  // this step's gradient rows
    std::vector<float> pending_grads;
    std::unique_ptr<optim::SparseOptimizer> optimizer;  // replicas
    std::unique_ptr<Prefetched> prefetch;    // Prefetch() of this step, for the next one
    std::unique_ptr<Prefetched> prefetched;  // the one for this step (moved by AdvancePrefetches)
    // A sparse PS table's row cache (Options::cache_staleness), and the
    // partitions' resets it has seen (ps::PsClient::PartitionResets).
    std::unique_ptr<ps::RowCache> cache;
    std::vector<uint16_t> resets_seen;
    std::unique_ptr<Hot> hot;  // a table with hot rows
    std::unique_ptr<plan::PresenceCounter> presence;  // Options::count_presence
  };

  Slot& At(uint32_t id) { return slots_[index_.at(id)]; }
  const Slot& At(uint32_t id) const { return slots_[index_.at(id)]; }
  ps::Deadline Deadline() const { return std::chrono::steady_clock::now() + options_.step_timeout; }
  // Waits for a pull into `buf`; on success moves the rows to *out. A
  // timed-out wait leaves `buf`, and `*versions` of a checked pull, to the
  // ticket.
  Status AwaitPull(ps::Ticket ticket, PullBuffer buf, std::vector<float>* out,
                   VersionBuffer* versions = nullptr);
  // Waits for a prefetch's rows (into *rows); a timed-out wait leaves its
  // buffers to the ticket.
  Status AwaitPrefetch(Prefetched& pf, std::vector<float>* rows);
  // Lookup() of a PS table's rows from the PS: the cache, the prefetch, or
  // a pull.
  Status LookupPs(Slot& s, std::span<const int64_t> ids, int64_t step, std::vector<float>* rows);
  // Lookup() of a table with hot rows: those from this rank's copy, the
  // others by LookupPs.
  Status LookupHot(Slot& s, std::span<const int64_t> ids, int64_t step, std::vector<float>* rows);
  // The step's gradient rows of hot rows go into the hot block, the others
  // stay pending for the shards; counts both (hot_hits_, hot_misses_).
  void SplitHotGradients(Slot& s);
  // Copies the rows of `ids` that are hot from this rank's copy into `out`
  // (ids.size() × dim); the positions of the others go to *cold_at if given.
  static void CopyHotRows(const Slot& s, std::span<const int64_t> ids, float* out,
                          std::vector<size_t>* cold_at);
  // Serves a lookup of step `step` from its prefetch when that holds every
  // id of `ids`; *served says whether it did.
  Status LookupPrefetched(Slot& s, std::span<const int64_t> ids, int64_t step,
                          std::vector<float>* rows, bool* served);
  Status PushHostAggregated(int64_t step);
  // Whether `s`'s row cache serves step `step` (not in sync steps).
  bool CacheAt(const Slot& s, int64_t step) const;
  // Lookup() through the row cache: the step's prefetch joins it, rows it
  // cannot serve are pulled (and join it).
  Status LookupCached(Slot& s, std::span<const int64_t> ids, int64_t step,
                      std::vector<float>* rows);
  // Drops the cached rows of partitions whose shard reset rows since.
  void NoteResets(Slot& s);
  // Waits for the rows of `s.prefetched` (not arrived yet); on an error the
  // prefetch is dropped and the error names the variable.
  Status AwaitPrefetched(Slot& s);
  // A cache with version checks: pulls `ids` (distinct, none served by the
  // cache at `step`) naming the versions held, and puts every row into *rows
  // (ids.size() × dim) and the cache: those sent, and those found fresh
  // from the cache.
  Status PullCheckedIntoCache(Slot& s, const std::vector<int64_t>& ids, int64_t step,
                              std::vector<float>* rows);
  // Waits for `s`'s prefetch for step `step` and puts its rows in the cache.
  Status CachePrefetched(Slot& s, int64_t step);
  // The step's gradient rows of a cached table become what is pushed now.
  void CacheGradients(Slot& s, int64_t step, bool flush);
  // Submits a step's pushes (calls[i] for slots[i]) into pushes_: as one
  // batch with options_.batch, else a call each.
  Status SubmitPushes(std::span<const ps::BatchCall> calls, std::span<Slot* const> slots,
                      int64_t step);
  // " (on PS shard 0 at tcp://...)", for errors.
  std::string ShardsOf(const Slot& s) const;

  // Constant after construction.
  const Options options_;
  const plan::JobPlan* const plan_;
  comm::Communicator* const world_;
  Timeline* const timeline_;
  StepMetrics* const metrics_;
  std::vector<std::string> endpoints_;

  // The training thread only.
  std::unique_ptr<comm::Communicator> host_;
  std::unique_ptr<ps::PsClient> ps_;
  std::vector<Slot> slots_;
  std::map<uint32_t, size_t> index_;  // variable id -> slot
  std::vector<std::pair<ps::Ticket, const Slot*>> pushes_;  // this step's, and ssp's clock (null)
  // Pulls whose wait timed out: their buffers, still the tickets'.
  std::vector<std::pair<PullBuffer, VersionBuffer>> abandoned_;
  std::optional<ps::ConsistencyMode> pushed_mode_;          // of the last step pushed
  // Distinct rows of this rank's steps' gradients, of tables with hot rows,
  // that were hot and that were not (metric values hot_row_hits, _misses).
  int64_t hot_hits_ = 0, hot_misses_ = 0;
};

}  // namespace parallax::trainer

#endif  // PARALLAX_TRAINER_SPARSE_SYNC_H_
