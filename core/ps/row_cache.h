// RowCache: a worker's bounded-staleness cache of one PS table's rows
// (async and ssp jobs; schemas/ps_wire.md, "Row cache").
//
// The clock is the worker's own step. A row pulled for step p (the pull's
// clock) may serve a lookup of step c while c − p ≤ staleness; after that a
// lookup pulls it again (a stale refresh). So a row a worker reads at step c
// holds every update its shard had applied when the worker pulled it for a
// step at or after c − staleness.
//
// Gradients are pushed every step, or with `accumulate` those of held rows
// are summed here instead: a row's sum is pushed at the end of the last step
// the row may serve (c − p = staleness), when it is evicted to make room,
// when its partition is reset on the shard (DropPartition), and by Clear().
// So a gradient waits at most `staleness` steps; gradients of rows not held
// are pushed at once. Summing saves push bytes as the cache saves pull
// bytes, but a shard's Adagrad or Adam then takes one step of the sum where
// it would have taken several: the training differs (docs/PERFORMANCE.md,
// "Row cache on workers").
//
// A row leaves the cache at the end of the last step it may serve (it could
// serve no later lookup), so the cache holds about `staleness` + 1 steps of
// rows and stays small. Capacity: `capacity` rows between steps; a new row
// evicts the least recently used one, unless its step uses that one too (a
// prefetch's or a lookup's rows, or a row a step's plan checks): a step's
// rows stay through the step, past the capacity if the step needs more, and
// the overflow leaves at the end of the step (TakeDue), least recently used
// first. Evicting a row its own step pulled would make the lookup pull it
// again. "Recently" counts in steps: rows are ordered by the last step that
// used them, and rows of one step by that step's first use of each (a row
// is queued once a step, so a step's second and third use of it, by the
// lookup after the plan, cost no list update). The queue is kept only from
// the first time the cache is full (until it is far below full again):
// the rows held then are queued by step, within a step in no set order.
//
// With `check_versions` (the job's `cache_rule = "version"`; HET's rule,
// schemas/ps_wire.md, "Row versions") a row also keeps the version its
// shard sent with it, and does not leave when its `staleness` steps are
// over: a later step asks the shard, in its pull, whether the row took more
// than `staleness` pushes since (Plan's `held`, PsClient::PullChecked). If not,
// the shard sends no row and the copy serves that step (Insert with the
// reply's versions). Rows then leave only to make room.
//
// Counters, per distinct id of a step (the first time the step asks for it,
// by a prefetch or a lookup): a hit (served by a row held and fresh, or
// found fresh by a version check), a stale refresh (a row held, or held
// until the step before, too old: pulled again) or a miss (pulled).
// bytes_saved: the pull bytes the hits did not send or receive (the id's 8
// bytes and the row; a version check's hit the row less the 8 bytes of its
// versions), less, with version checks, the 8 bytes of versions that every
// pulled row costs.
//
// Thread-compatible: the training thread owns it.
#ifndef PARALLAX_CORE_PS_ROW_CACHE_H_
#define PARALLAX_CORE_PS_ROW_CACHE_H_

#include <cstddef>
#include <cstdint>
#include <map>
#include <span>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "core/ps/plan.h"

namespace parallax::ps {

struct RowCacheCounters {
  int64_t hits = 0;
  int64_t misses = 0;
  int64_t stale_refreshes = 0;
  int64_t bytes_saved = 0;
  int64_t evictions = 0;  // rows evicted to make room
  int64_t resets = 0;     // rows dropped because their partition was reset
};

// Gradient rows to push now: `ids` (may repeat) and ids.size() × dim values.
struct RowsToPush {
  std::vector<int64_t> ids;
  std::vector<float> grads;
};

class RowCache {
 public:
  // REQUIRES: staleness ≥ 1, capacity ≥ 1, var.dim ≥ 1. `value_bytes`: the
  // bytes of one value on the wire (4, or 2 with fp16), for bytes_saved.
  RowCache(const VariableSpec& var, int64_t staleness, size_t capacity, size_t value_bytes,
           bool accumulate, bool check_versions = false);

