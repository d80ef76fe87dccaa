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
// rows and stays small. Capacity: at most `capacity` rows; a new row evicts
// the least recently used one.
//
// Counters, per distinct id of a step (the first time the step asks for it,
// by a prefetch or a lookup): a hit (served by a row held and fresh), a
// stale refresh (a row held, or held until the step before, too old: pulled
// again) or a miss (pulled).
// bytes_saved: the pull bytes the hits did not send or receive (the id's 8
// bytes and the row).
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
           bool accumulate);

  // Step `step` needs the rows of `ids`: appends to *to_pull each distinct id
  // the cache cannot serve at `step` (not held, or pulled before
  // step − staleness), in first-seen order, and counts each distinct id once
  // per step.
  void Plan(std::span<const int64_t> ids, int64_t step, std::vector<int64_t>* to_pull);
  // Copies the row of every id held and fresh at `step` to out[i × dim] and
  // appends the positions i of the others to *unserved (Plan's counting
  // included).
  void Read(std::span<const int64_t> ids, int64_t step, float* out, std::vector<size_t>* unserved);
  // Rows (ids.size() × dim) pulled for step `step` of distinct `ids`: held
  // from now on (replacing older copies; a replaced row keeps its gradient).
  void Insert(std::span<const int64_t> ids, std::span<const float> rows, int64_t step);

  // This step's gradient rows: with `accumulate` those of held rows
  // accumulate; the others are appended to *push.
  void AddGradients(std::span<const int64_t> ids, std::span<const float> grads, RowsToPush* push);
  // End of step `step`: the rows whose last step to serve is `step` leave,
  // and *push gets the gradients now due (theirs, and those of rows evicted
  // or reset since the last call).
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
  struct Entry {
    int64_t id = 0;
    int64_t pulled_at = 0;      // the step the row was pulled for
    // The steps whose counters include this id, by step parity (a prefetch
    // for the next step may come before this step's lookups).
    int64_t counted_step[2] = {-1, -1};
    uint64_t plan_mark = 0;     // the Plan() call that last saw it
    uint32_t partition = 0;
    uint32_t prev = kNone, next = kNone;  // LRU list: head = most recent
    bool has_grad = false;
  };

  bool Fresh(const Entry& e, int64_t step) const { return step - e.pulled_at <= staleness_; }
  // Counts `id` for step `step` unless the step counted it already;
  // `held`: its entry, or null.
  void Count(int64_t id, int64_t step, Entry* held);
  float* Row(uint32_t slot) { return rows_.data() + size_t{slot} * dim_; }
  float* Grad(uint32_t slot) { return grads_.data() + size_t{slot} * dim_; }
  void Touch(uint32_t slot);
  void Unlink(uint32_t slot);
  // Removes `slot`'s row; its gradient becomes due.
  void Remove(uint32_t slot);
  uint32_t NewSlot();
  void MoveGradient(uint32_t slot, RowsToPush* push);

  const uint32_t dim_;
  const int64_t staleness_;
  const size_t capacity_;
  const size_t row_pull_bytes_;
  const bool accumulate_;
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
  uint32_t head_ = kNone, tail_ = kNone;
  // By the step rows were pulled for: (slot, id) as inserted; a record whose
  // slot no longer holds that id pulled at that step is spent.
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
