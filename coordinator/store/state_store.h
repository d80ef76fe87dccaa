// StateStore: the coordinator's durable state, behind a seam so that logic
// is written against it and tests can wrap it (fault injection). The real
// implementation is SQLite (coordinator/store/sqlite_state_store.h), schema in
// schemas/state.sql.
//
// Contract for every implementation:
// - Each method is one transaction: it either happens completely or not at
//   all. A method that changes a job also appends its event in the same
//   transaction.
// - Thread-safe: the service calls it from many connection threads.
// - Times are int64 milliseconds since the Unix epoch, passed in by the
//   caller (the service reads its Clock), never read inside the store.
// - Expected failures return a Status: NOT_FOUND for unknown ids,
//   FAILED_PRECONDITION for a disallowed state change, UNAVAILABLE when the
//   database is locked or read-only (nothing was changed), INTERNAL otherwise.
#ifndef PARALLAX_COORDINATOR_STATE_STORE_H_
#define PARALLAX_COORDINATOR_STATE_STORE_H_

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "coordinator/store/job_state.h"
#include "parallax/status.h"

namespace parallax {
struct JobConfig;  // parallax/job_config.h
}  // namespace parallax

namespace parallax::coordinator {

struct NewJob {
  std::string name;
  int workers = 1;
  std::string job_text;
  std::string job_path;
  std::string submitted_by;
};

struct JobRecord {
  int64_t id = 0;
  std::string name;
  JobState state = JobState::kPending;
  int workers = 1;
  int64_t step = 0;
  int64_t created = 0;
  int64_t updated = 0;
  int attempt = 0;
  int restarts = 0;  // automatic restarts since submitted or last resumed
  // Updates lost with PS shards started again alone (AddLostUpdates): the
  // sum of the known counts, and how many counts were unknown.
  int64_t lost_updates = 0;
  int lost_updates_unknown = 0;
  std::string reason;
  std::string job_text;
  std::string job_path;
  std::string submitted_by;
};

struct JobFilter {
  std::vector<JobState> states;  // empty: every state
  int limit = 0;                 // newest first; 0: no limit
};

struct EventRecord {
  int64_t seq = 0;
  int64_t job_id = 0;  // 0: not about a job
  int64_t time = 0;
  std::string kind;
  std::string message;
};

// An event to append together with other changes (UpsertTasks).
struct NewEvent {
  int64_t job_id = 0;  // 0: not about a job
  std::string kind;
  std::string message;
  int64_t time = 0;
};

// A job state change made together with others (ApplyChanges).
struct JobTransition {
  int64_t job_id = 0;
  JobState to = JobState::kPending;
  std::string reason;
};

struct AgentRecord {
  std::string name;
  std::string address;
  int slots = 0;
  int gpus = 0;
  std::string hostname;
  std::string version;
  int64_t registered = 0;
  int64_t last_seen = 0;
  bool draining = false;
  // Hosts PS shards only ([ps] hosts = "ps"), never a trainer rank.
  bool ps_host = false;
};

enum class TaskRole { kTrainer = 1, kPs = 2 };
enum class TaskState { kAssigned = 1, kRunning, kExited, kKilled, kLost };

struct TaskRecord {
  int64_t job_id = 0;
  int attempt = 0;
  TaskRole role = TaskRole::kTrainer;
  int index = 0;  // rank for trainers, shard for PS
  std::string agent_name;
  TaskState state = TaskState::kAssigned;
  std::optional<int> exit_code;
  std::optional<int> signal;
  std::string message;  // launch error, or the tail of the task's log when it ended
  int64_t updated = 0;
  // A PS shard's generation in its attempt: 1, then one more each time it is
  // started again alone after it was lost (coordinator/orchestration/shard_recovery.h).
  int generation = 1;
};

inline bool IsLive(TaskState s) { return s == TaskState::kAssigned || s == TaskState::kRunning; }

// A new attempt started together with other changes (ApplyChanges).
struct NewAttempt {
  int64_t job_id = 0;
  std::vector<TaskRecord> tasks;
  std::string message;
};

// What the orchestrator changes in one pass, written in one transaction.
struct StateChanges {
  std::vector<TaskRecord> tasks;           // upserted first
  std::vector<NewEvent> events;            // then appended
  std::vector<JobTransition> transitions;  // then made, in order, as TransitionJob does
  std::vector<NewAttempt> attempts;        // then started, in order, as StartAttempt does
  bool empty() const {
    return tasks.empty() && events.empty() && transitions.empty() && attempts.empty();
  }
};

struct MetricRecord {
  int64_t job_id = 0;
  int attempt = 0;
  int rank = 0;
  int64_t step = 0;
  double loss = 0;
  double throughput = 0;
  int64_t time = 0;
  std::map<std::string, double> values;  // MetricPoint.values
};

struct CheckpointRecord {
  int64_t job_id = 0;
  int attempt = 0;
  int64_t step = 0;
  std::string path;
  std::string manifest_sha256;
  int64_t created = 0;
};

class StateStore {
 public:
  virtual ~StateStore() = default;

