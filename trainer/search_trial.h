// The trainer's side of the partition search (coordinator/orchestration/partition_trials.h).
// For every attempt of a job with [ps] partitions = "auto", the coordinator
// publishes under job/<id>/<attempt>/search the P the attempt runs with and,
// for a trial attempt, its step budget:
//   {"partitions": 8, "trial_steps": 20, "warmup_steps": 5}
// ApplySearchSpec() folds it into the SessionOptions; in a trial, rank 0
// times every step with TrialTimer and publishes the median of the last
// trial_steps under job/<id>/<attempt>/trial/step_seconds.
#ifndef PARALLAX_TRAINER_SEARCH_TRIAL_H_
#define PARALLAX_TRAINER_SEARCH_TRIAL_H_

#include <cstdint>
#include <vector>

#include "parallax/session.h"
#include "parallax/status.h"

namespace parallax {
class CoordinatorClient;
}

namespace parallax::trainer {

// Reads the attempt's search settings (no wait: absent means none) and
// applies them: ps_partitions, and for a trial trial_steps and
// trial_warmup_steps, no checkpoints (checkpoint_dir cleared) and no metric
// points. Does nothing unless the job has a coordinator, PS shards and
// ps_partitions = 0 ("auto"). INVALID_ARGUMENT for a malformed value.
Status ApplySearchSpec(CoordinatorClient* coord, SessionOptions* options);

// Publishes rank 0's median step time of a trial attempt.
Status PublishTrial(CoordinatorClient* coord, const SessionOptions& options, double seconds);

// Collects step times; inactive (Add() always false) with steps == 0.
class TrialTimer {
 public:
  TrialTimer() = default;
  TrialTimer(int64_t warmup_steps, int64_t steps) : warmup_(warmup_steps), steps_(steps) {}

  // Records one step's seconds; true exactly once, when warmup + steps are in.
  bool Add(double seconds);
  // Median of the timed (post-warm-up) steps. REQUIRES: Add() returned true.
  double Median() const;

 private:
  int64_t warmup_ = 0;
  int64_t steps_ = 0;
  int64_t seen_ = 0;
  std::vector<double> timed_;
};

}  // namespace parallax::trainer

#endif  // PARALLAX_TRAINER_SEARCH_TRIAL_H_
