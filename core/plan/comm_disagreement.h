// Whether a running attempt's measured communication time per step
// disagrees with its plan's prediction, for long enough to act on it
// (re-planning on evidence: coordinator/orchestration/replan_monitor.h).
//
// The input is a series of metric intervals of one attempt, in step order:
// every trainer rank's metric point at one step (MetricPoint.values: per-step
// averages since the rank's previous point) reduced to the mean over ranks of
// dense_wait_ms and sparse_wait_ms, which is what the trainer waits for
// communication. Intervals that begin within `after_steps` of the attempt's
// first step are warm-up (connections, caches, the first checkpoint) and are
// skipped. A disagreement holds when consecutive intervals, all more than
// `factor` times above the prediction or all more than `factor` times below
// it, cover at least `window_steps` steps and at least `min_intervals`
// intervals: one noisy interval never does. An interval inside the band, or
// on the other side of it, starts the run over.
//
// Pure: no clock, no I/O; the caller feeds intervals and reads the verdict.
#ifndef PARALLAX_CORE_PLAN_COMM_DISAGREEMENT_H_
#define PARALLAX_CORE_PLAN_COMM_DISAGREEMENT_H_

#include <cstdint>
#include <optional>
#include <string>

namespace parallax::plan {

// The plan's predicted communication time per step, whole and by the part
// of the step the trainer reports it under: dense_s the collectives
// (all-reduce and all-gather paths, the trainer's dense_wait_ms), sparse_s
// the PS path (sparse_wait_ms).
struct PredictedComm {
  double total_s = 0, dense_s = 0, sparse_s = 0;
};

// One metric interval: steps first_step..last_step (inclusive), with the
// measured communication seconds per step, mean over ranks.
struct CommInterval {
  int64_t first_step = 0, last_step = 0;
  double dense_s = 0, sparse_s = 0;
  int64_t steps() const { return last_step - first_step + 1; }
  double total_s() const { return dense_s + sparse_s; }
};

struct DisagreementOptions {
  double factor = 2.0;          // > 1: how many times the prediction, either way
  int64_t after_steps = 100;    // warm-up steps of the attempt, not compared
  int64_t window_steps = 100;   // steps the disagreement must last
  int min_intervals = 2;        // and at least this many intervals
};

// A disagreement that held: the measured means over its window (weighted by
// the steps of each interval) and the prediction.
struct Disagreement {
  int64_t first_step = 0, last_step = 0;
  double measured_s = 0, measured_dense_s = 0, measured_sparse_s = 0;
  PredictedComm predicted;
  // measured / predicted (infinite when nothing was predicted).
  double ratio() const;
  // "measured communication 31.0 ms/step, predicted 8.2 ms/step (3.8x) over
  // steps 200-400".
  std::string Describe() const;
};

// Not thread-safe: one per attempt, fed by one thread (or under a lock).
class DisagreementDetector {
 public:
  DisagreementDetector(PredictedComm predicted, DisagreementOptions options);

  // Feeds the attempt's next interval (REQUIRES: after every interval fed
  // before; an interval that overlaps or precedes the previous one is
  // ignored). Returns the disagreement the first time one holds, and nothing
  // after that: a detector reports at most once.
  std::optional<Disagreement> Add(const CommInterval& interval);

  bool reported() const { return reported_; }

 private:
  // +1: above the band, -1: below it, 0: inside.
  int Side(const CommInterval& interval) const;

  const PredictedComm predicted_;
  const DisagreementOptions options_;
  int64_t attempt_first_step_ = -1;  // the first interval's first step
  int64_t last_step_ = -1;           // the newest interval's last step
  // The current run of intervals on one side of the band.
  int run_side_ = 0;
  int run_intervals_ = 0;
  int64_t run_first_step_ = 0, run_steps_ = 0;
  double run_dense_s_ = 0, run_sparse_s_ = 0;  // sums of seconds per step x steps
  bool reported_ = false;
};

}  // namespace parallax::plan

#endif  // PARALLAX_CORE_PLAN_COMM_DISAGREEMENT_H_