  // ---- Jobs ----
  // Inserts a PENDING job (attempt 0) and its "submitted" event.
  virtual StatusOr<JobRecord> CreateJob(const NewJob& job, int64_t now) = 0;
  virtual StatusOr<JobRecord> GetJob(int64_t job_id) = 0;
  virtual StatusOr<std::vector<JobRecord>> ListJobs(const JobFilter& filter) = 0;
  // How many jobs are in each state (a state without a job is absent). This
  // default reads every job; implementations count without reading them.
  virtual StatusOr<std::map<JobState, int64_t>> CountJobs() {
    PX_ASSIGN_OR_RETURN(std::vector<JobRecord> jobs, ListJobs(JobFilter{}));
    std::map<JobState, int64_t> counts;
    for (const JobRecord& job : jobs) ++counts[job.state];
    return counts;
  }
  // Moves the job to `to` if IsValidTransition(current, to), records `reason`
  // (kept for FAILED/CANCELLED) and appends a "state" event saying
  // "FROM -> TO[: reason]". FAILED_PRECONDITION names the current state when
  // the move is not allowed. PLACING -> PENDING and RUNNING -> PENDING count
  // a restart; FAILED/CANCELLED -> PENDING (resume) resets the count.
  virtual StatusOr<JobRecord> TransitionJob(int64_t job_id, JobState to, const std::string& reason,
                                            int64_t now) = 0;
  // PLACING or RUNNING -> PENDING like TransitionJob, but not counted as a
  // restart: the attempt that ended was a partition-search trial
  // (coordinator/orchestration/partition_trials.h). FAILED_PRECONDITION from other states.
  virtual StatusOr<JobRecord> RequeueJob(int64_t job_id, const std::string& reason,
                                         int64_t now) = 0;

  // Replaces the job file of a FAILED or CANCELLED job (a resume with
  // another job file or worker count), with a "job" event saying `what`
  // changed. FAILED_PRECONDITION for a job in another state.
  virtual Status ReplaceJobText(int64_t job_id, const std::string& job_text,
                                const std::string& job_path, int workers, const std::string& what,
                                int64_t now) = 0;

  // ---- Events ----
  // Appends an event; returns its seq. job_id 0 is "no job"; any other id
  // must exist (NOT_FOUND).
  virtual StatusOr<int64_t> AppendEvent(int64_t job_id, const std::string& kind,
                                        const std::string& message, int64_t now) = 0;
  // Adds `lost` (>= 0; -1: unknown, counted in lost_updates_unknown) to the
  // job's lost updates and appends `message` as its event of kind "shard",
  // in one transaction. NOT_FOUND for an unknown job.
  virtual Status AddLostUpdates(int64_t job_id, int64_t lost, const std::string& message,
                                int64_t now) = 0;
  // Events with seq > after_seq in seq order, of one job (job_id > 0) or of
  // all (job_id == 0); at most `limit` (0: no limit).
  virtual StatusOr<std::vector<EventRecord>> ListEvents(int64_t job_id, int64_t after_seq,
                                                        int limit) = 0;

  // ---- Agents ----
  // Inserts or replaces the agent's registration (keeping `registered` from
  // the first time) with last_seen = now, and appends an "agent" event.
  virtual Status UpsertAgent(const AgentRecord& agent, int64_t now) = 0;
  // Sets last_seen for many agents in one transaction. Unknown names are
  // skipped; returns how many were updated.
  virtual StatusOr<int> TouchAgents(const std::vector<std::pair<std::string, int64_t>>& seen) = 0;
  virtual StatusOr<std::vector<AgentRecord>> ListAgents() = 0;
  // Sets whether the agent is draining and appends an "agent" event.
  // NOT_FOUND for an unknown agent.
  virtual Status SetAgentDraining(const std::string& name, bool draining, int64_t now) = 0;

