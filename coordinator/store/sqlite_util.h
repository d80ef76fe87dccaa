// Small RAII helpers over the SQLite C API, used by the SQLite StateStore
// (coordinator/store/sqlite_state_store.cc) and its tests; not a general-purpose
// database layer.
//
// Thread-safety: none of these types locks anything. A SqliteConnection and
// every statement or transaction made from it must be used by one thread at a
// time (the store holds its mutex around every use).
#ifndef PARALLAX_COORDINATOR_SQLITE_UTIL_H_
#define PARALLAX_COORDINATOR_SQLITE_UTIL_H_

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "parallax/status.h"

struct sqlite3;
struct sqlite3_stmt;

namespace parallax::coordinator {

class SqliteStatement;

// One open database connection (sqlite3_open_v2 with FULLMUTEX), closed by
// the destructor. Errors are turned into a Status naming the database path.
class SqliteConnection {
 public:
  // Opens `path` (created if missing) read-write with extended result codes
  // and the given busy timeout. Nothing is read from the file yet: a file
  // that is not a database only fails on the first statement.
  static StatusOr<std::unique_ptr<SqliteConnection>> Open(const std::string& path,
                                                          int busy_timeout_ms);
  ~SqliteConnection();

  SqliteConnection(const SqliteConnection&) = delete;
  SqliteConnection& operator=(const SqliteConnection&) = delete;

  sqlite3* handle() const { return db_; }
  const std::string& path() const { return path_; }

  // Maps a failed result code (and the connection's current error message)
  // to a Status a user can act on:
  // - BUSY, LOCKED: UNAVAILABLE "database 'PATH' is locked by another process; ..."
  // - READONLY: UNAVAILABLE "database 'PATH' is read-only; check its permissions"
  // - FULL, IOERR, CANTOPEN: UNAVAILABLE with what to check
  // - NOTADB: FAILED_PRECONDITION "file 'PATH' is not a Parallax state database"
  // - CONSTRAINT_FOREIGNKEY: NOT_FOUND; other constraints: INVALID_ARGUMENT
  // - anything else: INTERNAL with sqlite3_errmsg
  // Call it right after the failing call: a later call replaces the message.
  Status Error(int rc) const;

  // Runs one or more statements without parameters (pragmas, transaction
  // control, migrations). Never pass user data here.
  Status Exec(std::string_view sql);

  // Compiles one statement. `sql` must hold exactly one statement.
  StatusOr<SqliteStatement> Prepare(std::string_view sql);

  // The value of a pragma that returns one integer ("user_version").
  StatusOr<int64_t> PragmaInt(std::string_view pragma);

  int64_t LastInsertRowId() const;
  // Rows changed by the most recent INSERT, UPDATE or DELETE.
  int Changes() const;
  // True while a transaction is open on this connection.
  bool InTransaction() const;

 private:
  SqliteConnection(sqlite3* db, std::string path) : db_(db), path_(std::move(path)) {}

  sqlite3* const db_;
  const std::string path_;
};

// A prepared statement, finalized by the destructor. Parameters are bound by
// 1-based index; a failed bind is reported by the next Step/Run. Move-only.
// REQUIRES: the connection outlives the statement.
class SqliteStatement {
 public:
  SqliteStatement() = default;
  ~SqliteStatement();
  SqliteStatement(SqliteStatement&& other) noexcept;
  SqliteStatement& operator=(SqliteStatement&& other) noexcept;
  SqliteStatement(const SqliteStatement&) = delete;
  SqliteStatement& operator=(const SqliteStatement&) = delete;

  SqliteStatement& BindInt64(int index, int64_t value);
  SqliteStatement& BindDouble(int index, double value);
  SqliteStatement& BindText(int index, std::string_view value);
  // An empty value is stored as an empty blob, not NULL.
  SqliteStatement& BindBlob(int index, std::string_view value);
  SqliteStatement& BindNull(int index);

  // Advances: true when a row is ready to be read, false when done.
  StatusOr<bool> Step();
  // Steps to the end, ignoring rows (INSERT, UPDATE, DELETE).
  Status Run();
  // Makes the statement ready to run again; bindings are cleared.
  void Reset();

  bool IsNull(int column) const;
  int64_t ColumnInt64(int column) const;
  double ColumnDouble(int column) const;
  std::string ColumnText(int column) const;
  std::string ColumnBlob(int column) const;

 private:
  friend class SqliteConnection;
  SqliteStatement(SqliteConnection* connection, sqlite3_stmt* stmt)
      : connection_(connection), stmt_(stmt) {}
  void CheckBind(int rc);

  SqliteConnection* connection_ = nullptr;
  sqlite3_stmt* stmt_ = nullptr;
  int bind_rc_ = 0;  // first failed bind's result code; 0 (SQLITE_OK) if none
};

// A transaction that rolls back unless Commit() succeeded: every return path
// of a store method that does not commit leaves the database unchanged.
class SqliteTransaction {
 public:
  enum class Mode {
    kRead,   // BEGIN DEFERRED: a consistent snapshot; never waits for writers in WAL mode
    kWrite,  // BEGIN IMMEDIATE: takes the write lock up front (or fails UNAVAILABLE)
  };

  explicit SqliteTransaction(SqliteConnection* connection) : connection_(connection) {}
  ~SqliteTransaction();  // rolls back if begun and not committed
  SqliteTransaction(const SqliteTransaction&) = delete;
  SqliteTransaction& operator=(const SqliteTransaction&) = delete;

  Status Begin(Mode mode);
  Status Commit();

 private:
  SqliteConnection* const connection_;
  bool open_ = false;
};

// One section of schemas/state.sql: the statements that take a database from
// schema version `version - 1` to `version`.
struct SqlMigration {
  int version = 0;
  std::string sql;
};

// Splits migration text into sections that start with a line
// "-- migrate: N". Text before the first section is ignored. INTERNAL unless
// the versions are 1, 2, 3, ... in order and every section has a statement.
StatusOr<std::vector<SqlMigration>> ParseMigrations(std::string_view text);

// Applies, in one write transaction each, every migration with
// version > the database's `PRAGMA user_version` and <= `target`, setting
// user_version with it. The version is re-read under the write lock, so two
// processes opening one new file cannot both apply a migration. Before the
// first migration of a database at version 0 it runs CheckNoForeignTables.
// On failure the failing migration left nothing; earlier ones stay applied.
Status ApplyMigrations(SqliteConnection* connection, const std::vector<SqlMigration>& migrations,
                       int target);

// FAILED_PRECONDITION "file 'PATH' is not a Parallax state database ..." if
// the database holds any table: a file at schema version 0 must be empty
// before the store creates its tables in it. Reads only.
Status CheckNoForeignTables(SqliteConnection* connection);

}  // namespace parallax::coordinator

#endif  // PARALLAX_COORDINATOR_SQLITE_UTIL_H_
