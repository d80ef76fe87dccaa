// ConsistencySwitches: a job's consistency mode switched at run time
// (`parallax set JOB consistency=...`), at a step the coordinator picks so
// that every trainer rank and PS shard switches at that very step.
//
// Each rank holds a lease (LeaseConsistency): a promise to run no step >=
// `until` before it asks again, and with each lease it receives every switch
// of the job. A switch is placed one step past the newest lease of the
// job's attempt, so every rank learns it before it runs the step before the
// switch: in time to tell the shards (a SET, schemas/ps_wire.md) before any
// message of the switch's step and to send the clock the new mode needs at
// the end of the step before. Lease and switch are taken under one lock, so
// no lease granted after a switch was placed can reach past it.
//
// Switches are stored in the key-value store (`job/<id>/consistency`, JSON),
// so they outlive coordinator restarts and a job's attempts: a resumed
// attempt replays them from its step on. Leases live in memory: after a
// coordinator restart a switch waits until every rank of the running attempt
// has renewed its lease (UNAVAILABLE until then).
//
// Thread-safe.
#ifndef PARALLAX_COORDINATOR_CONSISTENCY_SWITCHES_H_
#define PARALLAX_COORDINATOR_CONSISTENCY_SWITCHES_H_

#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "coordinator/store/state_store.h"
#include "parallax/status.h"

namespace parallax::coordinator {

struct ConsistencySwitchRecord {
  int64_t from_step = 0;
  std::string consistency;  // "sync", "async", "ssp:K"
};

class ConsistencySwitches {
 public:
  // `store` must outlive this.
  explicit ConsistencySwitches(StateStore* store) : store_(store) {}

  // Records that `rank` of (job, attempt) runs no step >= until before it
  // asks again (a lease of an older attempt than one already seen is
  // ignored), and returns every switch of the job, oldest first.
  StatusOr<std::vector<ConsistencySwitchRecord>> Lease(int64_t job_id, int attempt, int rank,
                                                       int64_t until);

  // Places a switch to `consistency` ("sync", "async", "ssp:K"; anything
  // else INVALID_ARGUMENT) for `job`: one step past the newest lease of its
  // attempt and past the job's previous switch. A RUNNING job must have a
  // lease from each of its `job.workers` ranks of the current attempt
  // (UNAVAILABLE otherwise: try again); a PENDING or PLACING one, whose ranks
  // have not started training, takes it from their first step on; a job
  // that ended is FAILED_PRECONDITION. Stores it and returns it.
  StatusOr<ConsistencySwitchRecord> Add(const JobRecord& job, const std::string& consistency,
                                        int64_t now);

 private:
  struct JobLeases {
    int attempt = 0;
    std::map<int, int64_t> until;  // by rank
  };
  // The job's switches: from memory, else from the store (once per job and
  // coordinator run: a lease costs no database read).
  StatusOr<const std::vector<ConsistencySwitchRecord>*> Read(int64_t job_id);

  StateStore* const store_;
  std::mutex mu_;
  std::map<int64_t, JobLeases> leases_;  // guarded by mu_, by job
  std::map<int64_t, std::vector<ConsistencySwitchRecord>> switches_;  // guarded by mu_, by job
};


}  // namespace parallax::coordinator

#endif  // PARALLAX_COORDINATOR_CONSISTENCY_SWITCHES_H_
