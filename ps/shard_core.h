// ShardCore: the logic of one PS shard, without sockets. It owns the shard's
// partitions, validates every received message, applies optimizers, enforces
// the consistency mode and holds pulls (and sync PUSH_PULLs) whose step is
// not ready yet, answering them later from Handle() of another message.
//
// Not thread-safe: owned by the shard server's event-loop thread (tests drive
// it directly).
#ifndef PARALLAX_PS_SHARD_CORE_H_
#define PARALLAX_PS_SHARD_CORE_H_

#include <array>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <set>
#include <string_view>
#include <tuple>
#include <unordered_map>
#include <vector>

#include "core/ps/consistency_schedule.h"
#include "core/ps/dynamic_table.h"
#include "core/ps/plan.h"
#include "core/ps/shm_region.h"
#include "core/ps/wire.h"
#include "ps/updates_file.h"
#include "ps/variable_table.h"

namespace parallax::ps {

struct ShardOptions {
  PsPlan plan;
  uint32_t shard = 0;    // this shard's index in the plan
  uint32_t attempt = 0;  // job attempt; requests from another attempt are refused (0: no check)
  // This shard's generation within the attempt (1 at the attempt's start,
  // one more each time the coordinator starts the shard again alone);
  // requests for another generation are refused (0: no check).
  uint32_t generation = 0;
  WireLimits limits;     // max_message_bytes: larger messages get TOO_LARGE
  // Sync mode: how many steps beyond the last applied one may be buffered.
  int64_t max_steps_ahead = 64;
  // Requests waiting for their step, at most; more get BAD_CLOCK (a worker
  // that runs away cannot exhaust the shard's memory).
  size_t max_held = 65536;
  // Same-host shared memory (ATTACH): the largest region a worker may name,
  // and how many connections may have one at a time.
  size_t max_shm_bytes = size_t{1} << 30;
  size_t max_shm_regions = 1024;
  // Table arrays (a variable's weights, each optimizer slot) of at most this
  // many bytes for this shard's share are committed at start, on huge pages
  // (VariableTable); 0: every page on first touch.
  size_t prefault_bytes = size_t{256} << 20;
};

// The row values frame of a reply: allocated without being zeroed (it is
// written whole before it is sent), and handed to the socket without a copy
// (Release()).
class ValueFrame {
 public:
  ValueFrame() = default;
  explicit ValueFrame(size_t size) : data_(size ? new char[size] : nullptr), size_(size) {}
  char* data() { return data_.get(); }
  const char* data() const { return data_.get(); }
  size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  // Gives up the buffer (free it with delete[]); the frame is empty afterwards.
  char* Release() {
    size_ = 0;
    return data_.release();
  }

 private:
  std::unique_ptr<char[]> data_;
  size_t size_ = 0;
};

// A message to send: the peer's ROUTER identity and the three wire frames:
// frames[0] the header, frames[1] the text (errors, STATS), `values` the rows.
// A batch's reply (wire version 2) has `part_headers` set and is sent as
// frames[0] (the envelope), part_headers, frames[1] (the parts' texts), values.
struct OutMessage {
  std::string identity;
  std::array<std::string, 2> frames;
  ValueFrame values;
  std::optional<std::string> part_headers;
};

// Counters reported by STATS.
struct ShardStats {
  int64_t requests = 0;  // data messages received (a batch counts once, a refused one too)
  int64_t batches = 0;   // of them, batches (wire version 2)
  int64_t pulls = 0, pushes = 0, push_pulls = 0, clocks = 0;
  int64_t rows_pulled = 0, rows_pushed = 0;
  int64_t rows_fresh = 0;  // rows a ROW_VERSIONS pull asked for and did not get: its copy was fresh
  int64_t errors = 0;
  int64_t nonfinite_rows = 0;  // dropped when the plan counts instead of rejecting
  int64_t held = 0;            // requests answered later than they arrived
  int64_t sync_steps_applied = 0;
  // Staleness τ of async/ssp pushes: bucket 0 = τ 0, bucket b = τ in
  // [2^(b-1), 2^b), the last bucket everything above.
  std::array<int64_t, 16> staleness{};
  int64_t staleness_sum = 0;  // of τ over every push counted above
};

class ShardCore {
 public:
  // Fails when the plan gives this shard nothing valid to own.
  static StatusOr<std::unique_ptr<ShardCore>> Create(ShardOptions options);