  bool check_versions() const { return check_versions_; }

  // Step `step` needs the rows of `ids`: appends to *to_pull each distinct id
  // the cache cannot serve at `step` (not held, or pulled before
  // step − staleness), in first-seen order, and counts each distinct id once
  // per step. With version checks, `held` (not null) gets, for each id
  // appended, the version of the copy held (ps_wire::kNotHeld: none), for
  // a PullChecked.
  void Plan(std::span<const int64_t> ids, int64_t step, std::vector<int64_t>* to_pull,
            std::vector<uint32_t>* held = nullptr);
  // Copies the row of every id held and fresh at `step` to out[i × dim] and
  // appends the positions i of the others to *unserved (Plan's counting
  // included).
  void Read(std::span<const int64_t> ids, int64_t step, float* out, std::vector<size_t>* unserved);
  // The versions of the copies of `ids` held, as Plan gives them.
  void Held(std::span<const int64_t> ids, std::vector<uint32_t>* held) const;
  // Rows (ids.size() × dim) pulled for step `step` of distinct `ids`: held
  // from now on (replacing older copies; a replaced row keeps its gradient).
  // `versions` (a PullChecked's, or empty): each row's version, or
  // ps_wire::kRowFresh for a copy held that the shard found fresh: it serves
  // `step` (its row in `rows` is not read). A fresh one no longer held (reset
  // or evicted since the pull) serves nothing: Read() leaves it unserved.
  void Insert(std::span<const int64_t> ids, std::span<const float> rows, int64_t step,
              std::span<const uint32_t> versions = {});

  // Step `step`'s gradient rows: with `accumulate` those of held rows in
  // their first `staleness` steps accumulate; the others are appended to
  // *push.
  void AddGradients(std::span<const int64_t> ids, std::span<const float> grads, int64_t step,
                    RowsToPush* push);
  // End of step `step`: the rows whose last step to serve is `step` leave
  // (with version checks they stay), so do the least recently used rows
  // past the capacity, and *push gets the gradients now due (theirs, and
  // those of rows evicted or reset since the last call).
  void TakeDue(int64_t step, RowsToPush* push);
  // Every row of partition `partition` is dropped (the shard evicted or
  // re-initialised rows there); their gradients are due.
  void DropPartition(uint32_t partition);
  // Every held gradient into *push, and every row dropped (consistency
  // becomes sync, a checkpoint, the last step).
  void Clear(RowsToPush* push);

  const RowCacheCounters& counters() const { return counters_; }
  size_t size() const { return index_.size(); }
  uint32_t dim() const { return dim_; }

 private:
  static constexpr uint32_t kNone = UINT32_MAX;
  // A version check's bytes a row: its version in the request and the reply.
  static constexpr int64_t kVersionBytes = 2 * sizeof(uint32_t);
  struct Entry {
    int64_t id = 0;
    int64_t pulled_at = 0;      // the step the row was pulled for
    int64_t checked_at = -1;    // the step a version check found it fresh for
    uint32_t version = 0;       // with version checks: the shard's (kNotHeld: unknown)
    // The steps whose counters include this id, by step parity (a prefetch
    // for the next step may come before this step's lookups).
    int64_t counted_step[2] = {-1, -1};
    uint64_t plan_mark = 0;     // the Plan() call that last saw it
    int64_t used_at = -1;       // the latest step that read, planned or pulled it; -1: not held
    uint32_t partition = 0;
    bool has_grad = false;
  };

