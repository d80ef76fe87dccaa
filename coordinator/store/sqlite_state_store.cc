// The SQLite StateStore. One connection, guarded by a mutex: every method
// takes the mutex, runs one transaction (BEGIN IMMEDIATE for writes, a
// deferred read transaction for reads) and commits, or rolls back on any
// failure so that nothing of a failed call remains. SQL text is constant;
// every value from a caller is a bound parameter.
//
// This file opens and migrates the database and keeps jobs, events, agents,
// tasks and attempts; plans, rendezvous key-value, metrics and checkpoints
// are in sqlite_state_store_job_data.cc, and the class both implement is in
// sqlite_state_store_impl.h.
#include "coordinator/store/sqlite_state_store.h"

#include <algorithm>
#include <charconv>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "coordinator/store/sqlite_state_store_impl.h"
#include "coordinator/store/sqlite_util.h"
#include "coordinator/store/state_sql.h"
#include "core/base/logging.h"
#include "schemas/kv_keys.h"

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

}  // namespace

namespace sqlite_internal {
namespace {

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

constexpr char kJobColumns[] =
    "id, name, state, workers, step, created, updated, attempt, reason, job_text, job_path, "
    "submitted_by, restarts, lost_updates, lost_updates_unknown";
constexpr char kAgentColumns[] =
    "name, address, slots, gpus, hostname, version, registered, last_seen, draining, role";
// agents.role (schemas/state.sql): AgentRole of schemas/coordinator.thrift.
constexpr int64_t kWorkerRole = 1;
constexpr int64_t kPsHostRole = 2;
constexpr char kTaskColumns[] =
    "job_id, attempt, role, task_index, agent_name, state, exit_code, signal, updated, message, "
    "generation";

}  // namespace

std::string Quote(std::string_view s) { return "\"" + std::string(s) + "\""; }
std::string JobRef(int64_t job_id) { return "job " + Quote(std::to_string(job_id)); }

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

// ---- Opening and migrating ----

Status SqliteStateStore::Init(const SqliteStateStoreOptions& options) {
  PX_RETURN_IF_ERROR(Migrate(options.max_schema_version));
  if (db_->path() == ":memory:") return Status::Ok();
  for (int i = 0; i < options.readers; ++i) {
    PX_ASSIGN_OR_RETURN(std::unique_ptr<SqliteConnection> reader,
                        SqliteConnection::Open(db_->path(), options.busy_timeout_ms));
    PX_RETURN_IF_ERROR(reader->Exec("PRAGMA query_only = ON"));
    free_readers_.push_back(reader.get());
    readers_.push_back(std::move(reader));
  }
  if (options.checkpoint_interval_ms > 0) {
    // Commits only append to the log; this thread copies it into the
    // database, so no commit waits for a checkpoint's writes and fsyncs.
    PX_ASSIGN_OR_RETURN(checkpoint_db_,
                        SqliteConnection::Open(db_->path(), options.busy_timeout_ms));
    PX_RETURN_IF_ERROR(checkpoint_db_->Exec("PRAGMA synchronous = FULL"));
    {
      std::lock_guard<std::mutex> lock(writes_.connection_mu());
      PX_RETURN_IF_ERROR(db_->Exec("PRAGMA wal_autocheckpoint = 0"));
    }
    const auto interval = std::chrono::milliseconds(options.checkpoint_interval_ms);
    checkpointer_ = std::thread([this, interval] { CheckpointLoop(interval); });
  }
  return Status::Ok();
}

SqliteStateStore::~SqliteStateStore() {
  {
    std::lock_guard<std::mutex> lock(checkpoint_mu_);
    stop_checkpoints_ = true;
  }
  checkpoint_cv_.notify_all();
  if (checkpointer_.joinable()) checkpointer_.join();
}

void SqliteStateStore::CheckpointLoop(std::chrono::milliseconds interval) {
  std::unique_lock<std::mutex> lock(checkpoint_mu_);
  while (!checkpoint_cv_.wait_for(lock, interval, [&] { return stop_checkpoints_; })) {
    lock.unlock();
    // PASSIVE: copies what no reader still needs, waits for no one.
    Status s = checkpoint_db_->Exec("PRAGMA wal_checkpoint(PASSIVE)");
    if (!s.ok()) PX_LOG(WARNING) << "checkpoint of the write-ahead log: " << s.ToString();
    lock.lock();
  }
}

SqliteConnection* SqliteStateStore::AcquireReader() {
  std::unique_lock<std::mutex> lock(readers_mu_);
  // No deadline: a reader is held for one read transaction.
  reader_free_.wait(lock, [&] { return !free_readers_.empty(); });
  SqliteConnection* reader = free_readers_.back();
  free_readers_.pop_back();
  return reader;
}

void SqliteStateStore::ReleaseReader(SqliteConnection* reader) {
  {
    std::lock_guard<std::mutex> lock(readers_mu_);
    free_readers_.push_back(reader);
  }
  reader_free_.notify_one();
}

Status SqliteStateStore::Migrate(int max_schema_version) {
  std::lock_guard<std::mutex> lock(writes_.connection_mu());
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
  job.lost_updates = row.ColumnInt64(13);
  job.lost_updates_unknown = static_cast<int>(row.ColumnInt64(14));
  return job;
}

StatusOr<JobRecord> SqliteStateStore::LoadJob(SqliteConnection* db, int64_t job_id) {
  PX_ASSIGN_OR_RETURN(SqliteStatement stmt, db->Prepare(std::string("SELECT ") + kJobColumns +
                                                         " FROM jobs WHERE id = ?1"));
  stmt.BindInt64(1, job_id);
  PX_ASSIGN_OR_RETURN(bool row, stmt.Step());
  if (!row) return NotFound(JobRef(job_id) + " does not exist");
  return ReadJob(stmt);
}

Status SqliteStateStore::CheckJob(SqliteConnection* db, int64_t job_id) {
  PX_ASSIGN_OR_RETURN(SqliteStatement stmt, db->Prepare("SELECT 1 FROM jobs WHERE id = ?1"));
  stmt.BindInt64(1, job_id);
  PX_ASSIGN_OR_RETURN(bool row, stmt.Step());
  if (!row) return NotFound(JobRef(job_id) + " does not exist");
  return Status::Ok();
}

StatusOr<int64_t> SqliteStateStore::InsertEvent(SqliteConnection* db, int64_t job_id, std::string_view kind,
                                                std::string_view message, int64_t now) {
  PX_ASSIGN_OR_RETURN(
      SqliteStatement stmt,
      db->Prepare("INSERT INTO events (job_id, time, kind, message) VALUES (?1, ?2, ?3, ?4)"));
  if (job_id == 0) {
    stmt.BindNull(1);  // "no job": NULL keeps the foreign key satisfied
  } else {
    stmt.BindInt64(1, job_id);
  }
  stmt.BindInt64(2, now).BindText(3, kind).BindText(4, message);
  PX_RETURN_IF_ERROR(stmt.Run());
  return db->LastInsertRowId();
}

// ---- Jobs ----

StatusOr<JobRecord> SqliteStateStore::CreateJob(const NewJob& job, int64_t now) {
  if (job.workers < 1) {
    return InvalidArgument("job " + Quote(job.name) + ": workers must be at least 1, got " +
                           std::to_string(job.workers));
  }
  return Write([&](SqliteConnection* db) -> StatusOr<JobRecord> {
    PX_ASSIGN_OR_RETURN(
        SqliteStatement insert,
        db->Prepare("INSERT INTO jobs (name, state, workers, step, created, updated, attempt, "
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
    record.id = db->LastInsertRowId();
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
    PX_RETURN_IF_ERROR(InsertEvent(db, record.id, "submitted", message, now).status());
    return record;
  });
}

StatusOr<JobRecord> SqliteStateStore::GetJob(int64_t job_id) {
  return Read([&](SqliteConnection* db) { return LoadJob(db, job_id); });
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
  return Read([&](SqliteConnection* db) -> StatusOr<std::vector<JobRecord>> {
    PX_ASSIGN_OR_RETURN(SqliteStatement stmt, db->Prepare(sql));
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

StatusOr<std::map<JobState, int64_t>> SqliteStateStore::CountJobs() {
  return Read([&](SqliteConnection* db) -> StatusOr<std::map<JobState, int64_t>> {
    PX_ASSIGN_OR_RETURN(SqliteStatement stmt,
                        db->Prepare("SELECT state, COUNT(*) FROM jobs GROUP BY state"));
    std::map<JobState, int64_t> counts;
    while (true) {
      PX_ASSIGN_OR_RETURN(bool row, stmt.Step());
      if (!row) break;
      std::optional<JobState> state = ParseJobState(stmt.ColumnText(0));
      if (!state) return Internal("jobs table holds an unknown state \"" + stmt.ColumnText(0) + "\"");
      counts[*state] = stmt.ColumnInt64(1);
    }
    return counts;
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
  return Write([&](SqliteConnection* db) {
    return TransitionIn(db, job_id, to, reason, now, count_restart);
  });
}

StatusOr<JobRecord> SqliteStateStore::TransitionIn(SqliteConnection* db, int64_t job_id,
                                                   JobState to, const std::string& reason,
                                                   int64_t now, bool count_restart) {
  PX_ASSIGN_OR_RETURN(JobRecord job, LoadJob(db, job_id));
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
      db->Prepare("UPDATE jobs SET state = ?1, reason = ?2, updated = ?3, attempt = ?4, "
                   "restarts = ?6 WHERE id = ?5"));
  update.BindText(1, JobStateName(to))
      .BindText(2, job.reason)
      .BindInt64(3, now)
      .BindInt64(4, job.attempt)
      .BindInt64(5, job_id)
      .BindInt64(6, job.restarts);
  PX_RETURN_IF_ERROR(update.Run());
  if (to == JobState::kPlacing) PX_RETURN_IF_ERROR(DropJobKeys(db, job_id, job.attempt));
  if (IsTerminal(to)) PX_RETURN_IF_ERROR(DropJobKeys(db, job_id, 0));
  std::string message = std::string(JobStateName(from)) + " -> " + std::string(JobStateName(to));
  if (!reason.empty()) message += ": " + reason;
  PX_RETURN_IF_ERROR(InsertEvent(db, job_id, "state", message, now).status());
  return job;
}

Status SqliteStateStore::ReplaceJobText(int64_t job_id, const std::string& job_text,
                                        const std::string& job_path, int workers,
                                        const std::string& what, int64_t now) {
  return Write([&](SqliteConnection* db) -> Status {
    PX_ASSIGN_OR_RETURN(JobRecord job, LoadJob(db, job_id));
    if (job.state != JobState::kFailed && job.state != JobState::kCancelled) {
      return FailedPrecondition(JobRef(job_id) + " is " + std::string(JobStateName(job.state)) +
                                "; only a FAILED or CANCELLED job's file can be replaced");
    }
    PX_ASSIGN_OR_RETURN(SqliteStatement update,
                        db->Prepare("UPDATE jobs SET job_text = ?1, job_path = ?2, workers = ?3, "
                                    "updated = ?4 WHERE id = ?5"));
    update.BindText(1, job_text)
        .BindText(2, job_path)
        .BindInt64(3, workers)
        .BindInt64(4, now)
        .BindInt64(5, job_id);
    PX_RETURN_IF_ERROR(update.Run());
    return InsertEvent(db, job_id, "job", what, now).status();
  });
}

// ---- Events ----

StatusOr<int64_t> SqliteStateStore::AppendEvent(int64_t job_id, const std::string& kind,
                                                const std::string& message, int64_t now) {
  if (job_id < 0) return InvalidArgument("event for " + JobRef(job_id) + ": ids are positive");
  if (kind.empty()) return InvalidArgument("event kind is empty");
  return Write([&](SqliteConnection* db) -> StatusOr<int64_t> {
    if (job_id != 0) PX_RETURN_IF_ERROR(CheckJob(db, job_id));
    return InsertEvent(db, job_id, kind, message, now);
  });
}

Status SqliteStateStore::AddLostUpdates(int64_t job_id, int64_t lost, const std::string& message,
                                       int64_t now) {
  if (lost < -1) return InvalidArgument("lost updates of " + JobRef(job_id) + " are negative");
  return Write([&](SqliteConnection* db) -> Status {
    PX_RETURN_IF_ERROR(CheckJob(db, job_id));
    PX_ASSIGN_OR_RETURN(
        SqliteStatement add,
        db->Prepare("UPDATE jobs SET lost_updates = lost_updates + ?2, "
                    "lost_updates_unknown = lost_updates_unknown + ?3 WHERE id = ?1"));
    add.BindInt64(1, job_id).BindInt64(2, lost >= 0 ? lost : 0).BindInt64(3, lost < 0 ? 1 : 0);
    PX_RETURN_IF_ERROR(add.Run());
    return InsertEvent(db, job_id, "shard", message, now).status();
  });
}

StatusOr<std::vector<EventRecord>> SqliteStateStore::ListEvents(int64_t job_id, int64_t after_seq,
                                                                int limit) {
  PX_RETURN_IF_ERROR(CheckLimit(limit));
  if (job_id < 0) return NotFound(JobRef(job_id) + " does not exist");
  return Read([&](SqliteConnection* db) -> StatusOr<std::vector<EventRecord>> {
    std::string sql = "SELECT seq, job_id, time, kind, message FROM events WHERE seq > ?1";
    if (job_id != 0) {
      PX_RETURN_IF_ERROR(CheckJob(db, job_id));
      sql += " AND job_id = ?3";
    }
    sql += " ORDER BY seq LIMIT ?2";
    PX_ASSIGN_OR_RETURN(SqliteStatement stmt, db->Prepare(sql));
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
  return Write([&](SqliteConnection* db) -> Status {
    PX_ASSIGN_OR_RETURN(SqliteStatement find, db->Prepare("SELECT 1 FROM agents WHERE name = ?1"));
    find.BindText(1, agent.name);
    PX_ASSIGN_OR_RETURN(bool known, find.Step());
    PX_ASSIGN_OR_RETURN(
        SqliteStatement upsert,
        db->Prepare("INSERT INTO agents (name, address, slots, gpus, hostname, version, "
                    "registered, last_seen, draining, role) "
                    "VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?7, ?8, ?9) "
                    "ON CONFLICT (name) DO UPDATE SET address = excluded.address, "
                    "slots = excluded.slots, gpus = excluded.gpus, hostname = excluded.hostname, "
                    "version = excluded.version, last_seen = excluded.last_seen, "
                    "draining = excluded.draining, role = excluded.role"));
    upsert.BindText(1, agent.name)
        .BindText(2, agent.address)
        .BindInt64(3, agent.slots)
        .BindInt64(4, agent.gpus)
        .BindText(5, agent.hostname)
        .BindText(6, agent.version)
        .BindInt64(7, now)
        .BindInt64(8, agent.draining ? 1 : 0)
        .BindInt64(9, agent.ps_host ? kPsHostRole : kWorkerRole);
    PX_RETURN_IF_ERROR(upsert.Run());
    std::string message = "agent " + Quote(agent.name) +
                          (known ? " registered again at " : " registered at ") + agent.address +
                          " with " + std::to_string(agent.slots) + " slots, " +
                          std::to_string(agent.gpus) + " GPUs";
    if (agent.ps_host) message += ", for PS shards only";
    if (agent.draining) message += " (draining)";
    return InsertEvent(db, 0, "agent", message, now).status();
  });
}

StatusOr<int> SqliteStateStore::TouchAgents(
    const std::vector<std::pair<std::string, int64_t>>& seen) {
  if (seen.empty()) return 0;
  return Write([&](SqliteConnection* db) -> StatusOr<int> {
    PX_ASSIGN_OR_RETURN(SqliteStatement update,
                        db->Prepare("UPDATE agents SET last_seen = ?1 WHERE name = ?2"));
    int updated = 0;
    for (const auto& [name, time] : seen) {
      update.BindInt64(1, time).BindText(2, name);
      PX_RETURN_IF_ERROR(update.Run());
      updated += db->Changes();
      update.Reset();
    }
    return updated;
  });
}

Status SqliteStateStore::SetAgentDraining(const std::string& name, bool draining, int64_t now) {
  return Write([&](SqliteConnection* db) -> Status {
    PX_ASSIGN_OR_RETURN(SqliteStatement update,
                        db->Prepare("UPDATE agents SET draining = ?1 WHERE name = ?2"));
    update.BindInt64(1, draining ? 1 : 0).BindText(2, name);
    PX_RETURN_IF_ERROR(update.Run());
    if (db->Changes() == 0) return NotFound("agent " + Quote(name) + " is not registered");
    return InsertEvent(db, 0, "agent",
                       "agent " + Quote(name) + (draining ? " is draining: no new tasks"
                                                          : " takes new tasks again"),
                       now)
        .status();
  });
}

StatusOr<std::vector<AgentRecord>> SqliteStateStore::ListAgents() {
  return Read([&](SqliteConnection* db) -> StatusOr<std::vector<AgentRecord>> {
    PX_ASSIGN_OR_RETURN(SqliteStatement stmt, db->Prepare(std::string("SELECT ") + kAgentColumns +
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
      agent.ps_host = stmt.ColumnInt64(9) == kPsHostRole;
      agents.push_back(std::move(agent));
    }
    return agents;
  });
}

// ---- Tasks ----

Status SqliteStateStore::WriteTasks(SqliteConnection* db, const std::vector<TaskRecord>& tasks) {
  if (tasks.empty()) return Status::Ok();
  // One statement for every row, and one existence check per job: an
  // attempt of hundreds of ranks is written in one pass over the rows.
  PX_ASSIGN_OR_RETURN(
      SqliteStatement upsert,
      db->Prepare(std::string("INSERT INTO tasks (") + kTaskColumns +
                  ") VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11) "
                  "ON CONFLICT (job_id, attempt, role, task_index) DO UPDATE SET "
                  "agent_name = excluded.agent_name, state = excluded.state, "
                  "exit_code = excluded.exit_code, signal = excluded.signal, "
                  "updated = excluded.updated, message = excluded.message, "
                  "generation = excluded.generation"));
  int64_t checked_job = 0;
  for (const TaskRecord& task : tasks) {
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
    if (task.job_id != checked_job) {
      PX_RETURN_IF_ERROR(CheckJob(db, task.job_id));
      checked_job = task.job_id;
    }
    upsert.Reset();
    upsert.BindInt64(1, task.job_id)
        .BindInt64(2, task.attempt)
        .BindText(3, role)
        .BindInt64(4, task.index)
        .BindText(5, task.agent_name)
        .BindText(6, state)
        .BindInt64(9, task.updated)
        .BindText(10, task.message)
        .BindInt64(11, task.generation);
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
    PX_RETURN_IF_ERROR(upsert.Run());
  }
  return Status::Ok();
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
  task.generation = static_cast<int>(row.ColumnInt64(10));
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
  return Write([&](SqliteConnection* db) -> Status { return WriteTasks(db, {task}); });
}

Status SqliteStateStore::UpsertTasks(const std::vector<TaskRecord>& tasks,
                                     const std::vector<NewEvent>& events) {
  for (const NewEvent& e : events) {
    if (e.job_id < 0) return InvalidArgument("event for " + JobRef(e.job_id) + ": ids are positive");
    if (e.kind.empty()) return InvalidArgument("event kind is empty");
  }
  return Write([&](SqliteConnection* db) -> Status {
    PX_RETURN_IF_ERROR(WriteTasks(db, tasks));
    for (const NewEvent& e : events) {
      if (e.job_id != 0) PX_RETURN_IF_ERROR(CheckJob(db, e.job_id));
      PX_RETURN_IF_ERROR(InsertEvent(db, e.job_id, e.kind, e.message, e.time).status());
    }
    return Status::Ok();
  });
}

StatusOr<std::vector<TaskRecord>> SqliteStateStore::ListTasks(int64_t job_id) {
  return Read([&](SqliteConnection* db) -> StatusOr<std::vector<TaskRecord>> {
    PX_RETURN_IF_ERROR(CheckJob(db, job_id));
    PX_ASSIGN_OR_RETURN(SqliteStatement stmt,
                        db->Prepare(std::string("SELECT ") + kTaskColumns +
                                     " FROM tasks WHERE job_id = ?1 ORDER BY attempt DESC, "
                                     "CASE role WHEN 'TRAINER' THEN 1 ELSE 2 END, task_index"));
    stmt.BindInt64(1, job_id);
    return ReadTasks(stmt);
  });
}

StatusOr<std::vector<TaskRecord>> SqliteStateStore::ListLiveTasks() {
  return Read([&](SqliteConnection* db) -> StatusOr<std::vector<TaskRecord>> {
    PX_ASSIGN_OR_RETURN(SqliteStatement stmt,
                        db->Prepare(std::string("SELECT ") + kTaskColumns +
                                     " FROM tasks WHERE state IN ('ASSIGNED', 'RUNNING') "
                                     "ORDER BY job_id, attempt, role, task_index"));
    return ReadTasks(stmt);
  });
}

StatusOr<JobRecord> SqliteStateStore::StartAttempt(int64_t job_id,
                                                   const std::vector<TaskRecord>& tasks,
                                                   const std::string& message, int64_t now) {
  return Write([&](SqliteConnection* db) {
    return StartAttemptIn(db, job_id, tasks, message, now);
  });
}

StatusOr<JobRecord> SqliteStateStore::StartAttemptIn(SqliteConnection* db, int64_t job_id,
                                                     const std::vector<TaskRecord>& tasks,
                                                     const std::string& message, int64_t now) {
  PX_ASSIGN_OR_RETURN(JobRecord job, LoadJob(db, job_id));
  if (job.state != JobState::kPending) {
    return FailedPrecondition(JobRef(job_id) + " is " + std::string(JobStateName(job.state)) +
                              "; only a PENDING job can start an attempt");
  }
  job.state = JobState::kPlacing;
  job.attempt += 1;
  job.updated = now;
  job.reason.clear();
  PX_ASSIGN_OR_RETURN(SqliteStatement update,
                      db->Prepare("UPDATE jobs SET state = 'PLACING', reason = '', "
                                   "updated = ?1, attempt = ?2 WHERE id = ?3"));
  update.BindInt64(1, now).BindInt64(2, job.attempt).BindInt64(3, job_id);
  PX_RETURN_IF_ERROR(update.Run());
  PX_RETURN_IF_ERROR(DropJobKeys(db, job_id, job.attempt));
  std::vector<TaskRecord> rows = tasks;
  for (TaskRecord& task : rows) {
    task.job_id = job_id;
    task.attempt = job.attempt;
    task.updated = now;
  }
  PX_RETURN_IF_ERROR(WriteTasks(db, rows));
  PX_RETURN_IF_ERROR(InsertEvent(db, job_id, "state",
                                 "PENDING -> PLACING: attempt " + std::to_string(job.attempt) +
                                     (message.empty() ? "" : ": " + message),
                                 now)
                         .status());
  return job;
}

StatusOr<std::vector<JobRecord>> SqliteStateStore::ApplyChanges(const StateChanges& changes,
                                                                int64_t now) {
  for (const NewEvent& e : changes.events) {
    if (e.job_id < 0) return InvalidArgument("event for " + JobRef(e.job_id) + ": ids are positive");
    if (e.kind.empty()) return InvalidArgument("event kind is empty");
  }
  return Write([&](SqliteConnection* db) -> StatusOr<std::vector<JobRecord>> {
    PX_RETURN_IF_ERROR(WriteTasks(db, changes.tasks));
    for (const NewEvent& e : changes.events) {
      if (e.job_id != 0) PX_RETURN_IF_ERROR(CheckJob(db, e.job_id));
      PX_RETURN_IF_ERROR(InsertEvent(db, e.job_id, e.kind, e.message, e.time).status());
    }
    std::vector<JobRecord> jobs;
    for (const JobTransition& t : changes.transitions) {
      PX_ASSIGN_OR_RETURN(JobRecord job,
                          TransitionIn(db, t.job_id, t.to, t.reason, now, /*count_restart=*/true));
      jobs.push_back(std::move(job));
    }
    for (const NewAttempt& a : changes.attempts) {
      PX_ASSIGN_OR_RETURN(JobRecord job, StartAttemptIn(db, a.job_id, a.tasks, a.message, now));
      jobs.push_back(std::move(job));
    }
    return jobs;
  });
}

// Keys live as long as their attempt, so the database does not grow with
// every job ever run. '0' is the character after '/', so [prefix, "job/<id>0")
// is exactly the keys under the job's prefix; the attempt is the number
// between the prefix and the next '/' (keys such as "job/<id>/search" have
// none, CAST gives 0, and they stay until the job ends).
Status SqliteStateStore::DropJobKeys(SqliteConnection* db, int64_t job_id, int attempt) {
  const std::string prefix = kv_keys::JobPrefix(job_id);
  const std::string end = kv_keys::JobPrefixEnd(job_id);
  if (attempt <= 0) {
    PX_ASSIGN_OR_RETURN(SqliteStatement drop,
                        db->Prepare("DELETE FROM kv WHERE key >= ?1 AND key < ?2"));
    drop.BindText(1, prefix).BindText(2, end);
    return drop.Run();
  }
  PX_ASSIGN_OR_RETURN(
      SqliteStatement drop,
      db->Prepare("DELETE FROM kv WHERE key >= ?1 AND key < ?2 AND "
                   "CAST(substr(key, ?3, instr(substr(key, ?3), '/') - 1) AS INTEGER) "
                   "BETWEEN 1 AND ?4 - 1"));
  drop.BindText(1, prefix)
      .BindText(2, end)
      .BindInt64(3, static_cast<int64_t>(prefix.size()) + 1)
      .BindInt64(4, attempt);
  return drop.Run();
}

}  // namespace sqlite_internal

int LatestSchemaVersion() { return Migrations().back().version; }

StatusOr<std::unique_ptr<StateStore>> OpenSqliteStateStore(const SqliteStateStoreOptions& options) {
  if (options.path.empty()) {
    return InvalidArgument("state database path is empty; give a file path or ':memory:'");
  }
  if (options.busy_timeout_ms < 0) {
    return InvalidArgument("busy_timeout_ms must not be negative, got " +
                           std::to_string(options.busy_timeout_ms));
  }
  if (options.checkpoint_interval_ms < 0) {
    return InvalidArgument("checkpoint_interval_ms must not be negative, got " +
                           std::to_string(options.checkpoint_interval_ms));
  }
  if (options.readers < 0) {
    return InvalidArgument("readers must not be negative, got " + std::to_string(options.readers));
  }
  if (options.max_schema_version < 0) {
    return InvalidArgument("max_schema_version must not be negative, got " +
                           std::to_string(options.max_schema_version));
  }
  PX_ASSIGN_OR_RETURN(std::unique_ptr<SqliteConnection> db,
                      SqliteConnection::Open(options.path, options.busy_timeout_ms));
  auto store = std::make_unique<sqlite_internal::SqliteStateStore>(std::move(db));
  PX_RETURN_IF_ERROR(store->Init(options));
  return std::unique_ptr<StateStore>(std::move(store));
}

}  // namespace parallax::coordinator