  // Handles one received message; appends the replies to send now (to this
  // or, for released held requests, other peers) to `out`. Never fails: a bad
  // message gets an ERROR reply and changes nothing.
  void Handle(const std::string& identity, const void* const* frames, const size_t* sizes,
              size_t num_frames, std::vector<OutMessage>* out);

  const ShardStats& stats() const { return stats_; }
  // Replaces the partitions this shard owns by those of the checkpoint in
  // `dir` (what a LOAD request does; `step`: the checkpoint's). A fixed
  // variable without partition files there that the checkpoint's dense.pxck
  // holds (same id and name: the checkpoint's plan kept it on workers) is
  // taken from that entry, every row of the owned partitions, with `step`
  // steps applied. FAILED_PRECONDITION naming the file and what differs;
  // nothing changes then.
  Status LoadCheckpoint(const std::string& dir, int64_t step = 0);
  // Updates applied to this shard's partitions: the sum of their versions
  // (a checkpoint's, after LoadCheckpoint, plus every push since).
  int64_t UpdatesApplied() const;
  // Keeps UpdatesApplied() in `file` from now on, after every update and
  // before its answer (ps/updates_file.h).
  void AttachUpdatesFile(std::unique_ptr<UpdatesFile> file);
  // A next generation's count of the updates its predecessor applied after
  // the checkpoint this process loaded (-1: unknown), for STATS.
  void set_lost_updates(int64_t lost) { lost_updates_ = lost; }
  // That count; nullopt for a shard that is no next generation.
  std::optional<int64_t> lost_updates() const { return lost_updates_; }
  // Rows stored now, every variable together.
  int64_t rows_held() const;
  // Each dynamic table held here, by name, with its counters.
  std::vector<std::pair<std::string, DynamicTableStats>> dynamic_stats() const;
  std::string StatsJson() const;
  const ShardOptions& options() const { return options_; }

  // For tests: the table of variable `var` (null if not held here, or
  // dynamic).
  const VariableTable* table(uint32_t var) const;
  // For tests: the dynamic table of variable `var` (null if not held here,
  // or a table of fixed rows).
  const DynamicTable* dynamic_table(uint32_t var) const;
  // Sync: steps applied to partition p of var.
  int64_t applied_steps(uint32_t var, uint32_t partition) const;
  // For tests: learning rates from SET that `var` keeps (by the step they
  // start at).
  size_t settings_kept(uint32_t var) const;
  // The consistency mode of each step as this shard knows it.
  const ConsistencySchedule& consistency() const { return schedule_; }

 private:
  // One more update applied: kept in the updates file, if any.
  void NoteUpdateApplied();
  explicit ShardCore(ShardOptions options);

  struct Contribution {
    std::vector<int64_t> ids;
    std::vector<float> grads;
    bool present = false;
  };
  struct PartitionState {
    bool owned = false;
    int64_t version = 0;  // updates applied
    int64_t applied = 0;  // sync: steps applied
    // sync: step → one contribution per contributor rank.
    std::map<int64_t, std::vector<Contribution>> pending;
  };
  struct VarState {
    const VariableSpec* spec = nullptr;  // in options_.plan
    uint32_t dim = 0;
    std::unique_ptr<VariableTable> table;  // a table of fixed rows, or
    // A dynamic table: every partition of it this shard owns, with its share
    // of max_rows (ShardCore::Create).
    std::unique_ptr<DynamicTable> dynamic;
    // Set when a step needed more rows than the budget: every later request
    // for the table gets TABLE_FULL with it (the step did not apply).
    std::string dynamic_full;
    std::vector<PartitionState> parts;
    // Times rows were set outside training (WRITE, LOAD); replies add the
    // dynamic table's evictions (a worker's row cache drops what it holds).
    int64_t resets = 0;
    // SET lr: step → the learning rate from that step on (empty: the plan's).
    std::map<int64_t, float> lr_from_step;
  };
  // A request waiting for its step to become ready.
  struct Held {
    std::string identity;
    Header header;
    std::vector<int64_t> ids;
    uint64_t shm_reply = 0;  // header has kFlagShm: where the rows go in the region
    std::vector<uint32_t> held_versions;  // header has kFlagRowVersions: per id
  };

