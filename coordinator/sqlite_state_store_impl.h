// The SQLite StateStore's class, shared by the files that implement it:
// coordinator/sqlite_state_store.cc (opening and migrating, jobs, events,
// agents, tasks and attempts) and coordinator/sqlite_state_store_job_data.cc
// (plans, rendezvous key-value, metrics, checkpoints). Private to
// px_coordinator: everyone else opens a store with OpenSqliteStateStore
// (coordinator/sqlite_state_store.h).
#ifndef PARALLAX_COORDINATOR_SQLITE_STATE_STORE_IMPL_H_
#define PARALLAX_COORDINATOR_SQLITE_STATE_STORE_IMPL_H_

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "coordinator/sqlite_util.h"
#include "coordinator/state_store.h"
#include "core/base/status.h"

namespace parallax::coordinator::sqlite_internal {

// How messages name a key ("KEY" in double quotes) and a job (job "ID").
std::string Quote(std::string_view s);
std::string JobRef(int64_t job_id);

// A list call's limit as SQL's LIMIT (0: no limit), and the check that it
// is not negative (INVALID_ARGUMENT).
int64_t SqlLimit(int limit);
Status CheckLimit(int limit);

// Strict decimal int64: optional '-', digits, nothing else.
std::optional<int64_t> ParseInt64(std::string_view text);

class SqliteStateStore final : public StateStore {
 public:
  explicit SqliteStateStore(std::unique_ptr<SqliteConnection> db) : db_(std::move(db)) {}

  // Sets the pragmas and applies the migrations up to `max_schema_version`
  // (0: latest). Called once, before the store is shared.
  Status Init(int max_schema_version);

  StatusOr<JobRecord> CreateJob(const NewJob& job, int64_t now) override;
  StatusOr<JobRecord> GetJob(int64_t job_id) override;
  StatusOr<std::vector<JobRecord>> ListJobs(const JobFilter& filter) override;
  StatusOr<std::map<JobState, int64_t>> CountJobs() override;
  StatusOr<JobRecord> TransitionJob(int64_t job_id, JobState to, const std::string& reason,
                                    int64_t now) override;
  StatusOr<JobRecord> RequeueJob(int64_t job_id, const std::string& reason, int64_t now) override;
  StatusOr<int64_t> AppendEvent(int64_t job_id, const std::string& kind, const std::string& message,
                                int64_t now) override;
  StatusOr<std::vector<EventRecord>> ListEvents(int64_t job_id, int64_t after_seq,
                                                int limit) override;
  Status UpsertAgent(const AgentRecord& agent, int64_t now) override;
  StatusOr<int> TouchAgents(const std::vector<std::pair<std::string, int64_t>>& seen) override;
  StatusOr<std::vector<AgentRecord>> ListAgents() override;
  Status SetAgentDraining(const std::string& name, bool draining, int64_t now) override;
  StatusOr<JobRecord> StartAttempt(int64_t job_id, const std::vector<TaskRecord>& tasks,
                                   const std::string& message, int64_t now) override;
  Status UpsertTask(const TaskRecord& task) override;
  Status UpsertTasks(const std::vector<TaskRecord>& tasks) override;
  StatusOr<std::vector<TaskRecord>> ListTasks(int64_t job_id) override;
  StatusOr<std::vector<TaskRecord>> ListLiveTasks() override;
  Status PutPlan(int64_t job_id, int attempt, const std::string& plan_json, int64_t now) override;
  StatusOr<std::optional<std::string>> GetPlan(int64_t job_id, int attempt) override;
  Status KvSet(const std::string& key, const std::string& value, int64_t now) override;
  StatusOr<std::optional<std::string>> KvGet(const std::string& key) override;
  StatusOr<int64_t> KvAdd(const std::string& key, int64_t delta, int64_t now) override;
  StatusOr<int64_t> KvCount(const std::string& prefix) override;
  Status RecordMetrics(const std::vector<MetricRecord>& points, int64_t now) override;
  StatusOr<std::vector<MetricRecord>> ListMetrics(int64_t job_id, int64_t after_step,
                                                  int limit) override;
  Status CommitCheckpoint(const CheckpointRecord& checkpoint, int64_t now) override;
  StatusOr<std::vector<CheckpointRecord>> ListCheckpoints(int64_t job_id) override;

 private:
  StatusOr<JobRecord> TransitionJob(int64_t job_id, JobState to, const std::string& reason,
                                    int64_t now, bool count_restart);
  // Runs `fn` (returning Status or StatusOr<T>) in one transaction under mu_
  // and commits if it succeeded; otherwise the transaction rolls back.
  template <typename Fn>
  auto InTransaction(SqliteTransaction::Mode mode, Fn fn) -> decltype(fn()) {
    std::lock_guard<std::mutex> lock(mu_);
    SqliteTransaction txn(db_.get());
    PX_RETURN_IF_ERROR(txn.Begin(mode));
    auto result = fn();
    if (!result.ok()) return result;
    PX_RETURN_IF_ERROR(txn.Commit());
    return result;
  }
  template <typename Fn>
  auto Write(Fn fn) {
    return InTransaction(SqliteTransaction::Mode::kWrite, std::move(fn));
  }
  template <typename Fn>
  auto Read(Fn fn) {
    return InTransaction(SqliteTransaction::Mode::kRead, std::move(fn));
  }

  // The helpers below REQUIRE mu_ held and an open transaction.
  StatusOr<JobRecord> LoadJob(int64_t job_id);  // NOT_FOUND if unknown
  Status CheckJob(int64_t job_id);              // NOT_FOUND if unknown
  StatusOr<int64_t> InsertEvent(int64_t job_id, std::string_view kind, std::string_view message,
                                int64_t now);
  StatusOr<JobRecord> ReadJob(const SqliteStatement& row) const;
  Status WriteTask(const TaskRecord& task);
  // Deletes the job's rendezvous keys "job/<id>/<attempt>/..." of attempts
  // before `attempt` (a new attempt starts with none of theirs; what the
  // coordinator published for `attempt` itself stays), or with attempt 0
  // every key under "job/<id>/" (the job ended). Inside a Write.
  Status DropJobKeys(int64_t job_id, int attempt);
  StatusOr<TaskRecord> ReadTask(const SqliteStatement& row) const;
  StatusOr<std::vector<TaskRecord>> ReadTasks(SqliteStatement& stmt) const;

  std::mutex mu_;
  // The one connection; its pointer is constant after construction, every
  // use of it is GUARDED_BY(mu_).
  const std::unique_ptr<SqliteConnection> db_;
};

}  // namespace parallax::coordinator::sqlite_internal

#endif  // PARALLAX_COORDINATOR_SQLITE_STATE_STORE_IMPL_H_
