// The SQLite StateStore. One connection, guarded by a mutex: every method
// takes the mutex, runs one transaction (BEGIN IMMEDIATE for writes, a
// deferred read transaction for reads) and commits, or rolls back on any
// failure so that nothing of a failed call remains. SQL text is constant;
// every value from a caller is a bound parameter.
#include "coordinator/sqlite_state_store.h"

#include <algorithm>
#include <charconv>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <utility>

#include "coordinator/sqlite_util.h"
#include "coordinator/state_sql.h"
#include "core/base/logging.h"

namespace parallax::coordinator {

namespace {

// The sections of schemas/state.sql, parsed once. The text is compiled in,
// so a malformed file is a build defect, not a runtime condition.
const std::vector<SqlMigration>& Migrations() {
  static const std::vector<SqlMigration>* const migrations = [] {
    StatusOr<std::vector<SqlMigration>> parsed = ParseMigrations(kStateSql);
    PX_CHECK(parsed.ok()) << parsed.status().ToString();
    return new std::vector<SqlMigration>(std::move(parsed).value());
  }();
  return *migrations;
}

std::string Quote(std::string_view s) { return "\"" + std::string(s) + "\""; }
std::string JobRef(int64_t job_id) { return "job " + Quote(std::to_string(job_id)); }

std::string_view TaskRoleName(TaskRole role) {
  switch (role) {
    case TaskRole::kTrainer:
      return "TRAINER";
    case TaskRole::kPs:
      return "PS";
  }
  return "";
}

std::optional<TaskRole> ParseTaskRole(std::string_view name) {
  for (TaskRole role : {TaskRole::kTrainer, TaskRole::kPs}) {
    if (TaskRoleName(role) == name) return role;
  }
  return std::nullopt;
}

std::string_view TaskStateName(TaskState state) {
  switch (state) {
    case TaskState::kAssigned:
      return "ASSIGNED";
    case TaskState::kRunning:
      return "RUNNING";
    case TaskState::kExited:
      return "EXITED";
    case TaskState::kKilled:
      return "KILLED";
    case TaskState::kLost:
      return "LOST";
  }
  return "";
}

std::optional<TaskState> ParseTaskState(std::string_view name) {
  for (TaskState state : {TaskState::kAssigned, TaskState::kRunning, TaskState::kExited,
                          TaskState::kKilled, TaskState::kLost}) {
    if (TaskStateName(state) == name) return state;
  }
  return std::nullopt;
}

// SQLite treats a negative LIMIT as "no limit".
int64_t SqlLimit(int limit) { return limit == 0 ? -1 : limit; }

Status CheckLimit(int limit) {
  if (limit < 0)
    return InvalidArgument("limit must be 0 (no limit) or positive, got " + std::to_string(limit));
  return Status::Ok();
}

// Strict decimal int64: optional '-', digits, nothing else.
std::optional<int64_t> ParseInt64(std::string_view text) {
  int64_t value = 0;
  const char* end = text.data() + text.size();
  const auto [ptr, ec] = std::from_chars(text.data(), end, value);
  if (text.empty() || ec != std::errc() || ptr != end) return std::nullopt;
  return value;
}

constexpr char kJobColumns[] =
    "id, name, state, workers, step, created, updated, attempt, reason, job_text, job_path, "
    "submitted_by, restarts";
constexpr char kAgentColumns[] =
    "name, address, slots, gpus, hostname, version, registered, last_seen, draining";
constexpr char kTaskColumns[] =
    "job_id, attempt, role, task_index, agent_name, state, exit_code, signal, updated, message";

class SqliteStateStore final : public StateStore {
 public:
  explicit SqliteStateStore(std::unique_ptr<SqliteConnection> db) : db_(std::move(db)) {}

  // Sets the pragmas and applies the migrations up to `max_schema_version`
  // (0: latest). Called once, before the store is shared.
  Status Init(int max_schema_version);

