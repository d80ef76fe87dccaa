// ConsistencySchedule: which consistency mode (sync, async, ssp with its
// staleness) a job's PS variables are in at each step. A job starts in the
// plan's mode, or in sync for its first `sync_warmup_steps` steps; a run-time
// switch (`parallax set JOB consistency=...`, schemas/ps_wire.md "Settings")
// adds a mode from a given step on. Keyed by step, so a worker and a shard
// that hold the same switches agree on the mode of every step whatever order
// the switches and the step's messages reach them in.
//
// A value type; not thread-safe.
#ifndef PARALLAX_CORE_PS_CONSISTENCY_SCHEDULE_H_
#define PARALLAX_CORE_PS_CONSISTENCY_SCHEDULE_H_

#include <cstdint>
#include <map>
#include <string>
#include <string_view>

#include "core/ps/plan.h"
#include "parallax/settings.h"
#include "parallax/status.h"

namespace parallax::ps {

struct ConsistencyMode {
  Consistency consistency = Consistency::kSync;
  int64_t staleness = 0;  // ssp only; 0 otherwise

  bool operator==(const ConsistencyMode&) const = default;
};

// "sync", "async", or "ssp:K" (the value of a SET "consistency"), and back.
// INVALID_ARGUMENT naming what is wrong: an unknown mode, a staleness that is
// not an integer in [0, 1000000], or one given to a mode other than ssp.
StatusOr<ConsistencyMode> ParseConsistencyMode(std::string_view text);
std::string FormatConsistencyMode(const ConsistencyMode& mode);

class ConsistencySchedule {
 public:
  // The plan's mode from step 0 on, or sync for steps below
  // plan.sync_warmup_steps and the plan's mode after.
  explicit ConsistencySchedule(const PsPlan& plan);

  // The mode from step `from` on (replacing a switch at the same step).
  void Set(int64_t from, const ConsistencyMode& mode);

  // The mode of step `step`.
  const ConsistencyMode& At(int64_t step) const;
  // The first step of the run of steps in At(step)'s mode that holds `step`
  // (0 for the first); the mode before it is At(PeriodStart(step) - 1).
  int64_t PeriodStart(int64_t step) const;
  // True if some step of [0, kMaxClock] is not in sync mode (a schedule that
  // is sync throughout needs no CLOCK messages).
  bool EverNotSync() const;

  // Switches by their first step (the plan's mode at 0 included).
  const std::map<int64_t, ConsistencyMode>& switches() const { return from_step_; }

 private:
  std::map<int64_t, ConsistencyMode> from_step_;  // never empty: has step 0
};

}  // namespace parallax::ps

#endif  // PARALLAX_CORE_PS_CONSISTENCY_SCHEDULE_H_
