// Orchestrator: the coordinator's job lifecycle. It places PENDING jobs on
// agents (FIFO, coordinator/orchestration/scheduler.h), tells each agent which tasks to
// start and stop (a hybrid job's PS shards only once rank 0 has stored the
// plan and it puts some variable on the PS; otherwise they are recorded as
// not launched, EXITED with code 0, and an event says so), records what
// agents report, and turns task outcomes into job states: RUNNING once
// every task started, SUCCEEDED when every trainer exited 0, a restart (a
// new attempt of the whole set) or FAILED when a task failed, its agent was
// lost, or a PS shard ended early.
//
// Durable state is the store's. What placement and the lifecycle read on
// every event is kept in memory (coordinator/orchestration/cluster_view.h) and built from
// the store by Init, so a coordinator restarted at any moment picks up where
// it was. The work is done in passes (Reconcile) that cost what changed
// since the last one (the reports that came, the jobs whose tasks changed,
// the head of the queue) and write all they change in one transaction, so
// a pass costs one commit however much it does. Callers that record an
// event (a submit, a report, a cancel) do not run a pass; the service's
// background loop does, woken and coalesced. A pass applies task changes in
// memory as it decides and job changes once committed; if the commit fails
// the memory is built again from the store.
//
// Thread-safety: every public method may be called from any thread. mu_
// guards the in-memory state; a pass holds it from start to commit, so that
// memory and store change in the same order. Submits and reports do not take
// mu_ (they are queued under their own lock), nor does WaitingFor, so none
// of them waits for a pass to finish deciding.
#ifndef PARALLAX_COORDINATOR_ORCHESTRATOR_H_
#define PARALLAX_COORDINATOR_ORCHESTRATOR_H_

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "coordinator/orchestration/agent_liveness.h"
#include "coordinator/orchestration/cluster_view.h"
#include "coordinator/orchestration/scheduler.h"
#include "coordinator/store/state_store.h"
#include "core/base/clock.h"
#include "core/config/job_config.h"
#include "parallax/status.h"
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
  bool empty() const { return start.empty() && stop.empty(); }
};

class Orchestrator {
 public:
  // `store` and `clock` must outlive the orchestrator.
  Orchestrator(StateStore* store, Clock* clock, OrchestratorOptions options);

  // Reads agents, live and pending jobs and live tasks from the store. Call
  // once, before anything else.
  Status Init();

  // ---- Jobs ----
  // Queues a job the store has just created (PENDING). Takes no lock a pass
  // holds. The queue is in id order; only two submits whose commits
  // overlapped (one group) may start the other way round, when a pass runs
  // between their two calls of Enqueue.
  void Enqueue(const JobRecord& job, const JobConfig& config);
  // PENDING, PLACING and RUNNING jobs (and those enqueued since the last
  // pass): what --max-active-jobs limits.
  int64_t ActiveJobs() const;
  // Cancels a live job (the store's FAILED_PRECONDITION for a finished one).
  StatusOr<JobRecord> Cancel(int64_t job_id, const std::string& reason);
  // FAILED or CANCELLED -> PENDING.
  StatusOr<JobRecord> Resume(int64_t job_id, const std::string& reason);
  // The plan of (job, attempt) was stored: it decides whether the shards start.
  void PlanStored(int64_t job_id, int attempt);
  // Something the job's lifecycle reads changed (a trial's published time).
  void JobChanged(int64_t job_id);
  // A checkpoint of (job, attempt) was committed: an elastic job running on
  // fewer workers than it asks for grows when slots are free
  // (coordinator/orchestration/resize.h).
  void CheckpointCommitted(int64_t job_id, int attempt, int64_t step);
  // (job, attempt) re-plans at its next committed checkpoint: the attempt
  // stops and the job is requeued (not a restart), its next attempt resuming
  // from that checkpoint (coordinator/orchestration/replan_monitor.h). Ignored for an
  // attempt that is no longer the job's current one.
  void ReplanAtCheckpoint(int64_t job_id, int attempt, const std::string& reason);
  // Why a PENDING job has not started ("" when not known).
  std::string WaitingFor(int64_t job_id) const;

