// Shard recovery: whether a PS shard that ended is started again alone, in
// the same attempt, as its next generation (docs/RELIABILITY.md, "A lost PS
// shard"), or fails its attempt like any other task (the whole job restarts
// or fails). A pure function of the job's settings, the task and where it
// ran, so that the rule is tested apart from the orchestrator, which calls
// it from its pass.
//
// And the fencing of task reports by generation: what an agent reports
// about an older generation of a shard (the dead process's EXITED or
// KILLED, arriving after its successor was assigned) changes nothing.
#ifndef PARALLAX_COORDINATOR_SHARD_RECOVERY_H_
#define PARALLAX_COORDINATOR_SHARD_RECOVERY_H_

#include <string>

#include "coordinator/store/state_store.h"
#include "core/config/job_config.h"
#include "schemas/coordinator_types.h"

namespace parallax::coordinator {

// What the decision reads besides the job file and the task.
struct ShardRecoveryContext {
  // The agent the shard ran on takes tasks now: registered with this
  // coordinator, not lost, not draining.
  bool agent_available = false;
  // Some trainer of the attempt failed too: the attempt restarts anyway.
  bool trainer_failed = false;
};

struct ShardRecoveryDecision {
  bool restart = false;  // start generation `generation` of the shard on its agent
  int generation = 0;
  // Why not (for the log), or "" when it restarts or the task is no
  // candidate at all (a trainer, a live task, a shard never launched).
  std::string why_not;
};

// A shard `task` of a live attempt that ended (EXITED or KILLED) restarts
// alone when the job is async or ssp, has no `[ps] shared_memory` (its
// regions are mapped by one shard process and the ranks' clients do not
// follow a next generation), writes checkpoints (`checkpoint_every`, so the
// successor has a state to load), its agent is available, no trainer
// failed, and the shard has been started again alone fewer than
// `max_restarts` times in this attempt (its generation ≤ max_restarts), so
// a shard that keeps crashing at start ends in the job's ordinary failure
// path. A LOST shard (its agent lost, or never launched) is never
// restarted alone: the lost-agent path applies. Sync jobs never: their
// guarantee needs one consistent cut of every shard and rank.
ShardRecoveryDecision DecideShardRecovery(const JobConfig& config, const TaskRecord& task,
                                          const ShardRecoveryContext& context);

// The generation a report names (absent: 1).
int ReportedGeneration(const rpc::TaskKey& key);

// Whether a report about `key` is about an older generation than `current`
// (the coordinator's record of the task): it is then ignored.
bool IsStaleGeneration(const TaskRecord& current, const rpc::TaskKey& key);

// The event of a restart: `shard 0 lost (ps/0 on agent "a" was killed by
// signal 9 (SIGKILL)), generation 2 started on agent "a"`.
std::string ShardRestartEvent(const TaskRecord& ended, int generation);

}  // namespace parallax::coordinator

#endif  // PARALLAX_COORDINATOR_SHARD_RECOVERY_H_