  // A PULL, PUSH or PUSH_PULL, checked and read: its partition, ids and, for
  // a push, its gradients (in place, or decoded and without non-finite rows).
  struct DataRequest {
    const VariableSpec* spec = nullptr;
    VarState* vs = nullptr;
    PartitionState* ps = nullptr;
    std::vector<int64_t> ids;
    std::vector<float> grads;        // owned gradients (copied, decoded or compacted)
    const float* gp = nullptr;       // the gradients to apply: grads, or in place
    std::vector<int64_t> pull_ids;   // a compacted PUSH_PULL: every row it asked for
    char* shm_rows = nullptr;        // kFlagShm: where the reply's rows go in the region
    uint64_t shm_reply = 0;
    std::vector<uint32_t> held_versions;  // a kFlagRowVersions PULL: the worker's, per id
  };

  // Handle() without the batch replies' collection.
  void HandleMessage(const std::string& identity, const void* const* frames, const size_t* sizes,
                     size_t num_frames, std::vector<OutMessage>* out);
  void HandleData(const std::string& identity, const MessageView& m, std::vector<OutMessage>* out);
  // A checked data request applied (or held); its reply, if any, to `out`.
  void ApplyData(const std::string& identity, const Header& h, DataRequest* r,
                 std::vector<OutMessage>* out);
  // Fencing of a request: false after STALE_ATTEMPT / STALE_GENERATION.
  bool CheckFencing(const std::string& identity, const Header& h, std::vector<OutMessage>* out);
  // A version-2 batch: every part checked, then every part applied; one
  // reply once every part is answered (CollectBatchReplies), or one ERROR
  // for the whole batch when any part is refused (nothing applied).
  void HandleBatch(const std::string& identity, const void* const* frames, const size_t* sizes,
                   size_t num_frames, std::vector<OutMessage>* out);
  // What a batch's parts checked so far hold: (request id, variable,
  // partition) keys, sync pushes (variable, partition, step), pulls.
  struct BatchSeen {
    std::set<std::tuple<uint64_t, uint32_t, uint32_t>> keys;
    std::set<std::tuple<uint32_t, uint32_t, int64_t>> sync_pushes;
    size_t pulls = 0;
  };
  // Checks one part of batch `env` into *m and *r, as if it came alone, and
  // against the parts before it; false with the ERROR reply appended to
  // `refused`.
  bool CheckBatchPart(const std::string& identity, const Header& env, const BatchPart& part,
                      BatchSeen* seen, MessageView* m, DataRequest* r,
                      std::vector<OutMessage>* refused);
  static OutMessage AsBatchError(OutMessage m, const Header& env, const std::string& where);
  // Moves the replies to batch parts among out[first..] into their batches,
  // and appends each batch whose parts are all answered as one message.
  void CollectBatchReplies(size_t first, std::vector<OutMessage>* out);
  struct PendingBatch;
  static OutMessage BatchReply(PendingBatch& b);
  // Sync: why push `h` to `ps` cannot be buffered (empty: it can).
  std::string SyncPushRefusal(const Header& h, const PartitionState& ps, const std::string& name) const;
  // Each returns false after an error reply (nothing changed).
  bool CheckData(const std::string& identity, const MessageView& m, DataRequest* r,
                 std::vector<OutMessage>* out);
  bool ReadGradients(const std::string& identity, const MessageView& m, DataRequest* r,
                     std::vector<OutMessage>* out);
  void PushAsync(const std::string& identity, const Header& h, DataRequest* r,
                 std::vector<OutMessage>* out);
  void PushSync(const std::string& identity, const Header& h, DataRequest* r,
                std::vector<OutMessage>* out);
  void WriteRows(VarState& vs, const std::vector<int64_t>& ids, const float* values, bool row_state);
  // A ROW_STATE WRITE's rows (finite) checked with CheckRowState: false
  // after a BAD_ROW_STATE reply naming the first bad row.
  bool CheckRowStates(const std::string& identity, const Header& h, const DataRequest& r,
                      std::vector<OutMessage>* out);
  void HandleControl(const std::string& identity, const MessageView& m,
                     std::vector<OutMessage>* out);
  bool PullReady(const Header& h) const;
  // Sync: the steps of `ps` applied, as seen from step `step`: at least the
  // first step of step's period once every worker finished the step before
  // it (the async or ssp steps before a sync period apply on arrival).
  int64_t SyncApplied(const PartitionState& ps, int64_t step) const;
  // Answers with the rows of `ids` (into the peer's region at `shm_reply`
  // when h has kFlagShm).
  // With kFlagRowVersions, `held` has the worker's version of each id
  // (schemas/ps_wire.md, "Row versions"): a row whose copy is at most
  // h.version_seen pushes behind is not sent.
  void AnswerPull(const std::string& identity, const Header& h, const std::vector<int64_t>& ids,
                  uint64_t shm_reply, std::vector<OutMessage>* out,
                  const std::vector<uint32_t>& held = {});
  void AnswerVersionedPull(const std::string& identity, const Header& h,
                           const std::vector<int64_t>& ids, const std::vector<uint32_t>& held,
                           std::vector<OutMessage>* out);
  // `bytes` of the region `identity` attached, at `offset`; null (after an
  // error reply to `h`) when there is no region or the range is outside it.
  char* ShmSpan(const std::string& identity, const Header& h, uint64_t offset, uint64_t bytes,
                const char* what, std::vector<OutMessage>* out);
  void Attach(const std::string& identity, const MessageView& m, std::vector<OutMessage>* out);
  // A runtime setting (SET): "lr" of one or every variable held here, or the
  // job's "consistency" from step h.clock on.
  void Set(const std::string& identity, const MessageView& m, std::vector<OutMessage>* out);
  void SetConsistency(const std::string& identity, const Header& h, std::string_view value,
                      std::vector<OutMessage>* out);
  // Counts a push in its consistency period (logs the first of each period
  // after the first).
  void CountPeriodPush(const Header& h, bool sync);
  // The factor on the plan's lr for the update of step `step` of `vs`
  // (sync), or for an update now (async/ssp: pass ps_wire::kMaxClock).
  static float LrScale(const VarState& vs, int64_t step);
  // The reply to pull `h`: `n` rows whose values are `values`, as of the
  // partition's current version.
  OutMessage PullReply(const std::string& identity, const Header& h, size_t n, ValueFrame values);
  // Applies one push now. With `rows_out` (a PUSH_PULL answered at once), also
  // writes every row after the whole push into it, in the encoding of h.flags.
  // False when a dynamic table could not hold the rows (its dynamic_full says
  // why; nothing was applied).
  bool ApplyAsync(VarState& vs, PartitionState& ps, const Header& h, const std::vector<int64_t>& ids,
                  const float* grads, char* rows_out);
  // Applies every complete sync step of (var, partition); returns true if any.
  bool TryApplySync(VarState& vs, PartitionState& ps);
  // The dynamic-table forms of the above: pulls read rows or the
  // initializer's values; a push admits its ids at step `step` (each
  // distinct id of `ids` counts one contribution) and applies the gradients
  // of the rows that are admitted (the others are dropped and counted).
  // TABLE_FULL (the table's dynamic_full set) when the budget cannot hold
  // the step's rows. With `slots` (what AdmitDynamic gave for `ids`, nothing
  // admitted since), a read looks nothing up; with `rows_out` (a PUSH_PULL
  // answered at once), a push also writes every row after it there, as
  // ReadDynamic does, from the slots it found.
  void ReadDynamic(VarState& vs, const std::vector<int64_t>& ids, bool fp16, char* dst,
                   const int64_t* slots = nullptr);
  Status PushDynamic(VarState& vs, int64_t step, const std::vector<int64_t>& ids,
                     const float* grads, float lr_scale, char* rows_out = nullptr,
                     bool fp16 = false);
  // One contribution's ids admitted at `step` (each distinct id counts
  // once), the slot of ids[i] into (*slots)[i], and with `distinct` whether
  // no id repeats; false, with the table's dynamic_full set, when the budget
  // cannot hold them. `spare`: which rows a new one must not evict
  // (DynamicTable::AdmitAll): the step's (sync), or only the call's.
  bool AdmitDynamic(VarState& vs, int64_t step, const std::vector<int64_t>& ids,
                    std::vector<int64_t>* slots, bool* distinct = nullptr,
                    DynamicTable::Spare spare = DynamicTable::Spare::kStep);
  // Applies gradient row i to slots[i], or drops it (and counts it) when
  // that id is not a row. With `rows_out` (the slots of distinct `ids`),
  // also writes each row after its update there, as ReadDynamic does.
  void ApplyDynamic(VarState& vs, const std::vector<int64_t>& slots, const float* grads,
                    float lr_scale, const int64_t* ids = nullptr, char* rows_out = nullptr,
                    bool fp16 = false);
  // Sync: step `step` of a dynamic table, its contributions in rank order
  // (admission counts each one's distinct ids; the same rows are admitted
  // and evicted whatever order the pushes arrived in), then the sums in
  // sync_scratch_ applied. False, with dynamic_full set, when the budget
  // cannot hold the step.
  bool ApplySyncDynamic(VarState& vs, int64_t step, const std::vector<Contribution>& contribs,
                        float lr_scale);
  void ReleaseHeld(std::vector<OutMessage>* out);
  void TrySave(std::vector<OutMessage>* out);
  void Error(const std::string& identity, const Header& h, ErrorCode code, const std::string& text,
             std::vector<OutMessage>* out);
  static OutMessage Reply(const std::string& identity, const Header& request, Op op);
  // Reply() to a data request, with the variable's `resets` (schemas/ps_wire.md,
  // "Row cache").
  OutMessage DataReply(const std::string& identity, const Header& request, Op op) const;

