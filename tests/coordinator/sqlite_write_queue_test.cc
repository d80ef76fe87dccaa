#include "coordinator/store/sqlite_write_queue.h"

#include <gtest/gtest.h>
#include <sqlite3.h>

#include <atomic>
#include <chrono>
#include <future>
#include <memory>
#include <thread>
#include <vector>

#include "coordinator/store/sqlite_util.h"
#include "tests/testing/temp_dir.h"

namespace parallax::coordinator {
namespace {

class SqliteWriteQueueTest : public ::testing::Test {
 protected:
  void SetUp() override {
    db_ = std::move(SqliteConnection::Open(dir_.File("q.db"), 5'000)).value();
    ASSERT_TRUE(db_->Exec("PRAGMA journal_mode = WAL; CREATE TABLE t (v INTEGER PRIMARY KEY)").ok());
    sqlite3_commit_hook(
        db_->handle(),
        [](void* count) {
          ++*static_cast<std::atomic<int>*>(count);
          return 0;
        },
        &commits_);
    queue_ = std::make_unique<SqliteWriteQueue>(db_.get());
  }

  static Status Insert(SqliteConnection* db, int v) {
    PX_ASSIGN_OR_RETURN(SqliteStatement stmt, db->Prepare("INSERT INTO t (v) VALUES (?1)"));
    stmt.BindInt64(1, v);
    return stmt.Run();
  }

  std::vector<int> Rows() {
    std::vector<int> rows;
    SqliteStatement stmt = std::move(db_->Prepare("SELECT v FROM t ORDER BY v")).value();
    while (*stmt.Step()) rows.push_back(static_cast<int>(stmt.ColumnInt64(0)));
    return rows;
  }

  // Waits (up to 10 s) until `n` callers are queued.
  bool WaitForQueued(size_t n) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (queue_->queued() < n) {
      if (std::chrono::steady_clock::now() > deadline) return false;
      std::this_thread::yield();
    }
    return true;
  }

  testing::TempDir dir_;
  std::unique_ptr<SqliteConnection> db_;
  std::unique_ptr<SqliteWriteQueue> queue_;
  std::atomic<int> commits_{0};
};

TEST_F(SqliteWriteQueueTest, WritersQueuedBehindACommitShareTheNextOne) {
  // The first writer keeps its transaction open until released, so the
  // others queue behind it.
  std::promise<void> release;
  std::shared_future<void> released = release.get_future().share();
  std::promise<void> inside;
  std::thread first([&] {
    Status s = queue_->Run([&](SqliteConnection* db) {
      PX_RETURN_IF_ERROR(Insert(db, 1));
      inside.set_value();
      released.wait();
      return Status::Ok();
    });
    EXPECT_TRUE(s.ok()) << s.ToString();
  });
  inside.get_future().wait();
  std::vector<std::thread> others;
  std::vector<Status> results(6);
  for (int i = 0; i < 6; ++i) {
    others.emplace_back([&, i] {
      results[i] = queue_->Run([&](SqliteConnection* db) -> Status {
        PX_RETURN_IF_ERROR(Insert(db, 10 + i));
        // One of them fails after writing: only its own row goes.
        if (i == 3) return InvalidArgument("writer 3 gives up");
        return Status::Ok();
      });
    });
  }
  ASSERT_TRUE(WaitForQueued(7));
  release.set_value();
  first.join();
  for (auto& t : others) t.join();
  for (int i = 0; i < 6; ++i) {
    if (i == 3) {
      EXPECT_EQ(results[i].message(), "writer 3 gives up");
    } else {
      EXPECT_TRUE(results[i].ok()) << i << ": " << results[i].ToString();
    }
  }
  EXPECT_EQ(Rows(), (std::vector<int>{1, 10, 11, 12, 14, 15}));
  EXPECT_EQ(commits_.load(), 2);  // the first writer's, then one for the six
}

TEST_F(SqliteWriteQueueTest, AWriterAloneThatFailsLeavesNothing) {
  Status s = queue_->Run([&](SqliteConnection* db) -> Status {
    PX_RETURN_IF_ERROR(Insert(db, 7));
    return FailedPrecondition("no");
  });
  EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition);
  EXPECT_TRUE(Rows().empty());
  EXPECT_TRUE(queue_->Run([&](SqliteConnection* db) { return Insert(db, 8); }).ok());
  EXPECT_EQ(Rows(), std::vector<int>{8});
}

TEST_F(SqliteWriteQueueTest, ABeginThatFailsFailsTheGroupAndChangesNothing) {
  // Another connection holds the write lock: BEGIN IMMEDIATE cannot start.
  auto other = std::move(SqliteConnection::Open(dir_.File("q.db"), 0)).value();
  db_ = nullptr;  // reopened below with no busy wait
  queue_ = nullptr;
  db_ = std::move(SqliteConnection::Open(dir_.File("q.db"), 0)).value();
  queue_ = std::make_unique<SqliteWriteQueue>(db_.get());
  ASSERT_TRUE(other->Exec("BEGIN IMMEDIATE").ok());
  Status s = queue_->Run([&](SqliteConnection* db) { return Insert(db, 1); });
  EXPECT_EQ(s.code(), StatusCode::kUnavailable) << s.ToString();
  ASSERT_TRUE(other->Exec("ROLLBACK").ok());
  EXPECT_TRUE(Rows().empty());
}

}  // namespace
}  // namespace parallax::coordinator