  // ---- Agents ----
  // The agent's registration, if it ever registered.
  std::optional<AgentRecord> Agent(const std::string& name);
  // Stores the registration (keeping a drain) and lets the agent take tasks.
  Status RegisterAgent(const AgentRecord& agent, int64_t now);
  Status SetDraining(const std::string& name, bool draining, int64_t now);

  // What `agent` must start and stop, given the tasks it runs now. With
  // `after_register` (the agent's first poll since it registered), tasks the
  // store believes run there but the agent does not list are marked LOST.
  StatusOr<AgentWork> WorkFor(const std::string& agent, const std::vector<rpc::TaskKey>& running,
                              bool after_register);
  // WorkFor, waiting up to `timeout_ms` until there is some (a long poll).
  // UNAVAILABLE once Stop was called.
  StatusOr<AgentWork> WaitForWork(const std::string& agent,
                                  const std::vector<rpc::TaskKey>& running, int64_t timeout_ms);

  // Queues task state changes reported by `agent` for the next pass, which
  // records them; returns a ticket for WaitReports. Reports about tasks the
  // agent does not hold, or that would revive an ended task, are ignored.
  uint64_t QueueReports(const std::string& agent, const std::vector<rpc::TaskReport>& reports);
  // Waits up to `timeout_ms` until the pass that took `ticket` committed.
  // DEADLINE_EXCEEDED when it did not in time (the reports may still be
  // recorded); the commit's error if it failed; UNAVAILABLE after Stop.
  Status WaitReports(uint64_t ticket, int64_t timeout_ms);

  // One pass: takes the enqueued jobs and reports, moves the jobs whose
  // tasks changed, and places PENDING jobs in submission order. With
  // `last_seen` (the agents that talked to this coordinator process, with
  // heartbeat times newer than the store's) it also marks the tasks of lost
  // agents and looks at every live job. Returns whether anything changed.
  StatusOr<bool> Reconcile(const std::map<std::string, int64_t>* last_seen);

  // Wakes every WaitForWork and WaitReports (they fail with UNAVAILABLE).
  void Stop();

 private:
  using ShardNeed = LiveJob::ShardNeed;
  struct QueuedReports {
    std::string agent;
    std::vector<rpc::TaskReport> reports;
    uint64_t ticket = 0;
  };
  // What one pass changes, written in one transaction at its end.
  struct Pass {
    StateChanges changes;
    // The config of each transition's and each attempt's job, for ApplyJob.
    std::vector<std::shared_ptr<const JobConfig>> transition_configs, attempt_configs;
    std::set<int64_t> moved;         // jobs with a transition or attempt in this pass
    uint64_t reports_through = 0;    // the newest report ticket taken
    bool placed = false;             // whether placement ran (reasons are new)
    std::map<int64_t, std::string> reasons;
    int64_t blocked_by = 0;
  };
  // At most this many jobs start per pass (one transaction); the rest start
  // in the next round.
  static constexpr int kMaxAttemptsPerPass = 256;

