// ReplanMonitor: re-planning on evidence, the coordinator's side
// (schemas/job.md, [plan] replan; docs/ARCHITECTURE.md, "Re-planning on
// evidence").
//
// It watches the metric points trainer ranks report: per (job, attempt) it
// gathers every rank's point at a step into one interval (dense_wait_ms and
// sparse_wait_ms: the mean over ranks; in a sync job, where the other ranks
// also wait for the slowest one's compute, those of the rank that waited
// least; the steps the point covers) and
// feeds a DisagreementDetector (core/plan/comm_disagreement.h) built on the
// attempt's plan's prediction and the job's [plan] replan_* keys. When the
// detector reports, an event `replan` records both figures; with [plan]
// replan = true, and only if the job never re-planned before, the monitor
// stores the correction of the model (core/plan/plan_correction.h) in the
// key-value store, where the trainer's rank 0 of every later attempt reads
// it, and asks the caller to re-plan the attempt at its next checkpoint
// (Orchestrator::ReplanAtCheckpoint). Once the first attempt planned with a
// correction stores its plan, PlanStored records what changed.
//
// The same complete steps of a sync job measure its ranks' wait for the
// slowest one (core/plan/straggler.h), which the monitor keeps in the
// key-value store for the next sync plan of as many workers.
//
// State is in memory and per attempt: after a coordinator restart an
// attempt's window starts over. That a job re-planned is durable (the
// stored correction).
//
// Thread-safe.
#ifndef PARALLAX_COORDINATOR_REPLAN_MONITOR_H_
#define PARALLAX_COORDINATOR_REPLAN_MONITOR_H_

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "coordinator/store/state_store.h"
#include "core/plan/comm_disagreement.h"
#include "core/plan/straggler.h"
#include "parallax/status.h"

namespace parallax::coordinator {

// An attempt to re-plan at its next checkpoint, and why (one line).
struct ReplanRequest {
  int64_t job_id = 0;
  int attempt = 0;
  std::string reason;
};

class ReplanMonitor {
 public:
  // `store` must outlive the monitor.
  explicit ReplanMonitor(StateStore* store) : store_(store) {}

  // The metric points just recorded (any jobs, attempts and ranks), `now` in
  // the coordinator clock's Unix milliseconds. Records
  // the events of disagreements found and returns the attempts to re-plan.
  // Points of a job or attempt that cannot be read (no plan yet, a job file
  // that no longer parses) are skipped.
  StatusOr<std::vector<ReplanRequest>> Observe(const std::vector<MetricRecord>& points,
                                               int64_t now);

  // The plan of (job, attempt) was stored: when it is the first attempt
  // after the one a correction was made from, records an event saying what
  // changed in the plan; when its hot rows differ from the attempt
  // before's (re-measured, core/plan/hot_presence.h), an event says so.
  Status PlanStored(int64_t job_id, int attempt, int64_t now);

 private:
  // PlanStored's part for hot rows: an event `replan` when the attempt's
  // plan changed any table's hot rows from the attempt before's.
  Status HotRowsReplanned(int64_t job_id, int attempt, int64_t now);
  // What one attempt of a job is watched with.
  struct Watch {
    int attempt = -1;
    bool replan = false;  // [plan] replan
    int ranks = 0;        // the attempt's trainer ranks
    // Null when the attempt's plan or job file could not be read: not watched.
    std::unique_ptr<plan::DisagreementDetector> detector;
    // Points of steps not every rank reported yet: per step, per rank.
    std::map<int64_t, std::map<int, MetricRecord>> partial;
    int64_t last_fed = -1;  // the newest step fed to the detector
    // A sync job's wait for its slowest rank (core/plan/straggler.h),
    // measured from the ranks' compute_ms once the attempt's first
    // kStragglerWarmupSteps steps are past, and stored under
    // kv_keys::Straggler(ranks) every kStragglerStoreSteps steps.
    bool sync = false;
    int hosts = 0;
    int64_t first_step = -1;  // the attempt's first step reported
    int64_t steps_per_point = 1;
    plan::StragglerMeter straggler;
    int64_t straggler_stored_steps = 0;
  };

  // REQUIRES: mu_ held.
  StatusOr<Watch*> WatchOf(int64_t job_id, int attempt);
  // Feeds `watch` the steps every rank has reported; a disagreement found.
  std::optional<plan::Disagreement> FeedComplete(Watch* watch);
  // Stores the straggler `watch` measured when enough new steps came.
  Status StoreStraggler(int64_t job_id, Watch* watch, int64_t now);
  StatusOr<std::optional<ReplanRequest>> Report(int64_t job_id, const Watch& watch,
                                                const plan::Disagreement& d, int64_t now);

  StateStore* const store_;
  std::mutex mu_;
  std::map<int64_t, Watch> watches_;  // GUARDED_BY(mu_), by job
};

}  // namespace parallax::coordinator

#endif  // PARALLAX_COORDINATOR_REPLAN_MONITOR_H_