  const ShardOptions options_;
  // The mode of each step: the plan's, then every SET "consistency".
  ConsistencySchedule schedule_;
  // The largest step of a data message served: a switch must come before it.
  int64_t max_clock_seen_ = -1;
  struct PeriodStats {
    int64_t sync_pushes = 0, async_pushes = 0;
  };
  std::map<int64_t, PeriodStats> periods_;  // by the period's first step
  std::map<uint32_t, VarState> vars_;
  std::vector<int64_t> worker_clock_;  // ssp: steps finished per contributor
  std::deque<Held> held_;
  // TryApplySync's sums, kept between steps so that a step's rows cost no
  // allocation: each id's slot, the slots' ids, the slots' sums.
  struct SyncScratch {
    std::unordered_map<int64_t, uint32_t> slot_of;
    std::vector<int64_t> slot_ids;
    std::vector<float> acc;
  };
  SyncScratch sync_scratch_;
  // A sync SAVE waiting for every owned partition to reach its step.
  struct PendingSave {
    std::string identity;
    Header header;
    std::string dir;
  };
  std::vector<PendingSave> pending_saves_;
  // Batches whose parts are not all answered yet (a held pull among them),
  // by serial; and each unanswered part by (peer, request id, variable,
  // partition) → (serial, part index).
  struct PendingBatch {
    std::string identity;
    Header header;                     // the envelope
    std::vector<OutMessage> replies;   // by part
    size_t missing = 0;
  };
  std::map<uint64_t, PendingBatch> batches_;
  std::map<std::tuple<std::string, uint64_t, uint32_t, uint32_t>, std::pair<uint64_t, size_t>>
      batch_parts_;
  uint64_t batch_serial_ = 0;
  // Shared memory regions by peer identity (ATTACH).
  std::map<std::string, std::unique_ptr<ShmRegion>> regions_;
  ShardStats stats_;
  Status init_status_;  // a table the constructor could not make (Create fails with it)
  std::unique_ptr<UpdatesFile> updates_file_;  // null: the count is kept nowhere else
  std::optional<int64_t> lost_updates_;
  std::array<int64_t, ps_wire::kMaxErrorCode + 1> errors_by_code_{};
};

}  // namespace parallax::ps

#endif  // PARALLAX_PS_SHARD_CORE_H_