  bool Fresh(const Entry& e, int64_t step) const { return step - e.pulled_at <= staleness_; }
  bool Serves(const Entry& e, int64_t step) const { return Fresh(e, step) || e.checked_at == step; }
  // Counts `id` for step `step` unless the step counted it already;
  // `held`: its entry, or null.
  void Count(int64_t id, int64_t step, Entry* held);
  float* Row(uint32_t slot) { return rows_.data() + size_t{slot} * dim_; }
  float* Grad(uint32_t slot) { return grads_.data() + size_t{slot} * dim_; }
  // `step` uses the row: it is not evicted for that step's rows, and it
  // joins the back of the LRU queue unless the step used it already.
  void Use(uint32_t slot, int64_t step);
  // The held row used least recently (REQUIRES: one is held).
  uint32_t LeastRecentlyUsed();
  // The queue, built from the rows' used_at when the cache first needs it
  // (full), and dropped when the cache is far below its capacity again.
  void StartQueue();
  void StopQueue();
  // Drops the spent records of used_.
  void Compact();
  // Appends `slot` to step `step`'s list of used_.
  void Queue(uint32_t slot, int64_t step);
  // Erases a step's list of used_ (forgetting used_last_ if it is that one).
  std::map<int64_t, std::vector<uint32_t>>::iterator EraseUsed(
      std::map<int64_t, std::vector<uint32_t>>::iterator it);
  // Whether lookups prefetch: the cache holds enough rows for its index and
  // entries to miss the processor's caches.
  bool Prefetching() const;
  // Slots of index_'s entries for `ids` into found_ (kNone: not held), the
  // hash probes prefetched a few ids ahead when Prefetching().
  void FindAll(std::span<const int64_t> ids);
  // Prefetches found_[i]'s entry (and with `row` its row), if held.
  void PrefetchEntry(size_t i, bool row);
  // Removes `slot`'s row; its gradient becomes due.
  void Remove(uint32_t slot);
  // A slot for a row pulled for `step`.
  uint32_t NewSlot(int64_t step);
  void MoveGradient(uint32_t slot, RowsToPush* push);

  const uint32_t dim_;
  const int64_t staleness_;
  const size_t capacity_;
  const size_t row_pull_bytes_;
  const bool accumulate_;
  const bool check_versions_;
  const Partitioner partition_of_;

  std::vector<Entry> entries_;  // by slot
  std::vector<float> rows_, grads_;
  std::vector<uint32_t> free_;
  absl::flat_hash_map<int64_t, uint32_t> index_;  // id → slot
  // Ids not held counted as misses for a step, for two steps at once (a
  // prefetch for the next step may come before the lookups of this one): by
  // step parity. A held id's entry says when it was counted.
  absl::flat_hash_set<int64_t> missed_[2];
  int64_t missed_step_[2] = {-1, -1};
  uint64_t plans_ = 0;  // Plan() calls so far
  std::vector<uint32_t> found_;  // FindAll's
  // The LRU queue: by step, the slots in the order that step first used
  // them. A record is live while its slot's row was last used at that step
  // (used_at); the others, left behind when a row is used again or leaves,
  // are skipped at the front and dropped when they outnumber the rows four
  // to one (Compact). So a use is an append, not a list update at three
  // random places in entries_.
  std::map<int64_t, std::vector<uint32_t>> used_;
  size_t used_front_ = 0;    // the first record of used_.begin() not yet skipped
  size_t used_records_ = 0;  // records in used_ from used_front_ on
  // used_'s list of step used_last_step_ (kNoStep: none), where Use appends.
  static constexpr int64_t kNoStep = -2;  // no step is -2 (and -1 is used_at's "not held")
  int64_t used_last_step_ = kNoStep;
  std::vector<uint32_t>* used_last_ = nullptr;
  bool queued_ = false;  // the queue is kept (StartQueue)
  // By the step rows were pulled for: (slot, id) as inserted (with version
  // checks only with `accumulate`: TakeDue has nothing else to do for them);
  // a record whose slot no longer holds that id pulled at that step is spent.
  std::map<int64_t, std::vector<std::pair<uint32_t, int64_t>>> by_pull_;
  // The ids that left at the last TakeDue (step expired_at_): a pull of one
  // at the next step is a stale refresh, not a miss.
  absl::flat_hash_set<int64_t> expired_;
  int64_t expired_at_ = -1;
  RowsToPush due_;  // gradients of rows removed since the last TakeDue
  RowCacheCounters counters_;
};

}  // namespace parallax::ps

#endif  // PARALLAX_CORE_PS_ROW_CACHE_H_
