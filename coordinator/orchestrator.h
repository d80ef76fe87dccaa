// Orchestrator: the coordinator's job lifecycle. It places PENDING jobs on
// agents (FIFO, coordinator/scheduler.h), tells each agent which tasks to
// start and stop (a hybrid job's PS shards only once rank 0 has stored the
// plan and it puts some variable on the PS; otherwise they are recorded as
// not launched, EXITED with code 0, and an event says so), records what
// agents report, and turns task outcomes into job states: RUNNING once every task started, SUCCEEDED when every trainer
// exited 0, a restart (a new attempt of the whole set) or FAILED when a task
// failed, its agent was lost, or a PS shard ended early.
//
// All of it is derived from the store (jobs, tasks, agents), so a
// coordinator restarted at any moment picks up where it was: Reconcile()
// recomputes what to do from durable state.
//
// Thread-safe: every public method takes mu_.
#ifndef PARALLAX_COORDINATOR_ORCHESTRATOR_H_
#define PARALLAX_COORDINATOR_ORCHESTRATOR_H_

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "coordinator/agent_liveness.h"
#include "coordinator/state_store.h"
#include "core/base/clock.h"
#include "core/base/status.h"
#include "core/config/job_config.h"
#include "schemas/coordinator_types.h"

namespace parallax::coordinator {

struct OrchestratorOptions {
  // An agent whose newest heartbeat is older than this is lost: its tasks
  // are marked LOST and their jobs restart or fail.
  int64_t agent_timeout_ms = 10'000;
};

struct AgentWork {
  std::vector<rpc::TaskAssignment> start;
  std::vector<rpc::TaskKey> stop;
};

class Orchestrator {
 public:
  // `store` and `clock` must outlive the orchestrator.
  Orchestrator(StateStore* store, Clock* clock, OrchestratorOptions options);

  // One pass: marks the tasks of lost agents, moves live jobs along from
  // their tasks' states, and places PENDING jobs in submission order.
  // `last_seen` holds the agents that talked to this coordinator process,
  // with heartbeat times newer than the store's; only they take new tasks.
  // Returns whether anything changed (so callers wake long polls).
  StatusOr<bool> Reconcile(const std::map<std::string, int64_t>& last_seen);

  // What `agent` must start and stop, given the tasks it runs now. With
  // `after_register` (the agent's first poll since it registered), tasks the
  // store believes run there but the agent does not list are marked LOST.
  StatusOr<AgentWork> WorkFor(const std::string& agent, const std::vector<rpc::TaskKey>& running,
                              bool after_register);

  // Records task state changes reported by `agent`. Reports about tasks the
  // agent does not hold, or that would revive an ended task, are ignored.
  Status ApplyReports(const std::string& agent, const std::vector<rpc::TaskReport>& reports);

  // Why a PENDING job has not started ("" when not known).
  std::string WaitingFor(int64_t job_id);

 private:
  // REQUIRES: mu_ held.
  StatusOr<std::shared_ptr<const JobConfig>> Config(const JobRecord& job);
  // Whether `attempt`'s PS shards must run: kUnknown while a hybrid job has
  // no plan stored yet.
  enum class ShardNeed { kYes, kNo, kUnknown };
  StatusOr<ShardNeed> ShardsNeeded(const JobRecord& job, int attempt);
  StatusOr<bool> MarkLostAgents(const std::map<std::string, int64_t>& last_seen,
                                std::set<std::string>* available);
  StatusOr<bool> AdvanceJob(const JobRecord& job);
  StatusOr<bool> PlacePending(const std::set<std::string>& available);
  StatusOr<rpc::TaskAssignment> Assignment(const JobRecord& job, const TaskRecord& task,
                                           const std::vector<TaskRecord>& attempt_tasks,
                                           int agent_gpus);

  StateStore* const store_;
  Clock* const clock_;
  const OrchestratorOptions options_;

  std::mutex mu_;
  std::map<int64_t, std::string> waiting_for_;                      // GUARDED_BY(mu_)
  std::map<int64_t, std::shared_ptr<const JobConfig>> configs_;     // GUARDED_BY(mu_)
  AgentLiveness liveness_;                                          // GUARDED_BY(mu_)
};

// "trainer/3" or "ps/0".
std::string TaskName(TaskRole role, int index);

}  // namespace parallax::coordinator

#endif  // PARALLAX_COORDINATOR_ORCHESTRATOR_H_
