// ClusterView: the orchestrator's in-memory copy of the part of the state
// store that placement and the job lifecycle read on every event: agents
// and the slots their live tasks hold, the queue of PENDING jobs (what
// placement needs of each, not its text), the PLACING/RUNNING jobs, and the
// tasks that are live or belong to a live job's current attempt.
//
// It is a cache, never the truth: the orchestrator applies a job's change
// here once the store has it (task changes as a pass decides them, before
// the pass's one commit), builds it again from the store when that commit
// fails, and when a coordinator starts (Orchestrator::Init). So a pass costs
// what changed, not how many jobs the coordinator holds.
//
// Not thread-safe: the orchestrator guards it with its mutex.
#ifndef PARALLAX_COORDINATOR_CLUSTER_VIEW_H_
#define PARALLAX_COORDINATOR_CLUSTER_VIEW_H_

#include <compare>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "coordinator/store/state_store.h"
#include "core/config/job_config.h"
#include "parallax/settings.h"

namespace parallax::coordinator {

// A task's key; the order is the store's: job, attempt, trainers before PS
// shards, index.
struct TaskId {
  int64_t job_id = 0;
  int attempt = 0;
  TaskRole role = TaskRole::kTrainer;
  int index = 0;
  auto operator<=>(const TaskId&) const = default;
};

inline TaskId IdOf(const TaskRecord& t) { return {t.job_id, t.attempt, t.role, t.index}; }

struct AgentView {
  AgentRecord record;
  // Registered with this coordinator process (agents read from the store
  // take no task until they register again).
  bool here = false;
  // No heartbeat for the agent timeout; its "lost" event is written.
  bool lost = false;
  int trainers = 0;        // live trainer tasks on it: the slots they hold
  std::set<TaskId> tasks;  // its live tasks
  // Bumped whenever what the agent must start or stop may have changed; its
  // long poll waits on `work_cv` for a change of it.
  uint64_t work_seq = 0;
  std::unique_ptr<std::condition_variable> work_cv = std::make_unique<std::condition_variable>();
};

// What placement needs of a PENDING job.
struct PendingJob {
  int64_t id = 0;
  int attempt = 0;   // of the attempt that ended (0 before the first)
  int workers = 1;
  int shards = 0;    // PlacementRequest::shards
  PsHosts ps_hosts = PsHosts::kWorkers;  // [ps] hosts
  // Trainer agents of the attempt that ended, by rank (reused if they fit);
  // nullopt: not known yet (read from the store when the job is placed).
  std::optional<std::vector<std::string>> previous;
  // Why the stored job file cannot be used ("" when it can): the job fails
  // when its turn comes.
  std::string invalid;
  // Elastic workers (coordinator/orchestration/resize.h): a restarted attempt may take as
  // few as min_workers (== workers: not elastic) once no slot for the
  // others came within replace_timeout_ms of `since` (when the job became
  // PENDING).
  int min_workers = 0;
  int64_t replace_timeout_ms = 0;
  int64_t since = 0;
};

// Ranks and hosts of one attempt, as every assignment of it reports them.
struct AttemptLayout {
  std::vector<std::string> hosts;  // agents, in task order, each once: trainers' first
  std::map<std::string, int> host_index;
  std::map<std::string, int> local_size;  // trainers per agent
  std::map<int, int> local_rank;          // trainer index -> rank on its agent
  int world = 0;
  int shards = 0;
};

struct LiveJob {
  JobRecord record;  // PLACING or RUNNING, with its text
  std::shared_ptr<const JobConfig> config;
  // Whether the current attempt's PS shards must run: kYes, kNo, or
  // kUnknown while a hybrid job has no plan; nullopt until read.
  enum class ShardNeed { kYes, kNo, kUnknown };
  std::optional<ShardNeed> shard_need;
  std::shared_ptr<const AttemptLayout> layout;  // of record.attempt; built on first use
  // A checkpoint of record.attempt was committed since the job was last
  // looked at: an elastic job on fewer workers than it asks for may grow.
  int64_t checkpointed_step = -1;
  // Non-empty: record.attempt re-plans at its next checkpoint, for this
  // reason (coordinator/orchestration/replan_monitor.h).
  std::string replan;
};

class ClusterView {
 public:
  // ---- Agents ----
  // Inserts the agent or replaces its record (keeping its tasks and flags).
  AgentView& PutAgent(const AgentRecord& record);
  AgentView* FindAgent(const std::string& name);
  std::map<std::string, AgentView>& agents() { return agents_; }

  // ---- Jobs ----
  void PutPending(PendingJob job) { pending_[job.id] = std::move(job); }
  void ErasePending(int64_t id) { pending_.erase(id); }
  const std::map<int64_t, PendingJob>& pending() const { return pending_; }
  // Inserts or replaces a live job. A new attempt drops the ended tasks of
  // the earlier one.
  LiveJob& PutLive(LiveJob job);
  LiveJob* FindLive(int64_t id);
  const std::map<int64_t, LiveJob>& live() const { return live_; }
  // Forgets a job that is no longer PLACING/RUNNING, and its ended tasks.
  void EraseLive(int64_t id);
  size_t active_jobs() const { return pending_.size() + live_.size(); }

  // ---- Tasks ----
  // Inserts or replaces a task. A task is kept while it is live or belongs
  // to the current attempt of a live job.
  void PutTask(const TaskRecord& task);
  const TaskRecord* FindTask(const TaskId& id) const;
  // The kept tasks of (job, attempt): trainers first, by index.
  std::vector<const TaskRecord*> AttemptTasks(int64_t job_id, int attempt) const;
  // The live tasks of a job, of any attempt.
  std::vector<const TaskRecord*> LiveTasksOf(int64_t job_id) const;
  int LiveTaskCount(int64_t job_id) const;

 private:
  bool Keep(const TaskRecord& t) const;
  void Index(const TaskRecord& t);
  void Unindex(const TaskRecord& t);
  // Erases the ended tasks of `job_id` that Keep no longer wants.
  void DropEnded(int64_t job_id);

  std::map<std::string, AgentView> agents_;
  std::map<int64_t, PendingJob> pending_;
  std::map<int64_t, LiveJob> live_;
  std::map<TaskId, TaskRecord> tasks_;
  std::map<int64_t, int> live_tasks_of_;  // job -> live tasks, any attempt
};

}  // namespace parallax::coordinator

#endif  // PARALLAX_COORDINATOR_CLUSTER_VIEW_H_
