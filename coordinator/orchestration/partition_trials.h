// The partition search by trial attempts ([ps] partitions = "auto"), as the
// orchestrator drives it. Before the real attempt of such a job, the
// coordinator starts short trial attempts (real shards, real steps) at the
// values of P that core/plan/partition_search.h proposes. Before each
// attempt of such a job the coordinator publishes the attempt's P (and, for
// a trial, its step budget) under job/<id>/<attempt>/search, which the
// trainer ranks read when their session is created (trainer/search_trial.h);
// a trial's rank 0 publishes its median step time under
// job/<id>/<attempt>/trial/step_seconds. The fit and the choice are events
// (kind "search"), and the real attempt runs with the chosen P, which its
// plan then shows.
//
// A trial ends the moment its time is published (the job is requeued
// without counting a restart, and the trial's tasks are stopped). It leaves
// no checkpoint (trial ranks write none). A trial that fails, or ends
// without a time, ends the search: the real attempt falls back to the
// default P (one partition per shard).
//
// The state of the search is durable, in the key-value store under
// job/<id>/search (JSON), so a restarted coordinator continues it.
//
// Not thread-safe: the orchestrator calls these under its mutex.
#ifndef PARALLAX_COORDINATOR_PARTITION_TRIALS_H_
#define PARALLAX_COORDINATOR_PARTITION_TRIALS_H_

#include <cstdint>
#include <string>

#include "coordinator/store/state_store.h"
#include "core/config/job_config.h"
#include "parallax/status.h"

namespace parallax::coordinator {

// Whether the job searches P: [ps] partitions = "auto" written (without the
// key P is one partition per shard) and an arch that puts sparse variables
// on PS (hybrid or ps).
bool WantsPartitionSearch(const JobConfig& config);

struct AttemptStart {
  bool trial = false;
  uint32_t partitions = 0;  // P of the attempt; 0: the default (one per shard)
  std::string message;      // for the "placed" event; may be empty
};

// Called just before the orchestrator starts attempt job.attempt + 1 of a
// PENDING job with `shards` PS shards. Begins or continues the search, or
// finishes it (events with every trial, the fit and the choice) when no
// trial is left; publishes the attempt's settings.
StatusOr<AttemptStart> BeginAttempt(StateStore* store, const JobRecord& job,
                                    const JobConfig& config, int shards, int64_t now);

// Called by the orchestrator for the job's current attempt. When it is a
// trial whose time is published, or that failed (`failure` non-empty:
// what failed) or ended without a time (`trainers_done`), records the
// outcome, requeues the job without counting a restart and returns true.
// Returns false otherwise (not a trial, or still running).
StatusOr<bool> EndTrialIfOver(StateStore* store, const JobRecord& job, const JobConfig& config,
                              const std::string& failure, bool trainers_done, int64_t now);


}  // namespace parallax::coordinator

#endif  // PARALLAX_COORDINATOR_PARTITION_TRIALS_H_
