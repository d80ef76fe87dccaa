// Group commit for one SQLite connection: write transactions that callers
// start while another is committing are run together, each inside its own
// SAVEPOINT, and share one COMMIT (one fsync of the write-ahead log).
//
// What a caller sees does not change: its work happens completely or not at
// all, and Run returns only once the transaction that holds it committed (or
// failed). Work that fails is rolled back to its savepoint and does not
// disturb the others of its group; a BEGIN or COMMIT that fails fails every
// caller of the group, and then none of their changes remain.
//
// The leader/follower hand-off is LevelDB's (DBImpl::Write): the caller at
// the front of the queue runs the group on its own thread while the others
// wait, so there is no writer thread to start or stop.
//
// Thread-safe. The connection must not be used by anyone else while a group
// runs: callers that share it (reads on an in-memory database) hold
// `connection_mu()`, which the leader holds for the whole group.
#ifndef PARALLAX_COORDINATOR_SQLITE_WRITE_QUEUE_H_
#define PARALLAX_COORDINATOR_SQLITE_WRITE_QUEUE_H_

#include <condition_variable>
#include <cstddef>
#include <deque>
#include <functional>
#include <mutex>

#include "coordinator/store/sqlite_util.h"
#include "parallax/status.h"

namespace parallax::coordinator {

class SqliteWriteQueue {
 public:
  // `db` must outlive the queue. A group holds at most `max_group` callers.
  explicit SqliteWriteQueue(SqliteConnection* db, size_t max_group = 512)
      : db_(db), max_group_(max_group) {}

  SqliteWriteQueue(const SqliteWriteQueue&) = delete;
  SqliteWriteQueue& operator=(const SqliteWriteQueue&) = delete;

  // Runs `work` in a write transaction (BEGIN IMMEDIATE) and commits. Returns
  // `work`'s Status when it failed (its changes are gone), else the
  // transaction's. `work` runs on some caller's thread (not necessarily this
  // one) with the connection, and must not call Run itself.
  Status Run(const std::function<Status(SqliteConnection*)>& work);

  // Held by the leader while a group runs.
  std::mutex& connection_mu() { return connection_mu_; }

  // Callers queued now, the running group included.
  size_t queued();

 private:
  struct Writer {
    const std::function<Status(SqliteConnection*)>* work = nullptr;
    Status result;  // the work's own Status, or the group's BEGIN/COMMIT failure
    bool done = false;
    std::condition_variable cv;
  };

  // Runs `group` in one transaction; sets every writer's result.
  // REQUIRES: connection_mu_ held.
  void RunGroup(const std::vector<Writer*>& group);

  SqliteConnection* const db_;
  const size_t max_group_;

  std::mutex connection_mu_;  // guards every use of db_

  std::mutex queue_mu_;
  std::deque<Writer*> queue_;  // GUARDED_BY(queue_mu_); the front one leads
};

}  // namespace parallax::coordinator

#endif  // PARALLAX_COORDINATOR_SQLITE_WRITE_QUEUE_H_
