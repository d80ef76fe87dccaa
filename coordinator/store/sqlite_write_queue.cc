#include "coordinator/store/sqlite_write_queue.h"

#include <utility>
#include <vector>

namespace parallax::coordinator {

Status SqliteWriteQueue::Run(const std::function<Status(SqliteConnection*)>& work) {
  Writer self;
  self.work = &work;
  std::unique_lock<std::mutex> lock(queue_mu_);
  queue_.push_back(&self);
  // No deadline needed: the leader's group is bounded by the connection's
  // busy timeout, like any other statement.
  self.cv.wait(lock, [&] { return self.done || queue_.front() == &self; });
  if (self.done) return self.result;

  // This caller leads: it takes every writer queued so far (up to the limit).
  std::vector<Writer*> group;
  for (Writer* w : queue_) {
    group.push_back(w);
    if (group.size() == max_group_) break;
  }
  lock.unlock();
  {
    std::lock_guard<std::mutex> db_lock(connection_mu_);
    RunGroup(group);
  }
  lock.lock();
  for (Writer* w : group) {
    queue_.pop_front();
    w->done = true;
    if (w != &self) w->cv.notify_one();
  }
  if (!queue_.empty()) queue_.front()->cv.notify_one();
  return self.result;
}

size_t SqliteWriteQueue::queued() {
  std::lock_guard<std::mutex> lock(queue_mu_);
  return queue_.size();
}

void SqliteWriteQueue::RunGroup(const std::vector<Writer*>& group) {
  auto fail_all = [&](const Status& why) {
    for (Writer* w : group) {
      if (w->result.ok()) w->result = why;
    }
  };
  SqliteTransaction txn(db_);
  if (Status begin = txn.Begin(SqliteTransaction::Mode::kWrite); !begin.ok()) {
    for (Writer* w : group) w->result = begin;
    return;
  }
  if (group.size() == 1) {
    // Alone: no savepoint; a failure rolls the transaction back.
    Writer* w = group.front();
    w->result = (*w->work)(db_);
    if (w->result.ok()) w->result = txn.Commit();
    return;
  }
  for (Writer* w : group) {
    if (Status s = db_->Exec("SAVEPOINT px_write"); !s.ok()) return fail_all(s);
    w->result = (*w->work)(db_);
    if (!db_->InTransaction()) {
      // SQLite rolled the whole transaction back (a full disk, an I/O
      // error): nothing of the group remains.
      const Status why = w->result.ok()
                              ? Internal("database '" + db_->path() +
                                         "': the transaction was rolled back")
                              : w->result;
      for (Writer* other : group) other->result = why;
      return;
    }
    if (!w->result.ok()) {
      if (Status s = db_->Exec("ROLLBACK TO px_write"); !s.ok()) return fail_all(s);
    }
    if (Status s = db_->Exec("RELEASE px_write"); !s.ok()) return fail_all(s);
  }
  if (Status commit = txn.Commit(); !commit.ok()) fail_all(commit);
}

}  // namespace parallax::coordinator