  StatusOr<JobRecord> CreateJob(const NewJob& job, int64_t now) override;
  StatusOr<JobRecord> GetJob(int64_t job_id) override;
  StatusOr<std::vector<JobRecord>> ListJobs(const JobFilter& filter) override;
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

// ---- Opening and migrating ----

Status SqliteStateStore::Init(int max_schema_version) {
  std::lock_guard<std::mutex> lock(mu_);
  // The first statement reads the file header: a file that is not a
  // database fails here (NOTADB), before anything is written to it.
  PX_ASSIGN_OR_RETURN(int64_t version, db_->PragmaInt("user_version"));
  const int latest = LatestSchemaVersion();
  if (version > latest) {
    return FailedPrecondition("database '" + db_->path() +
                              "' was written by a newer Parallax (schema " +
                              std::to_string(version) + " > " + std::to_string(latest) +
                              "); upgrade parallax-coordinator");
  }
  if (version < 0) {
    return FailedPrecondition("file '" + db_->path() +
                              "' is not a Parallax state database (schema " +
                              std::to_string(version) + ")");
  }
  // Refuse someone else's database before anything (even the journal mode)
  // is written to it.
  if (version == 0) PX_RETURN_IF_ERROR(CheckNoForeignTables(db_.get()));
  {
    PX_ASSIGN_OR_RETURN(SqliteStatement wal, db_->Prepare("PRAGMA journal_mode = WAL"));
    PX_ASSIGN_OR_RETURN(bool row, wal.Step());
    const std::string mode = row ? wal.ColumnText(0) : std::string();
    if (mode != "wal" && db_->path() != ":memory:") {
      PX_LOG(WARNING) << "database '" << db_->path() << "' runs in journal mode '" << mode
                      << "', not WAL";
    }
  }
  PX_RETURN_IF_ERROR(db_->Exec("PRAGMA foreign_keys = ON; PRAGMA synchronous = FULL"));
  PX_ASSIGN_OR_RETURN(int64_t foreign_keys, db_->PragmaInt("foreign_keys"));
  if (foreign_keys != 1) {
    return Internal("this SQLite library cannot enforce foreign keys; rebuild it with them");
  }
  return ApplyMigrations(db_.get(), Migrations(),
                         max_schema_version == 0 ? latest : std::min(max_schema_version, latest));
}

// ---- Shared helpers ----

StatusOr<JobRecord> SqliteStateStore::ReadJob(const SqliteStatement& row) const {
  JobRecord job;
  job.id = row.ColumnInt64(0);
  job.name = row.ColumnText(1);
  const std::string state = row.ColumnText(2);
  std::optional<JobState> parsed = ParseJobState(state);
  if (!parsed) {
    return Internal(JobRef(job.id) + " has unknown state '" + state + "' in database '" +
                    db_->path() + "'");
  }
  job.state = *parsed;
  job.workers = static_cast<int>(row.ColumnInt64(3));
  job.step = row.ColumnInt64(4);
  job.created = row.ColumnInt64(5);
  job.updated = row.ColumnInt64(6);
  job.attempt = static_cast<int>(row.ColumnInt64(7));
  job.reason = row.ColumnText(8);
  job.job_text = row.ColumnText(9);
  job.job_path = row.ColumnText(10);
  job.submitted_by = row.ColumnText(11);
  job.restarts = static_cast<int>(row.ColumnInt64(12));
  return job;
}

StatusOr<JobRecord> SqliteStateStore::LoadJob(int64_t job_id) {
  PX_ASSIGN_OR_RETURN(SqliteStatement stmt, db_->Prepare(std::string("SELECT ") + kJobColumns +
                                                         " FROM jobs WHERE id = ?1"));
  stmt.BindInt64(1, job_id);
  PX_ASSIGN_OR_RETURN(bool row, stmt.Step());
  if (!row) return NotFound(JobRef(job_id) + " does not exist");
  return ReadJob(stmt);
}

Status SqliteStateStore::CheckJob(int64_t job_id) {
  PX_ASSIGN_OR_RETURN(SqliteStatement stmt, db_->Prepare("SELECT 1 FROM jobs WHERE id = ?1"));
  stmt.BindInt64(1, job_id);
  PX_ASSIGN_OR_RETURN(bool row, stmt.Step());
  if (!row) return NotFound(JobRef(job_id) + " does not exist");
  return Status::Ok();
}

StatusOr<int64_t> SqliteStateStore::InsertEvent(int64_t job_id, std::string_view kind,
                                                std::string_view message, int64_t now) {
  PX_ASSIGN_OR_RETURN(
      SqliteStatement stmt,
      db_->Prepare("INSERT INTO events (job_id, time, kind, message) VALUES (?1, ?2, ?3, ?4)"));
  if (job_id == 0) {
    stmt.BindNull(1);  // "no job": NULL keeps the foreign key satisfied
  } else {
    stmt.BindInt64(1, job_id);
  }
  stmt.BindInt64(2, now).BindText(3, kind).BindText(4, message);
  PX_RETURN_IF_ERROR(stmt.Run());
  return db_->LastInsertRowId();
}

// ---- Jobs ----

StatusOr<JobRecord> SqliteStateStore::CreateJob(const NewJob& job, int64_t now) {
  if (job.workers < 1) {
    return InvalidArgument("job " + Quote(job.name) + ": workers must be at least 1, got " +
                           std::to_string(job.workers));
  }
  return Write([&]() -> StatusOr<JobRecord> {
    PX_ASSIGN_OR_RETURN(
        SqliteStatement insert,
        db_->Prepare("INSERT INTO jobs (name, state, workers, step, created, updated, attempt, "
                     "reason, job_text, job_path, submitted_by) "
                     "VALUES (?1, ?2, ?3, 0, ?4, ?4, 0, '', ?5, ?6, ?7)"));
    insert.BindText(1, job.name)
        .BindText(2, JobStateName(JobState::kPending))
        .BindInt64(3, job.workers)
        .BindInt64(4, now)
        .BindText(5, job.job_text)
        .BindText(6, job.job_path)
        .BindText(7, job.submitted_by);
    PX_RETURN_IF_ERROR(insert.Run());
    JobRecord record;
    record.id = db_->LastInsertRowId();
    record.name = job.name;
    record.state = JobState::kPending;
    record.workers = job.workers;
    record.created = now;
    record.updated = now;
    record.job_text = job.job_text;
    record.job_path = job.job_path;
    record.submitted_by = job.submitted_by;
    std::string message = JobRef(record.id) + " (" + Quote(job.name) + ") submitted";
    if (!job.submitted_by.empty()) message += " by " + Quote(job.submitted_by);
    message += " with " + std::to_string(job.workers) + (job.workers == 1 ? " worker" : " workers");
    PX_RETURN_IF_ERROR(InsertEvent(record.id, "submitted", message, now).status());
    return record;
  });
}

StatusOr<JobRecord> SqliteStateStore::GetJob(int64_t job_id) {
  return Read([&] { return LoadJob(job_id); });
}

StatusOr<std::vector<JobRecord>> SqliteStateStore::ListJobs(const JobFilter& filter) {
  PX_RETURN_IF_ERROR(CheckLimit(filter.limit));
  // Only placeholders are added to the text; the states are bound.
  std::string sql = std::string("SELECT ") + kJobColumns + " FROM jobs";
  if (!filter.states.empty()) {
    sql += " WHERE state IN (";
    for (size_t i = 0; i < filter.states.size(); ++i) sql += i == 0 ? "?" : ", ?";
    sql += ")";
  }
  sql += " ORDER BY id DESC LIMIT ?";
  return Read([&]() -> StatusOr<std::vector<JobRecord>> {
    PX_ASSIGN_OR_RETURN(SqliteStatement stmt, db_->Prepare(sql));
    int index = 1;
    for (JobState state : filter.states) stmt.BindText(index++, JobStateName(state));
    stmt.BindInt64(index, SqlLimit(filter.limit));
    std::vector<JobRecord> jobs;
    while (true) {
      PX_ASSIGN_OR_RETURN(bool row, stmt.Step());
      if (!row) break;
      PX_ASSIGN_OR_RETURN(JobRecord job, ReadJob(stmt));
      jobs.push_back(std::move(job));
    }
    return jobs;
  });
}

StatusOr<JobRecord> SqliteStateStore::RequeueJob(int64_t job_id, const std::string& reason,
                                                 int64_t now) {
  return TransitionJob(job_id, JobState::kPending, reason, now, /*count_restart=*/false);
}

StatusOr<JobRecord> SqliteStateStore::TransitionJob(int64_t job_id, JobState to,
                                                    const std::string& reason, int64_t now) {
  return TransitionJob(job_id, to, reason, now, /*count_restart=*/true);
}

StatusOr<JobRecord> SqliteStateStore::TransitionJob(int64_t job_id, JobState to,
                                                    const std::string& reason, int64_t now,
                                                    bool count_restart) {
  return Write([&]() -> StatusOr<JobRecord> {
    PX_ASSIGN_OR_RETURN(JobRecord job, LoadJob(job_id));
    const JobState from = job.state;
    if (!count_restart && (to != JobState::kPending || IsTerminal(from))) {
      return FailedPrecondition(JobRef(job_id) + " is " + std::string(JobStateName(from)) +
                                "; only a PLACING or RUNNING job can be requeued");
    }
    if (!IsValidTransition(from, to)) {
      return FailedPrecondition(JobRef(job_id) + " is " + std::string(JobStateName(from)) +
                                "; it cannot become " + std::string(JobStateName(to)));
    }
    job.state = to;
    job.updated = now;
    job.reason = (to == JobState::kFailed || to == JobState::kCancelled) ? reason : "";
    // Every placement starts a new attempt: 1 for the first, +1 per restart.
    if (to == JobState::kPlacing) ++job.attempt;
    if (to == JobState::kPending) {
      job.restarts = IsTerminal(from) ? 0 : job.restarts + (count_restart ? 1 : 0);
    }
    PX_ASSIGN_OR_RETURN(
        SqliteStatement update,
        db_->Prepare("UPDATE jobs SET state = ?1, reason = ?2, updated = ?3, attempt = ?4, "
                     "restarts = ?6 WHERE id = ?5"));
    update.BindText(1, JobStateName(to))
        .BindText(2, job.reason)
        .BindInt64(3, now)
        .BindInt64(4, job.attempt)
        .BindInt64(5, job_id)
        .BindInt64(6, job.restarts);
    PX_RETURN_IF_ERROR(update.Run());
    if (to == JobState::kPlacing) PX_RETURN_IF_ERROR(DropJobKeys(job_id, job.attempt));
    if (IsTerminal(to)) PX_RETURN_IF_ERROR(DropJobKeys(job_id, 0));
    std::string message = std::string(JobStateName(from)) + " -> " + std::string(JobStateName(to));
    if (!reason.empty()) message += ": " + reason;
    PX_RETURN_IF_ERROR(InsertEvent(job_id, "state", message, now).status());
    return job;
  });
}

// ---- Events ----

StatusOr<int64_t> SqliteStateStore::AppendEvent(int64_t job_id, const std::string& kind,
                                                const std::string& message, int64_t now) {
  if (job_id < 0) return InvalidArgument("event for " + JobRef(job_id) + ": ids are positive");
  if (kind.empty()) return InvalidArgument("event kind is empty");
  return Write([&]() -> StatusOr<int64_t> {
    if (job_id != 0) PX_RETURN_IF_ERROR(CheckJob(job_id));
    return InsertEvent(job_id, kind, message, now);
  });
}

StatusOr<std::vector<EventRecord>> SqliteStateStore::ListEvents(int64_t job_id, int64_t after_seq,
                                                                int limit) {
  PX_RETURN_IF_ERROR(CheckLimit(limit));
  if (job_id < 0) return NotFound(JobRef(job_id) + " does not exist");
  return Read([&]() -> StatusOr<std::vector<EventRecord>> {
    std::string sql = "SELECT seq, job_id, time, kind, message FROM events WHERE seq > ?1";
    if (job_id != 0) {
      PX_RETURN_IF_ERROR(CheckJob(job_id));
      sql += " AND job_id = ?3";
    }
    sql += " ORDER BY seq LIMIT ?2";
    PX_ASSIGN_OR_RETURN(SqliteStatement stmt, db_->Prepare(sql));
    stmt.BindInt64(1, after_seq).BindInt64(2, SqlLimit(limit));
    if (job_id != 0) stmt.BindInt64(3, job_id);
    std::vector<EventRecord> events;
    while (true) {
      PX_ASSIGN_OR_RETURN(bool row, stmt.Step());
      if (!row) break;
      EventRecord event;
      event.seq = stmt.ColumnInt64(0);
      event.job_id = stmt.IsNull(1) ? 0 : stmt.ColumnInt64(1);
      event.time = stmt.ColumnInt64(2);
      event.kind = stmt.ColumnText(3);
      event.message = stmt.ColumnText(4);
      events.push_back(std::move(event));
    }
    return events;
  });
}

// ---- Agents ----

Status SqliteStateStore::UpsertAgent(const AgentRecord& agent, int64_t now) {
  if (agent.name.empty()) return InvalidArgument("agent name is empty");
  return Write([&]() -> Status {
    PX_ASSIGN_OR_RETURN(SqliteStatement find, db_->Prepare("SELECT 1 FROM agents WHERE name = ?1"));
    find.BindText(1, agent.name);
    PX_ASSIGN_OR_RETURN(bool known, find.Step());
    PX_ASSIGN_OR_RETURN(
        SqliteStatement upsert,
        db_->Prepare("INSERT INTO agents (name, address, slots, gpus, hostname, version, "
                     "registered, last_seen, draining) "
                     "VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?7, ?8) "
                     "ON CONFLICT (name) DO UPDATE SET address = excluded.address, "
                     "slots = excluded.slots, gpus = excluded.gpus, hostname = excluded.hostname, "
                     "version = excluded.version, last_seen = excluded.last_seen, "
                     "draining = excluded.draining"));
    upsert.BindText(1, agent.name)
        .BindText(2, agent.address)
        .BindInt64(3, agent.slots)
        .BindInt64(4, agent.gpus)
        .BindText(5, agent.hostname)
        .BindText(6, agent.version)
        .BindInt64(7, now)
        .BindInt64(8, agent.draining ? 1 : 0);
    PX_RETURN_IF_ERROR(upsert.Run());
    std::string message = "agent " + Quote(agent.name) +
                          (known ? " registered again at " : " registered at ") + agent.address +
                          " with " + std::to_string(agent.slots) + " slots, " +
                          std::to_string(agent.gpus) + " GPUs";
    if (agent.draining) message += " (draining)";
    return InsertEvent(0, "agent", message, now).status();
  });
}

StatusOr<int> SqliteStateStore::TouchAgents(
    const std::vector<std::pair<std::string, int64_t>>& seen) {
  if (seen.empty()) return 0;
  return Write([&]() -> StatusOr<int> {
    PX_ASSIGN_OR_RETURN(SqliteStatement update,
                        db_->Prepare("UPDATE agents SET last_seen = ?1 WHERE name = ?2"));
    int updated = 0;
    for (const auto& [name, time] : seen) {
      update.BindInt64(1, time).BindText(2, name);
      PX_RETURN_IF_ERROR(update.Run());
      updated += db_->Changes();
      update.Reset();
    }
    return updated;
  });
}

Status SqliteStateStore::SetAgentDraining(const std::string& name, bool draining, int64_t now) {
  return Write([&]() -> Status {
    PX_ASSIGN_OR_RETURN(SqliteStatement update,
                        db_->Prepare("UPDATE agents SET draining = ?1 WHERE name = ?2"));
    update.BindInt64(1, draining ? 1 : 0).BindText(2, name);
    PX_RETURN_IF_ERROR(update.Run());
    if (db_->Changes() == 0) return NotFound("agent " + Quote(name) + " is not registered");
    return InsertEvent(0, "agent",
                       "agent " + Quote(name) + (draining ? " is draining: no new tasks"
                                                          : " takes new tasks again"),
                       now)
        .status();
  });
}

StatusOr<std::vector<AgentRecord>> SqliteStateStore::ListAgents() {
  return Read([&]() -> StatusOr<std::vector<AgentRecord>> {
    PX_ASSIGN_OR_RETURN(SqliteStatement stmt, db_->Prepare(std::string("SELECT ") + kAgentColumns +
                                                           " FROM agents ORDER BY name"));
    std::vector<AgentRecord> agents;
    while (true) {
      PX_ASSIGN_OR_RETURN(bool row, stmt.Step());
      if (!row) break;
      AgentRecord agent;
      agent.name = stmt.ColumnText(0);
      agent.address = stmt.ColumnText(1);
      agent.slots = static_cast<int>(stmt.ColumnInt64(2));
      agent.gpus = static_cast<int>(stmt.ColumnInt64(3));
      agent.hostname = stmt.ColumnText(4);
      agent.version = stmt.ColumnText(5);
      agent.registered = stmt.ColumnInt64(6);
      agent.last_seen = stmt.ColumnInt64(7);
      agent.draining = stmt.ColumnInt64(8) != 0;
      agents.push_back(std::move(agent));
    }
    return agents;
  });
}

// ---- Tasks ----

Status SqliteStateStore::WriteTask(const TaskRecord& task) {
  const std::string_view role = TaskRoleName(task.role);
  const std::string_view state = TaskStateName(task.state);
  if (role.empty()) {
    return InvalidArgument("task of " + JobRef(task.job_id) + ": unknown role " +
                           std::to_string(static_cast<int>(task.role)));
  }
  if (state.empty()) {
    return InvalidArgument("task of " + JobRef(task.job_id) + ": unknown state " +
                           std::to_string(static_cast<int>(task.state)));
  }
  PX_RETURN_IF_ERROR(CheckJob(task.job_id));
  PX_ASSIGN_OR_RETURN(
      SqliteStatement upsert,
      db_->Prepare(std::string("INSERT INTO tasks (") + kTaskColumns +
                   ") VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10) "
                   "ON CONFLICT (job_id, attempt, role, task_index) DO UPDATE SET "
                   "agent_name = excluded.agent_name, state = excluded.state, "
                   "exit_code = excluded.exit_code, signal = excluded.signal, "
                   "updated = excluded.updated, message = excluded.message"));
  upsert.BindInt64(1, task.job_id)
      .BindInt64(2, task.attempt)
      .BindText(3, role)
      .BindInt64(4, task.index)
      .BindText(5, task.agent_name)
      .BindText(6, state)
      .BindInt64(9, task.updated)
      .BindText(10, task.message);
  if (task.exit_code) {
    upsert.BindInt64(7, *task.exit_code);
  } else {
    upsert.BindNull(7);
  }
  if (task.signal) {
    upsert.BindInt64(8, *task.signal);
  } else {
    upsert.BindNull(8);
  }
  return upsert.Run();
}

StatusOr<TaskRecord> SqliteStateStore::ReadTask(const SqliteStatement& row) const {
  TaskRecord task;
  task.job_id = row.ColumnInt64(0);
  task.attempt = static_cast<int>(row.ColumnInt64(1));
  std::optional<TaskRole> role = ParseTaskRole(row.ColumnText(2));
  std::optional<TaskState> state = ParseTaskState(row.ColumnText(5));
  if (!role || !state) {
    return Internal("a task of " + JobRef(task.job_id) +
                    " has an unknown role or state in database '" + db_->path() + "'");
  }
  task.role = *role;
  task.index = static_cast<int>(row.ColumnInt64(3));
  task.agent_name = row.ColumnText(4);
  task.state = *state;
  if (!row.IsNull(6)) task.exit_code = static_cast<int>(row.ColumnInt64(6));
  if (!row.IsNull(7)) task.signal = static_cast<int>(row.ColumnInt64(7));
  task.updated = row.ColumnInt64(8);
  task.message = row.ColumnText(9);
  return task;
}

StatusOr<std::vector<TaskRecord>> SqliteStateStore::ReadTasks(SqliteStatement& stmt) const {
  std::vector<TaskRecord> tasks;
  while (true) {
    PX_ASSIGN_OR_RETURN(bool row, stmt.Step());
    if (!row) break;
    PX_ASSIGN_OR_RETURN(TaskRecord task, ReadTask(stmt));
    tasks.push_back(std::move(task));
  }
  return tasks;
}

Status SqliteStateStore::UpsertTask(const TaskRecord& task) {
  return Write([&]() -> Status { return WriteTask(task); });
}

Status SqliteStateStore::UpsertTasks(const std::vector<TaskRecord>& tasks) {
  return Write([&]() -> Status {
    for (const TaskRecord& task : tasks) PX_RETURN_IF_ERROR(WriteTask(task));
    return Status::Ok();
  });
}

StatusOr<std::vector<TaskRecord>> SqliteStateStore::ListTasks(int64_t job_id) {
  return Read([&]() -> StatusOr<std::vector<TaskRecord>> {
    PX_RETURN_IF_ERROR(CheckJob(job_id));
    PX_ASSIGN_OR_RETURN(SqliteStatement stmt,
                        db_->Prepare(std::string("SELECT ") + kTaskColumns +
                                     " FROM tasks WHERE job_id = ?1 ORDER BY attempt DESC, "
                                     "CASE role WHEN 'TRAINER' THEN 1 ELSE 2 END, task_index"));
    stmt.BindInt64(1, job_id);
    return ReadTasks(stmt);
  });
}

StatusOr<std::vector<TaskRecord>> SqliteStateStore::ListLiveTasks() {
  return Read([&]() -> StatusOr<std::vector<TaskRecord>> {
    PX_ASSIGN_OR_RETURN(SqliteStatement stmt,
                        db_->Prepare(std::string("SELECT ") + kTaskColumns +
                                     " FROM tasks WHERE state IN ('ASSIGNED', 'RUNNING') "
                                     "ORDER BY job_id, attempt, role, task_index"));
    return ReadTasks(stmt);
  });
}

StatusOr<JobRecord> SqliteStateStore::StartAttempt(int64_t job_id,
                                                   const std::vector<TaskRecord>& tasks,
                                                   const std::string& message, int64_t now) {
  return Write([&]() -> StatusOr<JobRecord> {
    PX_ASSIGN_OR_RETURN(JobRecord job, LoadJob(job_id));
    if (job.state != JobState::kPending) {
      return FailedPrecondition(JobRef(job_id) + " is " + std::string(JobStateName(job.state)) +
                                "; only a PENDING job can start an attempt");
    }
    job.state = JobState::kPlacing;
    job.attempt += 1;
    job.updated = now;
    job.reason.clear();
    PX_ASSIGN_OR_RETURN(SqliteStatement update,
                        db_->Prepare("UPDATE jobs SET state = 'PLACING', reason = '', "
                                     "updated = ?1, attempt = ?2 WHERE id = ?3"));
    update.BindInt64(1, now).BindInt64(2, job.attempt).BindInt64(3, job_id);
    PX_RETURN_IF_ERROR(update.Run());
    PX_RETURN_IF_ERROR(DropJobKeys(job_id, job.attempt));
    for (TaskRecord task : tasks) {
      task.job_id = job_id;
      task.attempt = job.attempt;
      task.updated = now;
      PX_RETURN_IF_ERROR(WriteTask(task));
    }
    PX_RETURN_IF_ERROR(InsertEvent(job_id, "state",
                                   "PENDING -> PLACING: attempt " + std::to_string(job.attempt) +
                                       (message.empty() ? "" : ": " + message),
                                   now)
                           .status());
    return job;
  });
}

// Keys live as long as their attempt, so the database does not grow with
// every job ever run. '0' is the character after '/', so [prefix, "job/<id>0")
// is exactly the keys under the job's prefix; the attempt is the number
// between the prefix and the next '/' (keys such as "job/<id>/search" have
// none, CAST gives 0, and they stay until the job ends).
Status SqliteStateStore::DropJobKeys(int64_t job_id, int attempt) {
  const std::string prefix = "job/" + std::to_string(job_id) + "/";
  const std::string end = "job/" + std::to_string(job_id) + "0";
  if (attempt <= 0) {
    PX_ASSIGN_OR_RETURN(SqliteStatement drop,
                        db_->Prepare("DELETE FROM kv WHERE key >= ?1 AND key < ?2"));
    drop.BindText(1, prefix).BindText(2, end);
    return drop.Run();
  }
  PX_ASSIGN_OR_RETURN(
      SqliteStatement drop,
      db_->Prepare("DELETE FROM kv WHERE key >= ?1 AND key < ?2 AND "
                   "CAST(substr(key, ?3, instr(substr(key, ?3), '/') - 1) AS INTEGER) "
                   "BETWEEN 1 AND ?4 - 1"));
  drop.BindText(1, prefix)
      .BindText(2, end)
      .BindInt64(3, static_cast<int64_t>(prefix.size()) + 1)
      .BindInt64(4, attempt);
  return drop.Run();
}

// ---- Plans ----

Status SqliteStateStore::PutPlan(int64_t job_id, int attempt, const std::string& plan_json,
                                 int64_t now) {
  return Write([&]() -> Status {
    PX_RETURN_IF_ERROR(CheckJob(job_id));
    PX_ASSIGN_OR_RETURN(
        SqliteStatement upsert,
        db_->Prepare("INSERT INTO plans (job_id, attempt, plan_json, updated) "
                     "VALUES (?1, ?2, ?3, ?4) ON CONFLICT (job_id, attempt) DO UPDATE SET "
                     "plan_json = excluded.plan_json, updated = excluded.updated"));
    upsert.BindInt64(1, job_id).BindInt64(2, attempt).BindText(3, plan_json).BindInt64(4, now);
    return upsert.Run();
  });
}

StatusOr<std::optional<std::string>> SqliteStateStore::GetPlan(int64_t job_id, int attempt) {
  return Read([&]() -> StatusOr<std::optional<std::string>> {
    PX_RETURN_IF_ERROR(CheckJob(job_id));
    PX_ASSIGN_OR_RETURN(
        SqliteStatement stmt,
        db_->Prepare("SELECT plan_json FROM plans WHERE job_id = ?1 AND attempt = ?2"));
    stmt.BindInt64(1, job_id).BindInt64(2, attempt);
    PX_ASSIGN_OR_RETURN(bool row, stmt.Step());
    if (!row) return std::optional<std::string>();
    return std::optional<std::string>(stmt.ColumnText(0));
  });
}

// ---- Rendezvous key-value ----

Status SqliteStateStore::KvSet(const std::string& key, const std::string& value, int64_t now) {
  if (key.empty()) return InvalidArgument("key-value key is empty");
  return Write([&]() -> Status {
    PX_ASSIGN_OR_RETURN(SqliteStatement upsert,
                        db_->Prepare("INSERT INTO kv (key, value, updated) VALUES (?1, ?2, ?3) "
                                     "ON CONFLICT (key) DO UPDATE SET value = excluded.value, "
                                     "updated = excluded.updated"));
    upsert.BindText(1, key).BindBlob(2, value).BindInt64(3, now);
    return upsert.Run();
  });
}

StatusOr<std::optional<std::string>> SqliteStateStore::KvGet(const std::string& key) {
  return Read([&]() -> StatusOr<std::optional<std::string>> {
    PX_ASSIGN_OR_RETURN(SqliteStatement stmt, db_->Prepare("SELECT value FROM kv WHERE key = ?1"));
    stmt.BindText(1, key);
    PX_ASSIGN_OR_RETURN(bool row, stmt.Step());
    if (!row) return std::optional<std::string>();
    return std::optional<std::string>(stmt.ColumnBlob(0));
  });
}

StatusOr<int64_t> SqliteStateStore::KvCount(const std::string& prefix) {
  return Read([&]() -> StatusOr<int64_t> {
    // A range on the primary key: [prefix, prefix with its last byte + 1).
    std::string end = prefix;
    while (!end.empty() && static_cast<unsigned char>(end.back()) == 0xff) end.pop_back();
    if (!end.empty()) end.back() = static_cast<char>(end.back() + 1);
    PX_ASSIGN_OR_RETURN(SqliteStatement stmt,
                        db_->Prepare(end.empty() ? "SELECT COUNT(*) FROM kv WHERE key >= ?1"
                                                 : "SELECT COUNT(*) FROM kv WHERE key >= ?1 AND "
                                                   "key < ?2"));
    stmt.BindText(1, prefix);
    if (!end.empty()) stmt.BindText(2, end);
    PX_ASSIGN_OR_RETURN(bool row, stmt.Step());
    return row ? stmt.ColumnInt64(0) : int64_t{0};
  });
}

StatusOr<int64_t> SqliteStateStore::KvAdd(const std::string& key, int64_t delta, int64_t now) {
  if (key.empty()) return InvalidArgument("key-value key is empty");
  return Write([&]() -> StatusOr<int64_t> {
    PX_ASSIGN_OR_RETURN(SqliteStatement find, db_->Prepare("SELECT value FROM kv WHERE key = ?1"));
    find.BindText(1, key);
    PX_ASSIGN_OR_RETURN(bool row, find.Step());
    int64_t current = 0;
    if (row) {
      std::optional<int64_t> parsed = ParseInt64(find.ColumnBlob(0));
      if (!parsed) {
        return InvalidArgument("key " + Quote(key) +
                               " does not hold a decimal integer; KvAdd cannot add to it");
      }
      current = *parsed;
    }
    int64_t sum = 0;
    if (__builtin_add_overflow(current, delta, &sum)) {
      return InvalidArgument("key " + Quote(key) + ": " + std::to_string(current) + " + " +
                             std::to_string(delta) + " overflows a 64-bit integer");
    }
    PX_ASSIGN_OR_RETURN(SqliteStatement upsert,
                        db_->Prepare("INSERT INTO kv (key, value, updated) VALUES (?1, ?2, ?3) "
                                     "ON CONFLICT (key) DO UPDATE SET value = excluded.value, "
                                     "updated = excluded.updated"));
    upsert.BindText(1, key).BindBlob(2, std::to_string(sum)).BindInt64(3, now);
    PX_RETURN_IF_ERROR(upsert.Run());
    return sum;
  });
}

// ---- Metrics ----

Status SqliteStateStore::RecordMetrics(const std::vector<MetricRecord>& points, int64_t now) {
  if (points.empty()) return Status::Ok();
  std::map<int64_t, int64_t> newest_step;  // job id -> highest step in `points`
  for (const MetricRecord& point : points) {
    auto [it, inserted] = newest_step.emplace(point.job_id, point.step);
    if (!inserted) it->second = std::max(it->second, point.step);
  }
  return Write([&]() -> Status {
    for (const auto& [job_id, step] : newest_step) PX_RETURN_IF_ERROR(CheckJob(job_id));
    PX_ASSIGN_OR_RETURN(
        SqliteStatement insert,
        db_->Prepare("INSERT INTO metrics (job_id, attempt, rank, step, loss, throughput, time, "
                     "metric_values) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)"));
    for (const MetricRecord& point : points) {
      insert.BindInt64(1, point.job_id)
          .BindInt64(2, point.attempt)
          .BindInt64(3, point.rank)
          .BindInt64(4, point.step)
          .BindDouble(5, point.loss)
          .BindDouble(6, point.throughput)
          .BindInt64(7, now)
          .BindText(8, nlohmann::json(point.values).dump());
      PX_RETURN_IF_ERROR(insert.Run());
      insert.Reset();
    }
    PX_ASSIGN_OR_RETURN(SqliteStatement raise,
                        db_->Prepare("UPDATE jobs SET step = ?1 WHERE id = ?2 AND step < ?1"));
    for (const auto& [job_id, step] : newest_step) {
      raise.BindInt64(1, step).BindInt64(2, job_id);
      PX_RETURN_IF_ERROR(raise.Run());
      raise.Reset();
    }
    return Status::Ok();
  });
}

StatusOr<std::vector<MetricRecord>> SqliteStateStore::ListMetrics(int64_t job_id,
                                                                  int64_t after_step, int limit) {
  PX_RETURN_IF_ERROR(CheckLimit(limit));
  return Read([&]() -> StatusOr<std::vector<MetricRecord>> {
    PX_RETURN_IF_ERROR(CheckJob(job_id));
    PX_ASSIGN_OR_RETURN(
        SqliteStatement stmt,
        db_->Prepare("SELECT attempt, rank, step, loss, throughput, time, metric_values FROM metrics "
                     "WHERE job_id = ?1 AND step > ?2 ORDER BY step, rank, attempt, id "
                     "LIMIT ?3"));
    stmt.BindInt64(1, job_id).BindInt64(2, after_step).BindInt64(3, SqlLimit(limit));
    std::vector<MetricRecord> points;
    while (true) {
      PX_ASSIGN_OR_RETURN(bool row, stmt.Step());
      if (!row) break;
      MetricRecord point;
      point.job_id = job_id;
      point.attempt = static_cast<int>(stmt.ColumnInt64(0));
      point.rank = static_cast<int>(stmt.ColumnInt64(1));
      point.step = stmt.ColumnInt64(2);
      point.loss = stmt.ColumnDouble(3);
      point.throughput = stmt.ColumnDouble(4);
      point.time = stmt.ColumnInt64(5);
      // Written by RecordMetrics only; a malformed value reads as none.
      const nlohmann::json values = nlohmann::json::parse(stmt.ColumnText(6), nullptr, false);
      if (values.is_object()) {
        for (const auto& [name, value] : values.items()) {
          if (value.is_number()) point.values[name] = value.get<double>();
        }
      }
      points.push_back(point);
    }
    return points;
  });
}

// ---- Checkpoints ----

Status SqliteStateStore::CommitCheckpoint(const CheckpointRecord& checkpoint, int64_t now) {
  if (checkpoint.path.empty()) {
    return InvalidArgument("checkpoint of " + JobRef(checkpoint.job_id) + " has an empty path");
  }
  return Write([&]() -> Status {
    PX_RETURN_IF_ERROR(CheckJob(checkpoint.job_id));
    // The same checkpoint committed again (CoordinatorClient retries
    // CommitCheckpoint when a reply is lost, so the first call may have been
    // applied) changes nothing: no second event, `created` kept.
    {
      PX_ASSIGN_OR_RETURN(
          SqliteStatement existing,
          db_->Prepare("SELECT path, manifest_sha256 FROM checkpoints "
                       "WHERE job_id = ?1 AND attempt = ?2 AND step = ?3"));
      existing.BindInt64(1, checkpoint.job_id)
          .BindInt64(2, checkpoint.attempt)
          .BindInt64(3, checkpoint.step);
      PX_ASSIGN_OR_RETURN(bool found, existing.Step());
      if (found && existing.ColumnText(0) == checkpoint.path &&
          existing.ColumnText(1) == checkpoint.manifest_sha256) {
        return Status::Ok();
      }
    }
    // Another checkpoint of the same (attempt, step) replaces it.
    PX_ASSIGN_OR_RETURN(
        SqliteStatement upsert,
        db_->Prepare("INSERT INTO checkpoints (job_id, attempt, step, path, manifest_sha256, "
                     "created) VALUES (?1, ?2, ?3, ?4, ?5, ?6) "
                     "ON CONFLICT (job_id, attempt, step) DO UPDATE SET path = excluded.path, "
                     "manifest_sha256 = excluded.manifest_sha256, created = excluded.created"));
    upsert.BindInt64(1, checkpoint.job_id)
        .BindInt64(2, checkpoint.attempt)
        .BindInt64(3, checkpoint.step)
        .BindText(4, checkpoint.path)
        .BindText(5, checkpoint.manifest_sha256)
        .BindInt64(6, now);
    PX_RETURN_IF_ERROR(upsert.Run());
    const std::string message = "step " + std::to_string(checkpoint.step) + " of attempt " +
                                std::to_string(checkpoint.attempt) + " checkpointed to '" +
                                checkpoint.path + "'";
    return InsertEvent(checkpoint.job_id, "checkpoint", message, now).status();
  });
}

StatusOr<std::vector<CheckpointRecord>> SqliteStateStore::ListCheckpoints(int64_t job_id) {
  return Read([&]() -> StatusOr<std::vector<CheckpointRecord>> {
    PX_RETURN_IF_ERROR(CheckJob(job_id));
    PX_ASSIGN_OR_RETURN(
        SqliteStatement stmt,
        db_->Prepare("SELECT attempt, step, path, manifest_sha256, created FROM checkpoints "
                     "WHERE job_id = ?1 ORDER BY step DESC, attempt DESC"));
    stmt.BindInt64(1, job_id);
    std::vector<CheckpointRecord> checkpoints;
    while (true) {
      PX_ASSIGN_OR_RETURN(bool row, stmt.Step());
      if (!row) break;
      CheckpointRecord checkpoint;
      checkpoint.job_id = job_id;
      checkpoint.attempt = static_cast<int>(stmt.ColumnInt64(0));
      checkpoint.step = stmt.ColumnInt64(1);
      checkpoint.path = stmt.ColumnText(2);
      checkpoint.manifest_sha256 = stmt.ColumnText(3);
      checkpoint.created = stmt.ColumnInt64(4);
      checkpoints.push_back(std::move(checkpoint));
    }
    return checkpoints;
  });
}

}  // namespace

int LatestSchemaVersion() { return Migrations().back().version; }

StatusOr<std::unique_ptr<StateStore>> OpenSqliteStateStore(const SqliteStateStoreOptions& options) {
  if (options.path.empty()) {
    return InvalidArgument("state database path is empty; give a file path or ':memory:'");
  }
  if (options.busy_timeout_ms < 0) {
    return InvalidArgument("busy_timeout_ms must not be negative, got " +
                           std::to_string(options.busy_timeout_ms));
  }
  if (options.max_schema_version < 0) {
    return InvalidArgument("max_schema_version must not be negative, got " +
                           std::to_string(options.max_schema_version));
  }
  PX_ASSIGN_OR_RETURN(std::unique_ptr<SqliteConnection> db,
                      SqliteConnection::Open(options.path, options.busy_timeout_ms));
  auto store = std::make_unique<SqliteStateStore>(std::move(db));
  PX_RETURN_IF_ERROR(store->Init(options.max_schema_version));
  return std::unique_ptr<StateStore>(std::move(store));
}

}  // namespace parallax::coordinator
