#include "coordinator/store/state_file.h"

#include <sqlite3.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "coordinator/store/sqlite_util.h"
#include "core/base/logging.h"
#include "core/base/time_format.h"

namespace parallax::coordinator {
namespace {

namespace fs = std::filesystem;

constexpr char kSqliteMagic[] = "SQLite format 3";  // and a NUL: the first 16 bytes

struct Deadline {
  Clock* clock;
  int64_t until;
  bool hit = false;
};

int StopAtDeadline(void* arg) {
  auto* deadline = static_cast<Deadline*>(arg);
  if (deadline->clock->NowMillis() <= deadline->until) return 0;
  deadline->hit = true;
  return 1;  // interrupts the statement
}

// Renames `path` (and its -wal, -shm) to <path>.set-aside-<time>; returns the new name.
StatusOr<std::string> SetAside(const std::string& path, Clock* clock) {
  std::string stamp = FormatRfc3339(clock->NowMillis());
  for (char& c : stamp) {
    if (c == ':') c = '-';
  }
  const std::string aside = path + ".set-aside-" + stamp;
  for (const char* suffix : {"-wal", "-shm", ""}) {
    std::error_code ec;
    const std::string from = path + suffix;
    if (!fs::exists(from, ec)) continue;
    fs::rename(from, aside + suffix, ec);
    if (ec) {
      return IoError("--new-state: cannot rename '" + from + "' to '" + aside + suffix +
                     "': " + ec.message() + "; nothing was changed");
    }
  }
  return aside;
}

std::string Refusal(const std::string& path, StateFileKind kind) {
  const std::string what =
      kind == StateFileKind::kEmpty
          ? "database '" + path + "' is an empty (0-byte) file, not a Parallax state"
          : "file '" + path + "' is not a Parallax state database (not SQLite, or another "
            "program's SQLite database)";
  return what + "; nothing was changed. A truncated copy or a wrong --db? Give the right --db or "
                "restore the file from a backup; or start with --new-state to set the file aside "
                "(renamed, not deleted) and begin a new, empty state";
}

// PRAGMA quick_check before serving a Parallax database.
Status CheckBeforeServing(const SqliteStateStoreOptions& store, const StateFileOptions& options) {
  PX_ASSIGN_OR_RETURN(std::unique_ptr<SqliteConnection> db,
                      SqliteConnection::Open(store.path, store.busy_timeout_ms));
  const int64_t start = options.clock->NowMillis();
  StatusOr<std::string> result = QuickCheck(db.get(), options.check_timeout_ms, options.clock);
  if (result.status().code() == StatusCode::kDeadlineExceeded) {
    PX_LOG(WARNING) << "database '" << store.path << "': PRAGMA quick_check did not finish within "
                    << options.check_timeout_ms << " ms (--db-check-timeout-ms); serving it "
                    << "unchecked";
    return Status::Ok();
  }
  PX_RETURN_IF_ERROR(result.status());
  if (*result == "ok") {
    PX_LOG(INFO) << "database '" << store.path << "' passed PRAGMA quick_check in "
                 << options.clock->NowMillis() - start << " ms";
    return Status::Ok();
  }
  return FailedPrecondition(
      "database '" + store.path + "' is damaged; PRAGMA quick_check found:\n" + *result +
      "\nNothing was served. Restore it from a backup (or salvage it with `sqlite3 " + store.path +
      " .recover`); or start with --new-state to set it aside (renamed, not deleted) and begin a "
      "new, empty state, or with --skip-db-check to serve it anyway (requests that reach the "
      "damage will fail)");
}

}  // namespace

StatusOr<StateFileKind> InspectStateFile(const std::string& path) {
  std::error_code ec;
  if (!fs::exists(path, ec)) return StateFileKind::kMissing;
  const auto size = fs::file_size(path, ec);
  if (ec) return IoError("cannot read '" + path + "': " + ec.message());
  if (size == 0) return StateFileKind::kEmpty;
  char header[16] = {0};
  std::ifstream in(path, std::ios::binary);
  if (!in.read(header, sizeof(header))) {
    if (!in.eof()) return IoError("cannot read '" + path + "': " + std::strerror(errno));
    return StateFileKind::kForeign;  // shorter than an SQLite header
  }
  if (std::memcmp(header, kSqliteMagic, sizeof(header)) != 0) return StateFileKind::kForeign;
  PX_ASSIGN_OR_RETURN(std::unique_ptr<SqliteConnection> db, SqliteConnection::Open(path, 1000));
  StatusOr<int64_t> version = db->PragmaInt("user_version");
  if (!version.ok()) {
    // A header that says SQLite and a file SQLite cannot read: the check
    // (or the store) says what is wrong with it.
    return StateFileKind::kParallax;
  }
  if (*version != 0) return StateFileKind::kParallax;
  PX_ASSIGN_OR_RETURN(SqliteStatement tables,
                      db->Prepare("SELECT count(*) FROM sqlite_master WHERE type = 'table'"));
  PX_ASSIGN_OR_RETURN(bool row, tables.Step());
  return row && tables.ColumnInt64(0) > 0 ? StateFileKind::kForeign : StateFileKind::kNew;
}

StatusOr<std::string> QuickCheck(SqliteConnection* db, int64_t timeout_ms, Clock* clock) {
  Deadline deadline{clock, clock->NowMillis() + timeout_ms};
  sqlite3_progress_handler(db->handle(), 1000, StopAtDeadline, &deadline);
  std::string findings;
  Status failed;
  {
    StatusOr<SqliteStatement> check = db->Prepare("PRAGMA quick_check(10)");
    if (check.ok()) {
      while (true) {
        StatusOr<bool> row = check->Step();
        if (!row.ok()) {
          failed = row.status();
          break;
        }
        if (!*row) break;
        findings += (findings.empty() ? "" : "\n") + check->ColumnText(0);
      }
    } else {
      failed = check.status();
    }
  }
  sqlite3_progress_handler(db->handle(), 0, nullptr, nullptr);
  if (deadline.hit) {
    return DeadlineExceeded("PRAGMA quick_check ran past " + std::to_string(timeout_ms) + " ms");
  }
  // A file damaged badly enough fails the check itself: that is a finding.
  if (!failed.ok()) return failed.message();
  return findings.empty() ? std::string("ok") : findings;
}

Status MakeStateDirectory(const std::string& db_path) {
  std::error_code ec;
  const fs::path dir = fs::absolute(db_path, ec).parent_path();
  if (fs::is_directory(dir, ec)) return Status::Ok();
  if (fs::create_directories(dir, ec) && !ec) {
    fs::permissions(dir, fs::perms::owner_all | fs::perms::group_read | fs::perms::group_exec,
                    ec);
    PX_LOG(INFO) << "created directory '" << dir.string() << "' for the database (--db)";
    return Status::Ok();
  }
  return FailedPrecondition(
      "the directory of --db '" + db_path + "', '" + dir.string() +
      "', does not exist and cannot be created (" +
      (ec ? ec.message() : std::string("a file of that name is in the way")) +
      "); create it, writable by the user the coordinator runs as (e.g. `install -d -o parallax "
      "-m 750 " + dir.string() + "`), or give --db a path in an existing directory");
}

StatusOr<std::unique_ptr<StateStore>> OpenCoordinatorState(const SqliteStateStoreOptions& store,
                                                           const StateFileOptions& options) {
  if (store.path == ":memory:") return OpenSqliteStateStore(store);
  PX_ASSIGN_OR_RETURN(StateFileKind kind, InspectStateFile(store.path));
  Status problem;
  std::string what;  // for the log of --new-state
  if (kind == StateFileKind::kEmpty || kind == StateFileKind::kForeign) {
    problem = FailedPrecondition(Refusal(store.path, kind));
    what = kind == StateFileKind::kEmpty ? "an empty file" : "not a Parallax database";
  } else if (kind == StateFileKind::kParallax && options.check) {
    problem = CheckBeforeServing(store, options);
    what = "damaged";
  }
  if (!problem.ok()) {
    if (!options.new_state || problem.code() != StatusCode::kFailedPrecondition) return problem;
    PX_ASSIGN_OR_RETURN(std::string aside, SetAside(store.path, options.clock));
    PX_LOG(WARNING) << "--new-state: '" << store.path << "' was " << what << "; set it aside as '"
                    << aside << "' and starting a new, empty state";
  }
  return OpenSqliteStateStore(store);
}

}  // namespace parallax::coordinator
