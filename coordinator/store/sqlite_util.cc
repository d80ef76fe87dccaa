#include "coordinator/store/sqlite_util.h"

#include <sqlite3.h>

#include <charconv>
#include <utility>

#include "core/base/logging.h"

namespace parallax::coordinator {

namespace {

std::string Quoted(const std::string& path) { return "'" + path + "'"; }

}  // namespace

// ---- SqliteConnection ----

StatusOr<std::unique_ptr<SqliteConnection>> SqliteConnection::Open(const std::string& path,
                                                                   int busy_timeout_ms) {
  sqlite3* db = nullptr;
  const int flags = SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_FULLMUTEX;
  const int rc = sqlite3_open_v2(path.c_str(), &db, flags, nullptr);
  // sqlite3_open_v2 returns a handle even on failure (except out of memory);
  // it carries the error message and must be closed.
  std::unique_ptr<SqliteConnection> connection(new SqliteConnection(db, path));
  if (db == nullptr) return Internal("cannot open database " + Quoted(path) + ": out of memory");
  if (rc != SQLITE_OK) return connection->Error(rc);
  sqlite3_extended_result_codes(db, 1);
  sqlite3_busy_timeout(db, busy_timeout_ms);
  return connection;
}

SqliteConnection::~SqliteConnection() {
  // close_v2 defers the close until every statement is finalized, so an
  // escaped statement cannot make this fail.
  if (db_ != nullptr) sqlite3_close_v2(db_);
}

Status SqliteConnection::Error(int rc) const {
  const std::string where = Quoted(path_);
  const std::string detail = db_ != nullptr ? sqlite3_errmsg(db_) : sqlite3_errstr(rc);
  switch (rc & 0xff) {
    case SQLITE_BUSY:
    case SQLITE_LOCKED:
      return Unavailable("database " + where +
                         " is locked by another process; is a second coordinator running on it?");
    case SQLITE_READONLY:
      return Unavailable("database " + where + " is read-only; check its permissions");
    case SQLITE_FULL:
      return Unavailable("database " + where + " cannot grow (" + detail +
                         "); free space on its disk and retry");
    case SQLITE_IOERR:
      return Unavailable("database " + where + ": I/O error (" + detail +
                         "); check the disk it is on and retry");
    case SQLITE_CANTOPEN:
      return Unavailable("cannot open database " + where + " (" + detail +
                         "); check that its directory exists and is writable");
    case SQLITE_NOTADB:
      return FailedPrecondition("file " + where + " is not a Parallax state database");
    case SQLITE_CORRUPT:
      return Internal("database " + where + " is corrupt (" + detail +
                      "); restore it from a backup");
    case SQLITE_CONSTRAINT:
      if (rc == SQLITE_CONSTRAINT_FOREIGNKEY) {
        return NotFound("database " + where + ": a referenced row does not exist (" + detail + ")");
      }
      return InvalidArgument("database " + where + " refused the change: " + detail);
    default:
      return Internal("database " + where + ": " + detail);
  }
}

Status SqliteConnection::Exec(std::string_view sql) {
  const std::string text(sql);
  const int rc = sqlite3_exec(db_, text.c_str(), nullptr, nullptr, nullptr);
  if (rc != SQLITE_OK) return Error(rc);
  return Status::Ok();
}

StatusOr<SqliteStatement> SqliteConnection::Prepare(std::string_view sql) {
  sqlite3_stmt* stmt = nullptr;
  const char* tail = nullptr;
  const int rc = sqlite3_prepare_v2(db_, sql.data(), static_cast<int>(sql.size()), &stmt, &tail);
  if (rc != SQLITE_OK) return Error(rc);
  PX_CHECK(stmt != nullptr) << "empty SQL statement: " << sql;
  const std::string_view rest = sql.substr(static_cast<size_t>(tail - sql.data()));
  PX_CHECK(rest.find_first_not_of(" \t\r\n;") == std::string_view::npos)
      << "Prepare takes one statement: " << sql;
  return SqliteStatement(this, stmt);
}

StatusOr<int64_t> SqliteConnection::PragmaInt(std::string_view pragma) {
  PX_ASSIGN_OR_RETURN(SqliteStatement stmt, Prepare("PRAGMA " + std::string(pragma)));
  PX_ASSIGN_OR_RETURN(bool row, stmt.Step());
  if (!row) return Internal("PRAGMA " + std::string(pragma) + " returned no value");
  return stmt.ColumnInt64(0);
}

int64_t SqliteConnection::LastInsertRowId() const { return sqlite3_last_insert_rowid(db_); }

int SqliteConnection::Changes() const { return sqlite3_changes(db_); }

bool SqliteConnection::InTransaction() const { return sqlite3_get_autocommit(db_) == 0; }

// ---- SqliteStatement ----

SqliteStatement::~SqliteStatement() {
  if (stmt_ != nullptr) sqlite3_finalize(stmt_);
}

SqliteStatement::SqliteStatement(SqliteStatement&& other) noexcept
    : connection_(other.connection_),
      stmt_(std::exchange(other.stmt_, nullptr)),
      bind_rc_(other.bind_rc_) {}

SqliteStatement& SqliteStatement::operator=(SqliteStatement&& other) noexcept {
  if (this != &other) {
    if (stmt_ != nullptr) sqlite3_finalize(stmt_);
    connection_ = other.connection_;
    stmt_ = std::exchange(other.stmt_, nullptr);
    bind_rc_ = other.bind_rc_;
  }
  return *this;
}

void SqliteStatement::CheckBind(int rc) {
  if (rc != SQLITE_OK && bind_rc_ == SQLITE_OK) bind_rc_ = rc;
}

SqliteStatement& SqliteStatement::BindInt64(int index, int64_t value) {
  CheckBind(sqlite3_bind_int64(stmt_, index, value));
  return *this;
}

SqliteStatement& SqliteStatement::BindDouble(int index, double value) {
  CheckBind(sqlite3_bind_double(stmt_, index, value));
  return *this;
}

SqliteStatement& SqliteStatement::BindText(int index, std::string_view value) {
  CheckBind(
      sqlite3_bind_text64(stmt_, index, value.data(), value.size(), SQLITE_TRANSIENT, SQLITE_UTF8));
  return *this;
}

SqliteStatement& SqliteStatement::BindBlob(int index, std::string_view value) {
  // A null data pointer would bind NULL; an empty value must stay an empty blob.
  const char* data = value.empty() ? "" : value.data();
  CheckBind(sqlite3_bind_blob64(stmt_, index, data, value.size(), SQLITE_TRANSIENT));
  return *this;
}

SqliteStatement& SqliteStatement::BindNull(int index) {
  CheckBind(sqlite3_bind_null(stmt_, index));
  return *this;
}

StatusOr<bool> SqliteStatement::Step() {
  if (bind_rc_ != SQLITE_OK) return connection_->Error(bind_rc_);
  const int rc = sqlite3_step(stmt_);
  if (rc == SQLITE_ROW) return true;
  if (rc == SQLITE_DONE) return false;
  return connection_->Error(rc);
}

Status SqliteStatement::Run() {
  while (true) {
    PX_ASSIGN_OR_RETURN(bool row, Step());
    if (!row) return Status::Ok();
  }
}

void SqliteStatement::Reset() {
  sqlite3_reset(stmt_);
  sqlite3_clear_bindings(stmt_);
  bind_rc_ = SQLITE_OK;
}

bool SqliteStatement::IsNull(int column) const {
  return sqlite3_column_type(stmt_, column) == SQLITE_NULL;
}

int64_t SqliteStatement::ColumnInt64(int column) const {
  return sqlite3_column_int64(stmt_, column);
}

double SqliteStatement::ColumnDouble(int column) const {
  return sqlite3_column_double(stmt_, column);
}

std::string SqliteStatement::ColumnText(int column) const {
  const unsigned char* text = sqlite3_column_text(stmt_, column);
  const int size = sqlite3_column_bytes(stmt_, column);
  if (text == nullptr) return std::string();
  return std::string(reinterpret_cast<const char*>(text), static_cast<size_t>(size));
}

std::string SqliteStatement::ColumnBlob(int column) const {
  const void* data = sqlite3_column_blob(stmt_, column);
  const int size = sqlite3_column_bytes(stmt_, column);
  if (data == nullptr) return std::string();  // NULL or an empty blob
  return std::string(static_cast<const char*>(data), static_cast<size_t>(size));
}

// ---- SqliteTransaction ----

SqliteTransaction::~SqliteTransaction() {
  // A failed statement may already have rolled the transaction back (BUSY,
  // FULL, IOERR do); ROLLBACK then has nothing to do.
  if (open_ && connection_->InTransaction()) {
    Status status = connection_->Exec("ROLLBACK");
    if (!status.ok()) PX_LOG(ERROR) << "rollback failed: " << status.ToString();
  }
}

Status SqliteTransaction::Begin(Mode mode) {
  PX_CHECK(!open_) << "transaction begun twice";
  PX_RETURN_IF_ERROR(connection_->Exec(mode == Mode::kWrite ? "BEGIN IMMEDIATE" : "BEGIN"));
  open_ = true;
  return Status::Ok();
}

Status SqliteTransaction::Commit() {
  PX_CHECK(open_) << "commit without a transaction";
  // On failure the transaction stays open and the destructor rolls it back.
  PX_RETURN_IF_ERROR(connection_->Exec("COMMIT"));
  open_ = false;
  return Status::Ok();
}

// ---- Migrations ----

StatusOr<std::vector<SqlMigration>> ParseMigrations(std::string_view text) {
  constexpr std::string_view kMarker = "-- migrate:";
  std::vector<SqlMigration> migrations;
  std::vector<bool> has_statement;
  size_t line_start = 0;
  int line_number = 0;
  while (line_start < text.size()) {
    size_t line_end = text.find('\n', line_start);
    if (line_end == std::string_view::npos) line_end = text.size();
    const std::string_view line = text.substr(line_start, line_end - line_start);
    ++line_number;
    if (line.substr(0, kMarker.size()) == kMarker) {
      std::string_view number = line.substr(kMarker.size());
      while (!number.empty() && (number.front() == ' ' || number.front() == '\t')) {
        number.remove_prefix(1);
      }
      while (!number.empty() && (number.back() == ' ' || number.back() == '\r')) {
        number.remove_suffix(1);
      }
      int version = 0;
      const auto [end, ec] = std::from_chars(number.data(), number.data() + number.size(), version);
      if (ec != std::errc() || end != number.data() + number.size()) {
        return Internal("schemas/state.sql:" + std::to_string(line_number) +
                        ": expected '-- migrate: N', got '" + std::string(line) + "'");
      }
      const int expected = static_cast<int>(migrations.size()) + 1;
      if (version != expected) {
        return Internal("schemas/state.sql:" + std::to_string(line_number) + ": migration " +
                        std::to_string(version) + " where " + std::to_string(expected) +
                        " was expected; migrations are numbered 1, 2, 3, ... in order");
      }
      migrations.push_back(SqlMigration{version, std::string()});
      has_statement.push_back(false);
    } else if (!migrations.empty()) {
      migrations.back().sql.append(line).append("\n");
      const size_t first = line.find_first_not_of(" \t\r");
      if (first != std::string_view::npos && line.substr(first, 2) != "--") {
        has_statement.back() = true;
      }
    }
    line_start = line_end + 1;
  }
  if (migrations.empty()) return Internal("schemas/state.sql has no '-- migrate: N' section");
  for (size_t i = 0; i < migrations.size(); ++i) {
    if (!has_statement[i]) {
      return Internal("schemas/state.sql: migration " + std::to_string(migrations[i].version) +
                      " has no statement");
    }
  }
  return migrations;
}

Status ApplyMigrations(SqliteConnection* connection, const std::vector<SqlMigration>& migrations,
                       int target) {
  const std::string& path = connection->path();
  int64_t from = -1;  // the version before the first migration applied here
  int64_t to = 0;
  for (const SqlMigration& migration : migrations) {
    if (migration.version > target) break;
    SqliteTransaction txn(connection);
    PX_RETURN_IF_ERROR(txn.Begin(SqliteTransaction::Mode::kWrite));
    PX_ASSIGN_OR_RETURN(int64_t current, connection->PragmaInt("user_version"));
    if (current >= migration.version) continue;
    if (current == 0) PX_RETURN_IF_ERROR(CheckNoForeignTables(connection));
    const std::string context =
        "migrating database " + Quoted(path) + " to schema " + std::to_string(migration.version);
    PX_RETURN_IF_ERROR(connection->Exec(migration.sql).WithContext(context));
    // The version is ours, not user data; PRAGMA takes no parameters.
    PX_RETURN_IF_ERROR(
        connection->Exec("PRAGMA user_version = " + std::to_string(migration.version))
            .WithContext(context));
    PX_RETURN_IF_ERROR(txn.Commit().WithContext(context));
    if (from < 0) from = current;
    to = migration.version;
  }
  if (from == 0) {
    PX_LOG(INFO) << "created database " << Quoted(path) << " at schema " << to;
  } else if (from > 0) {
    PX_LOG(INFO) << "migrated database " << Quoted(path) << " from schema " << from << " to " << to;
  }
  return Status::Ok();
}

Status CheckNoForeignTables(SqliteConnection* connection) {
  PX_ASSIGN_OR_RETURN(SqliteStatement stmt,
                      connection->Prepare("SELECT name FROM sqlite_master WHERE type = 'table' "
                                          "AND name NOT LIKE 'sqlite\\_%' ESCAPE '\\' "
                                          "ORDER BY name LIMIT 1"));
  PX_ASSIGN_OR_RETURN(bool row, stmt.Step());
  if (!row) return Status::Ok();
  return FailedPrecondition(
      "file " + Quoted(connection->path()) + " is not a Parallax state database (it has a table '" +
      stmt.ColumnText(0) + "' but no Parallax schema version); refusing to change it");
}

}  // namespace parallax::coordinator
