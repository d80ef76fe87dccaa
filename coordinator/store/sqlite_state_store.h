// The SQLite implementation of StateStore. Schema and forward migrations:
// schemas/state.sql (compiled in). The database runs in WAL mode with
// foreign keys on, synchronous=FULL (a committed transaction survives a
// crash of the process or the machine) and a busy timeout. Concurrent
// writes are group-committed (one fsync for many callers' transactions);
// reads use their own connections and never wait behind a commit.
#ifndef PARALLAX_COORDINATOR_SQLITE_STATE_STORE_H_
#define PARALLAX_COORDINATOR_SQLITE_STATE_STORE_H_

#include <memory>
#include <string>

#include "coordinator/store/state_store.h"
#include "parallax/status.h"

namespace parallax::coordinator {

struct SqliteStateStoreOptions {
  // Database file; created if missing. ":memory:" for an in-memory database.
  std::string path;
  // How long a statement waits for a lock held by another connection before
  // the call fails with UNAVAILABLE.
  int busy_timeout_ms = 5000;
  // Stop after applying migrations up to this schema version (0: latest).
  // Only for tests that build a database of an older version.
  int max_schema_version = 0;
  // Connections kept open for reads besides the one that writes, so that
  // reads run concurrently with each other and with a commit. (An
  // in-memory database has only the writer.)
  int readers = 4;
  // How often a background thread copies the write-ahead log into the
  // database (a passive checkpoint: it waits for no reader or writer), so
  // that no commit pays for one. 0: SQLite's automatic checkpoint, run by
  // the commit that fills the log to 1,000 pages.
  int checkpoint_interval_ms = 1'000;
};

// Opens (creating or migrating) the database. Fails with a message naming
// the path when it cannot be opened, is not a Parallax database, has a newer
// schema version than this binary knows, or cannot be written.
StatusOr<std::unique_ptr<StateStore>> OpenSqliteStateStore(const SqliteStateStoreOptions& options);

// The schema version this binary creates and migrates to.
int LatestSchemaVersion();

}  // namespace parallax::coordinator

#endif  // PARALLAX_COORDINATOR_SQLITE_STATE_STORE_H_