  // REQUIRES: mu_ held, for every helper below.
  Status Load();  // builds view_ from the store
  StatusOr<ShardNeed> ShardsNeeded(LiveJob& job);
  const AttemptLayout& Layout(LiveJob& job);
  StatusOr<rpc::TaskAssignment> Assignment(LiveJob& job, const TaskRecord& task, int agent_gpus);
  StatusOr<AgentWork> WorkForLocked(const std::string& agent,
                                    const std::vector<rpc::TaskKey>& running, bool after_register);
  // Applies a job record the store returned: moves it between the queue,
  // the live jobs and neither, and wakes the agents whose work changed.
  void ApplyJob(const JobRecord& job, std::shared_ptr<const JobConfig> config);
  // Applies task changes (written, or to be written by this pass): marks
  // their jobs dirty, frees slots.
  void ApplyTasks(const std::vector<TaskRecord>& tasks);
  void WakeAgent(const std::string& name);
  void WakeAgentsOf(int64_t job_id);
  void DrainInbox();
  // The steps of a pass.
  // The corrected record when `report` is the final report of a task lost
  // for silence whose job is no longer live (read from the store).
  std::optional<TaskRecord> LateReportOfEndedJob(const TaskId& id, const std::string& agent,
                                                 const rpc::TaskReport& report, int64_t now);
  void TakeReports(Pass* pass);
  void MarkLostAgents(const std::map<std::string, int64_t>& last_seen, Pass* pass);
  Status AdvanceJob(int64_t job_id, Pass* pass);
  // Shards of `tasks` (the job's current attempt) that ended and are
  // started again alone as their next generation (coordinator/orchestration/shard_recovery.h):
  // written in the pass with their events. Returns whether any was (the
  // pointers in `tasks` are then stale).
  bool RestartShards(const LiveJob& live, const std::vector<const TaskRecord*>& tasks, Pass* pass);
  // Free trainer slots of the agents that take tasks.
  Capacity FreeCapacity();
  // An elastic job below its workers, after a checkpoint, when slots are
  // free: requeued (not a restart) to grow. Returns whether it was.
  StatusOr<bool> MaybeGrow(LiveJob& job, int64_t now);
  // A job asked to re-plan, after a checkpoint: requeued (not a restart).
  // Returns whether it was.
  StatusOr<bool> MaybeReplan(LiveJob& job, int64_t now);
  Status PlacePending(Pass* pass);
  // Adds the first (or next) attempt of a PENDING job at `placement`.
  // `elastic`: the event of an elastic attempt on fewer workers ("" if not).
  Status StartJob(const PendingJob& pending, const Placement& placement, const std::string& elastic,
                  Pass* pass);
  void Transition(const LiveJob& job, JobState to, const std::string& reason, Pass* pass);
  // Writes the pass and applies what it wrote; on failure builds the memory
  // again from the store.
  Status Commit(Pass* pass);
  void FinishReports(uint64_t through, const Status& status);

  StateStore* const store_;
  Clock* const clock_;
  const OrchestratorOptions options_;

  // Submitted jobs and reports not yet taken by a pass, and the reports'
  // outcomes.
  mutable std::mutex inbox_mu_;
  std::condition_variable reports_done_cv_;
  std::vector<PendingJob> inbox_;             // GUARDED_BY(inbox_mu_)
  std::vector<QueuedReports> report_inbox_;  // GUARDED_BY(inbox_mu_)
  uint64_t next_ticket_ = 1;                  // GUARDED_BY(inbox_mu_)
  uint64_t reports_done_ = 0;                 // GUARDED_BY(inbox_mu_): tickets recorded
  std::map<uint64_t, Status> report_errors_;  // GUARDED_BY(inbox_mu_)
  bool reports_stopped_ = false;              // GUARDED_BY(inbox_mu_)

  std::mutex pass_mu_;  // one pass at a time; taken before mu_

  mutable std::mutex mu_;
  ClusterView view_;                        // GUARDED_BY(mu_)
  AgentLiveness liveness_;                  // GUARDED_BY(mu_): which agents are lost
  std::set<int64_t> dirty_;                 // GUARDED_BY(mu_): live jobs to look at
  // Whether placement may find something new: set by what frees or adds
  // slots or queues a job that is not behind a blocked head.
  bool placement_dirty_ = true;             // GUARDED_BY(mu_)
  // When an elastic job's replacement wait ends (0: none): placement runs
  // again then.
  int64_t placement_recheck_at_ = 0;        // GUARDED_BY(mu_)
  bool stopping_ = false;                   // GUARDED_BY(mu_)

  // What `status` shows for waiting jobs, published after each placement.
  mutable std::mutex status_mu_;
  std::map<int64_t, std::string> waiting_for_;  // GUARDED_BY(status_mu_)
  int64_t blocked_by_ = 0;                      // GUARDED_BY(status_mu_): the queue's blocked head

  // view_.active_jobs() after each change, plus the inbox.
  std::atomic<int64_t> active_{0};
  std::atomic<int64_t> inbox_size_{0};
};

// "trainer/3" or "ps/0".
std::string TaskName(TaskRole role, int index);

// The PS shards a job file asks for, as PlacementRequest::shards: -1 for
// none (arch allreduce or allgather), 0 for one per host, or the number.
int RequestedShards(const JobConfig& config);

}  // namespace parallax::coordinator

#endif  // PARALLAX_COORDINATOR_ORCHESTRATOR_H_
