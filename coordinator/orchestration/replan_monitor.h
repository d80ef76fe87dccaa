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
// A plan with hot rows ([ps] hot_rows) is also watched on what they serve:
// the ranks' hot_row_hits and hot_row_misses against the plan's
// hot_rows_share; hot rows serving [plan] replan_factor times fewer rows
// make the same event and, with replan = true, the same one re-plan (a
// correction that keeps the model's time scales), whose attempt takes its
// hot rows from what rank 0 re-measured (core/plan/hot_presence.h).
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
#include <optional>
#include <string>
#include <vector>

#include "coordinator/store/state_store.h"
#include "core/plan/comm_disagreement.h"
#include "core/plan/plan_correction.h"
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
    // Hot rows drifting (a plan with hot rows): the share of a step's
    // distinct rows of their tables the plan expects them to serve (each
    // table's hot_rows_share weighted by its distinct rows a batch), and
    // what the ranks counted (hot_row_hits, hot_row_misses) in the window
    // that began at hot_first, past [plan] replan_after_steps. When a
    // window of replan_window_steps (two intervals at least) served
    // replan_factor times less, HotDrift() reports it, once an attempt.
    // `options`: the [plan] replan_* settings, the detector's too.
    plan::DisagreementOptions options;
    double hot_expected = 0;
    int64_t hot_first = -1;
    double hot_hits = 0, hot_rows = 0;
    int hot_intervals = 0;
    bool hot_reported = false;
  };
  // Hot rows that served less than the plan expected, over steps
  // [first_step, last_step].
  struct HotDrift {
    int64_t first_step = 0, last_step = 0;
    double measured = 0, expected = 0;
  };

  // REQUIRES: mu_ held.
  StatusOr<Watch*> WatchOf(int64_t job_id, int attempt);
  // Feeds `watch` the steps every rank has reported; a disagreement found,
  // and hot rows found drifting (*drift).
  std::optional<plan::Disagreement> FeedComplete(Watch* watch, std::optional<HotDrift>* drift);
  // One complete interval's hot-row counts into the watch's window.
  static std::optional<HotDrift> FeedHotRows(Watch* watch, int64_t first_step, int64_t last_step,
                                             double hits, double rows);
  // Stores the straggler `watch` measured when enough new steps came.
  Status StoreStraggler(int64_t job_id, Watch* watch, int64_t now);
  StatusOr<std::optional<ReplanRequest>> Report(int64_t job_id, const Watch& watch,
                                                const plan::Disagreement& d, int64_t now);
  // The event of hot rows drifting; with [plan] replan (once in the job's
  // life, as Report) a correction that leaves the model's time scales as
  // they are, so that the next attempt plans its hot rows again from what
  // its rank 0 re-measured (core/plan/hot_presence.h).
  StatusOr<std::optional<ReplanRequest>> ReportHotDrift(int64_t job_id, const Watch& watch,
                                                        const HotDrift& d, int64_t now);
  // Report's part that stores a correction and makes the request, or says
  // why not; appends to *message.
  StatusOr<std::optional<ReplanRequest>> RequestReplan(int64_t job_id, const Watch& watch,
                                                       const plan::PlanCorrection& c,
                                                       std::string* message, int64_t now);

  StateStore* const store_;
  std::mutex mu_;
  std::map<int64_t, Watch> watches_;  // GUARDED_BY(mu_), by job
};

}  // namespace parallax::coordinator

#endif  // PARALLAX_COORDINATOR_REPLAN_MONITOR_H_
