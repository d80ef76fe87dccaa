// The SQLite StateStore's class, shared by the files that implement it:
// coordinator/store/sqlite_state_store.cc (opening and migrating, jobs, events,
// agents, tasks and attempts) and coordinator/store/sqlite_state_store_job_data.cc
// (plans, rendezvous key-value, metrics, checkpoints). Private to
// px_coordinator: everyone else opens a store with OpenSqliteStateStore
// (coordinator/store/sqlite_state_store.h).
#ifndef PARALLAX_COORDINATOR_SQLITE_STATE_STORE_IMPL_H_
#define PARALLAX_COORDINATOR_SQLITE_STATE_STORE_IMPL_H_

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include "coordinator/store/sqlite_state_store.h"
#include "coordinator/store/sqlite_util.h"
#include "coordinator/store/sqlite_write_queue.h"
#include "coordinator/store/state_store.h"
#include "parallax/status.h"

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
  explicit SqliteStateStore(std::unique_ptr<SqliteConnection> db)
      : db_(std::move(db)), writes_(db_.get()) {}
  ~SqliteStateStore() override;  // stops the checkpoint thread

  // Sets the pragmas and applies the migrations up to
  // options.max_schema_version (0: latest), then opens options.readers more
  // connections to the same file for read transactions, so that reads never
  // wait behind a commit (in WAL mode a reader sees the newest committed
  // state without the write lock), and starts the checkpoint thread. An
  // in-memory database gets neither: its reads use the writer connection.
  // Called once, before the store is shared.
  Status Init(const SqliteStateStoreOptions& options);

  StatusOr<JobRecord> CreateJob(const NewJob& job, int64_t now) override;
  StatusOr<JobRecord> GetJob(int64_t job_id) override;
  StatusOr<std::vector<JobRecord>> ListJobs(const JobFilter& filter) override;
  StatusOr<std::map<JobState, int64_t>> CountJobs() override;
  StatusOr<JobRecord> TransitionJob(int64_t job_id, JobState to, const std::string& reason,
                                    int64_t now) override;
  StatusOr<JobRecord> RequeueJob(int64_t job_id, const std::string& reason, int64_t now) override;
  Status ReplaceJobText(int64_t job_id, const std::string& job_text, const std::string& job_path,
                        int workers, const std::string& what, int64_t now) override;
  Status AddLostUpdates(int64_t job_id, int64_t lost, const std::string& message,
                        int64_t now) override;
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
  StatusOr<std::vector<JobRecord>> ApplyChanges(const StateChanges& changes,
                                                int64_t now) override;
  Status UpsertTask(const TaskRecord& task) override;
  using StateStore::UpsertTasks;
  Status UpsertTasks(const std::vector<TaskRecord>& tasks,
                     const std::vector<NewEvent>& events) override;
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
  // The bodies of TransitionJob and StartAttempt, inside a Write.
  StatusOr<JobRecord> TransitionIn(SqliteConnection* db, int64_t job_id, JobState to,
                                   const std::string& reason, int64_t now, bool count_restart);
  StatusOr<JobRecord> StartAttemptIn(SqliteConnection* db, int64_t job_id,
                                     const std::vector<TaskRecord>& tasks,
                                     const std::string& message, int64_t now);
  // The pragmas and migrations of Init, on the writer connection.
  Status Migrate(int max_schema_version);

  // Runs `fn(db)` (returning Status or StatusOr<T>) in a write transaction
  // on the writer connection, group-committed with concurrent writers
  // (coordinator/store/sqlite_write_queue.h): it happens completely or not at all,
  // and is committed when this returns OK.
  template <typename Fn>
  auto Write(Fn fn) -> decltype(fn(std::declval<SqliteConnection*>())) {
    using Result = decltype(fn(std::declval<SqliteConnection*>()));
    std::optional<Result> result;
    const std::function<Status(SqliteConnection*)> work = [&](SqliteConnection* db) -> Status {
      result.emplace(fn(db));
      return StatusOf(*result);
    };
    Status status = writes_.Run(work);
    if (!result.has_value() || !status.ok()) return status;
    return std::move(*result);
  }
  // Runs `fn(db)` in a read transaction on a reader connection (or on the
  // writer, for an in-memory database).
  template <typename Fn>
  auto Read(Fn fn) -> decltype(fn(std::declval<SqliteConnection*>())) {
    if (readers_.empty()) {
      std::lock_guard<std::mutex> lock(writes_.connection_mu());
      return ReadOn(db_.get(), fn);
    }
    SqliteConnection* reader = AcquireReader();
    auto result = ReadOn(reader, fn);
    ReleaseReader(reader);
    return result;
  }
  template <typename Fn>
  static auto ReadOn(SqliteConnection* db, Fn& fn) -> decltype(fn(db)) {
    SqliteTransaction txn(db);
    PX_RETURN_IF_ERROR(txn.Begin(SqliteTransaction::Mode::kRead));
    auto result = fn(db);
    if (!result.ok()) return result;
    PX_RETURN_IF_ERROR(txn.Commit());
    return result;
  }
  static Status StatusOf(const Status& s) { return s; }
  template <typename T>
  static Status StatusOf(const StatusOr<T>& s) {
    return s.status();
  }
  void CheckpointLoop(std::chrono::milliseconds interval);
  SqliteConnection* AcquireReader();
  void ReleaseReader(SqliteConnection* reader);

  // The helpers below REQUIRE an open transaction on `db`.
  StatusOr<JobRecord> LoadJob(SqliteConnection* db, int64_t job_id);  // NOT_FOUND if unknown
  Status CheckJob(SqliteConnection* db, int64_t job_id);              // NOT_FOUND if unknown
  StatusOr<int64_t> InsertEvent(SqliteConnection* db, int64_t job_id, std::string_view kind,
                                std::string_view message, int64_t now);
  StatusOr<JobRecord> ReadJob(const SqliteStatement& row) const;
  // Inserts or updates the tasks (their jobs must exist: NOT_FOUND).
  Status WriteTasks(SqliteConnection* db, const std::vector<TaskRecord>& tasks);
  // Deletes the job's rendezvous keys "job/<id>/<attempt>/..." of attempts
  // before `attempt` (a new attempt starts with none of theirs; what the
  // coordinator published for `attempt` itself stays), or with attempt 0
  // every key under "job/<id>/" (the job ended). Inside a Write.
  Status DropJobKeys(SqliteConnection* db, int64_t job_id, int attempt);
  StatusOr<TaskRecord> ReadTask(const SqliteStatement& row) const;
  StatusOr<std::vector<TaskRecord>> ReadTasks(SqliteStatement& stmt) const;

  // The writer connection; its pointer is constant after construction, and
  // it is used only inside writes_ (or under writes_.connection_mu()).
  const std::unique_ptr<SqliteConnection> db_;
  SqliteWriteQueue writes_;
  // Reader connections, constant after Init; each is used by one read at a
  // time, handed out from free_readers_.
  std::vector<std::unique_ptr<SqliteConnection>> readers_;
  std::mutex readers_mu_;
  std::condition_variable reader_free_;
  std::vector<SqliteConnection*> free_readers_;  // GUARDED_BY(readers_mu_)
  // Checkpoints of the write-ahead log, on their own connection and thread
  // (null: SQLite checkpoints in the commit that fills the log).
  std::unique_ptr<SqliteConnection> checkpoint_db_;
  std::mutex checkpoint_mu_;
  std::condition_variable checkpoint_cv_;
  bool stop_checkpoints_ = false;  // GUARDED_BY(checkpoint_mu_)
  std::thread checkpointer_;
};

}  // namespace parallax::coordinator::sqlite_internal

#endif  // PARALLAX_COORDINATOR_SQLITE_STATE_STORE_IMPL_H_
