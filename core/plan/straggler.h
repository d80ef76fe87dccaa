// Waiting for the slowest rank: in a sync job every rank's next step waits
// for every rank's push (PS) or contribution (all-reduce, all-gather), so a
// rank's measured wait holds, besides the communication, the time the
// slowest rank's compute took beyond its own. Ranks that share cores, or
// hosts of unequal speed, make it large; on hosts with cores of their own it
// is small. No cost figure of a backend carries it, so it is measured where
// it shows: the coordinator sees every rank's compute time per step in the
// metric points (coordinator/orchestration/replan_monitor.h feeds a StragglerMeter) and
// keeps the newest sync job's figure per number of workers in its key-value
// store, kv_keys::Straggler(workers). A later sync plan of as many workers on as
// many hosts adds it to its predicted wait (CostOptions::sync_straggler_s):
// once per step, not per path, so it never changes which path a variable
// takes.
#ifndef PARALLAX_CORE_PLAN_STRAGGLER_H_
#define PARALLAX_CORE_PLAN_STRAGGLER_H_

#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "parallax/status.h"

namespace parallax::plan {

struct MeasuredStraggler {
  int64_t measured_unix_s = 0;
  int64_t job_id = 0;
  int workers = 0, hosts = 0;  // the job's shape
  // Mean over the measured steps of (slowest rank's compute − the ranks'
  // mean compute), seconds.
  double straggler_s = 0;
  int64_t steps = 0;  // steps it is the mean of
  // Steps each metric point covered ([trainer] metrics_every): above 1 a
  // point holds a rank's mean compute over its steps, which hides some of
  // the step-to-step spread, so the figure is a lower bound.
  int64_t steps_per_point = 1;
};

// Accumulates the straggler of metric intervals. Not thread-safe.
class StragglerMeter {
 public:
  // One interval of `steps` steps: every rank's mean compute per step over
  // it, in seconds. Fewer than 2 ranks or no steps: ignored.
  void Add(std::span<const double> compute_s, int64_t steps);
  int64_t steps() const { return steps_; }
  int64_t points() const { return points_; }
  // The steps-weighted mean of (max − mean); 0 before any interval.
  double mean_s() const { return steps_ > 0 ? weighted_sum_ / static_cast<double>(steps_) : 0; }

 private:
  double weighted_sum_ = 0;
  int64_t steps_ = 0;
  int64_t points_ = 0;
};

std::string StragglerToJson(const MeasuredStraggler& s);
// INVALID_ARGUMENT for text that is not such a JSON object.
StatusOr<MeasuredStraggler> ParseStraggler(std::string_view json);

// "measured by job J over S steps, W workers on H hosts, at YYYY-MM-DD HH:MM UTC".
std::string StragglerSource(const MeasuredStraggler& s);

}  // namespace parallax::plan

#endif  // PARALLAX_CORE_PLAN_STRAGGLER_H_
