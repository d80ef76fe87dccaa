// How parallax-coordinator opens its database at start (--db, --new-state,
// --skip-db-check, --db-check-timeout-ms), so that it neither silently
// replaces a state it cannot read nor serves a damaged one:
//
//   missing file             a new, empty state is created (the first start)
//   empty (0-byte) file,     refused, naming the file and --new-state: an
//   not SQLite, or another   empty or strange file where a state should be
//   program's SQLite file    is a mistake (a truncated copy, a wrong path)
//                            to look at, not to overwrite. With new_state
//                            the file (and its -wal and -shm) is renamed to
//                            <path>.set-aside-<UTC time>, nothing is
//                            deleted, and a new state is created
//   a Parallax database      PRAGMA quick_check, stopped after
//                            check_timeout_ms: damage is refused with
//                            SQLite's findings and what to do; a check that
//                            runs out of time is logged and the database
//                            served (a big, healthy state must not keep the
//                            coordinator down)
#ifndef PARALLAX_COORDINATOR_STATE_FILE_H_
#define PARALLAX_COORDINATOR_STATE_FILE_H_

#include <cstdint>
#include <memory>
#include <string>

#include "coordinator/store/sqlite_state_store.h"
#include "coordinator/store/state_store.h"
#include "core/base/clock.h"
#include "parallax/status.h"

namespace parallax::coordinator {

class SqliteConnection;

struct StateFileOptions {
  // Set a 0-byte or foreign file aside and start a new state (--new-state).
  bool new_state = false;
  // Run PRAGMA quick_check before serving (--skip-db-check turns it off).
  bool check = true;
  int64_t check_timeout_ms = 10'000;  // --db-check-timeout-ms
  // Times the check. Must outlive the call.
  Clock* clock = RealClock();
};

enum class StateFileKind {
  kMissing,
  kEmpty,     // 0 bytes
  kNew,       // an SQLite database with no tables (nothing to lose)
  kParallax,  // an SQLite database with a schema version
  kForeign,   // not an SQLite database, or one with tables but no schema version
};

// Makes the directory that will hold the database at `db_path` (and its
// parents, mode 0750) when it is missing, so `--db /var/lib/parallax/state.db`
// works on a fresh host. FAILED_PRECONDITION naming the directory, why, and
// what to do when it cannot be made.
Status MakeStateDirectory(const std::string& db_path);

// What is at `path`. IO_ERROR naming the path when it cannot be read.
StatusOr<StateFileKind> InspectStateFile(const std::string& path);

// Opens store.path for serving as the file comment says. FAILED_PRECONDITION
// naming the file and the flag that helps for a refused file or a failed
// check; otherwise as OpenSqliteStateStore.
StatusOr<std::unique_ptr<StateStore>> OpenCoordinatorState(const SqliteStateStoreOptions& store,
                                                           const StateFileOptions& options);

// PRAGMA quick_check on `db`, interrupted once `timeout_ms` have passed on
// `clock`: "ok", or SQLite's findings (the first 10 lines).
// DEADLINE_EXCEEDED when it ran out of time.
StatusOr<std::string> QuickCheck(SqliteConnection* db, int64_t timeout_ms, Clock* clock);

}  // namespace parallax::coordinator

#endif  // PARALLAX_COORDINATOR_STATE_FILE_H_
