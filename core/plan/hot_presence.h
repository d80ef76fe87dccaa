// Hot rows re-measured while a job trains ([ps] hot_rows): trainer rank 0
// counts, for every sparse PS table of fixed rows, in how many of its steps'
// batches each row appears, and at every checkpoint stores the counts since
// the one before in the key-value store (kv_keys::HotRowPresence). The next
// attempt's planner (a restart, a re-plan, an elastic resize) chooses each
// table's hot rows from them instead of from the batches sampled at start,
// so the hot set follows the data the job reads now; a changed hot set is
// recorded as a `replan` event.
//
// The counts are bounded: a table keeps at most `capacity` rows, and when
// it holds four times more, all but the `capacity` of most steps are
// dropped (lossy counting: a row that keeps recurring comes back at once; a
// row dropped loses only counts too low to be hot). What is stored is the
// `capacity` rows of most steps. And they are sampled: one step in `every`
// is counted (bench/presence_bench.cc: counting every step of `ctr` costs
// rank 0 several times the push's own dedupe of the same ids).
#ifndef PARALLAX_CORE_PLAN_HOT_PRESENCE_H_
#define PARALLAX_CORE_PLAN_HOT_PRESENCE_H_

#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>

#include <absl/container/flat_hash_map.h>

#include "parallax/status.h"

namespace parallax::plan {

// One table's counts: `steps` steps, and of them how many held each row.
struct TablePresence {
  int64_t steps = 0;
  std::unordered_map<int64_t, int64_t> row_steps;
};

// What rank 0 measured: per table (by variable name), from `attempt`,
// between the checkpoints before `first_step` and at `step`.
struct MeasuredPresence {
  int attempt = 0;
  int64_t first_step = 0;
  int64_t step = 0;
  std::map<std::string, TablePresence> tables;
};

// The counter of one table.
class PresenceCounter {
 public:
  PresenceCounter(size_t capacity, int64_t every = 1)
      : capacity_(capacity), every_(every < 1 ? 1 : every) {}
  // One step: `ids` its batch's rows (repeats allowed: a row counts once);
  // counted when it is one of the `every`.
  void AddStep(std::span<const int64_t> ids);
  // The counts so far, at most `capacity` rows (the most steps); Reset()
  // starts a new window.
  TablePresence Take() const;
  void Reset();
  int64_t steps() const { return steps_; }  // counted
  int64_t calls() const { return calls_; }  // AddStep() since Reset()

 private:
  // A row's count, and the step (steps_ then) that last counted it: a
  // repeat within a step is one lookup, no sort.
  struct Count {
    int64_t steps = 0;
    int64_t last = -1;
  };
  void Prune();
  const size_t capacity_;
  const int64_t every_;
  int64_t steps_ = 0, calls_ = 0;
  absl::flat_hash_map<int64_t, Count> counts_;
};

// The key-value value (JSON) and back. Parse: INVALID_ARGUMENT naming what
// is wrong.
std::string FormatPresence(const MeasuredPresence& m);
StatusOr<MeasuredPresence> ParsePresence(std::string_view text);

}  // namespace parallax::plan

#endif  // PARALLAX_CORE_PLAN_HOT_PRESENCE_H_