  // Starts a new attempt: PENDING -> PLACING (attempt + 1), inserts `tasks`
  // (their attempt is set to the new one) and a "placed" event with
  // `message`, all in one transaction.
  virtual StatusOr<JobRecord> StartAttempt(int64_t job_id, const std::vector<TaskRecord>& tasks,
                                           const std::string& message, int64_t now) = 0;

  // Makes every change of `changes` in one transaction (one commit): each
  // as its own method would make it, all of them or none. Returns the jobs
  // as the transitions and then the attempts left them, in order.
  virtual StatusOr<std::vector<JobRecord>> ApplyChanges(const StateChanges& changes,
                                                        int64_t now) = 0;

  // ---- Tasks ----
  // Inserts or updates the task keyed by (job_id, attempt, role, index).
  virtual Status UpsertTask(const TaskRecord& task) = 0;
  // UpsertTask for many tasks, and AppendEvent for `events`, in one
  // transaction.
  virtual Status UpsertTasks(const std::vector<TaskRecord>& tasks,
                             const std::vector<NewEvent>& events) = 0;
  Status UpsertTasks(const std::vector<TaskRecord>& tasks) { return UpsertTasks(tasks, {}); }
  // Every ASSIGNED or RUNNING task of every job.
  virtual StatusOr<std::vector<TaskRecord>> ListLiveTasks() = 0;
  // Every task of the job, newest attempt first, then role, then index.
  virtual StatusOr<std::vector<TaskRecord>> ListTasks(int64_t job_id) = 0;

  // ---- Plans ----
  // Stores the plan of (job, attempt), replacing an earlier one.
  virtual Status PutPlan(int64_t job_id, int attempt, const std::string& plan_json,
                         int64_t now) = 0;
  // nullopt when there is no plan yet.
  virtual StatusOr<std::optional<std::string>> GetPlan(int64_t job_id, int attempt) = 0;

  // ---- Rendezvous key-value ----
  virtual Status KvSet(const std::string& key, const std::string& value, int64_t now) = 0;
  virtual StatusOr<std::optional<std::string>> KvGet(const std::string& key) = 0;
  // Adds delta to the decimal integer stored at key (absent = 0) and returns
  // the new value. INVALID_ARGUMENT if the stored value is not an integer.
  virtual StatusOr<int64_t> KvAdd(const std::string& key, int64_t delta, int64_t now) = 0;
  // How many keys start with `prefix` ("": every key).
  virtual StatusOr<int64_t> KvCount(const std::string& prefix) = 0;

  // ---- Metrics ----
  // Stores the points (stamped `now`) and raises each job's step to the
  // newest reported step. Unknown job ids are NOT_FOUND and nothing is stored.
  virtual Status RecordMetrics(const std::vector<MetricRecord>& points, int64_t now) = 0;
  // Points with step > after_step in (step, rank) order; at most limit (0: all).
  virtual StatusOr<std::vector<MetricRecord>> ListMetrics(int64_t job_id, int64_t after_step,
                                                          int limit) = 0;

  // ---- Checkpoints ----
  // Records a complete checkpoint and appends a "checkpoint" event. Idempotent:
  // the same (job, attempt, step, path, manifest) again returns OK and changes
  // nothing (a retried call whose first reply was lost); another path or
  // manifest for the same (job, attempt, step) replaces the row, with an event.
  virtual Status CommitCheckpoint(const CheckpointRecord& checkpoint, int64_t now) = 0;
  // Every checkpoint of the job, newest step first.
  virtual StatusOr<std::vector<CheckpointRecord>> ListCheckpoints(int64_t job_id) = 0;

  // ---- The stored job file, parsed ----
  // `job`'s job_text as a JobConfig (core/config/job_config.h; paths are not
  // checked: they are the submitting host's), the one way every room reads
  // a stored job's settings. Each job's text is parsed once and kept while
  // it is unchanged (`parallax resume` may edit it); the newest
  // kMaxParsedConfigs jobs are kept. The text was valid when the coordinator
  // took it; a key renamed since makes this INVALID_ARGUMENT, naming it.
  StatusOr<std::shared_ptr<const JobConfig>> ParsedConfig(const JobRecord& job);
  static constexpr size_t kMaxParsedConfigs = 1024;

 private:
  struct ParsedEntry {
    std::string job_text;
    std::string job_path;
    std::shared_ptr<const JobConfig> config;
  };
  std::mutex parsed_mu_;
  std::map<int64_t, ParsedEntry> parsed_;  // by job id; guarded by parsed_mu_
};

}  // namespace parallax::coordinator

#endif  // PARALLAX_COORDINATOR_STATE_STORE_H_
