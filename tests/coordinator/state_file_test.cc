// The coordinator's checks of its database file at start
// (coordinator/store/state_file.h), on real files.
#include "coordinator/store/state_file.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sqlite3.h>

#include <filesystem>
#include <fstream>

#include "coordinator/store/sqlite_util.h"
#include "tests/testing/temp_dir.h"

namespace parallax::coordinator {
namespace {

using ::testing::HasSubstr;

// A clock that moves on by `step_ms` every time it is read: a check that
// reads it often runs out of time at once.
class SteppingClock : public Clock {
 public:
  explicit SteppingClock(int64_t step_ms) : step_ms_(step_ms) {}
  int64_t NowMillis() const override { return now_ += step_ms_; }

 private:
  const int64_t step_ms_;
  mutable int64_t now_ = 0;
};

class StateFileTest : public ::testing::Test {
 protected:
  StatusOr<std::unique_ptr<StateStore>> Open(StateFileOptions options = {}) {
    SqliteStateStoreOptions store;
    store.path = path_;
    return OpenCoordinatorState(store, options);
  }
  // A real state with a job in it, closed again.
  void MakeState() {
    auto store = Open();
    ASSERT_TRUE(store.ok()) << store.status().ToString();
    NewJob job;
    job.name = "j";
    job.job_text = std::string(100'000, 'x');  // a few pages
    for (int i = 0; i < 20; ++i) ASSERT_TRUE((*store)->CreateJob(job, 1).ok());
  }
  std::vector<std::string> SetAsideFiles() const {
    std::vector<std::string> out;
    for (const auto& e : std::filesystem::directory_iterator(dir_.path())) {
      if (e.path().filename().string().find(".set-aside-") != std::string::npos) {
        out.push_back(e.path().string());
      }
    }
    return out;
  }

  testing::TempDir dir_;
  const std::string path_ = dir_.File("state.db");
};

TEST_F(StateFileTest, AMissingFileBecomesANewState) {
  EXPECT_EQ(*InspectStateFile(path_), StateFileKind::kMissing);
  ASSERT_TRUE(Open().ok());
  EXPECT_EQ(*InspectStateFile(path_), StateFileKind::kParallax);
}

TEST_F(StateFileTest, TheDatabasesMissingDirectoryIsMade) {
  const std::string db = dir_.File("var/lib/parallax/state.db");
  ASSERT_TRUE(MakeStateDirectory(db).ok());
  EXPECT_TRUE(std::filesystem::is_directory(dir_.File("var/lib/parallax")));
  EXPECT_TRUE(MakeStateDirectory(db).ok());  // already there
  SqliteStateStoreOptions store;
  store.path = db;
  EXPECT_TRUE(OpenCoordinatorState(store, {}).ok());
}

TEST_F(StateFileTest, ADirectoryThatCannotBeMadeIsNamedWithWhatToDo) {
  std::ofstream(dir_.File("blocker")) << "a file, not a directory\n";
  Status s = MakeStateDirectory(dir_.File("blocker/parallax/state.db"));
  ASSERT_EQ(s.code(), StatusCode::kFailedPrecondition);
  EXPECT_THAT(s.message(), ::testing::HasSubstr("'" + dir_.File("blocker/parallax") + "'"));
  EXPECT_THAT(s.message(), ::testing::HasSubstr("install -d"));
}

TEST_F(StateFileTest, AnEmptyFileIsRefusedUnlessANewStateIsAskedFor) {
  std::ofstream(path_).flush();
  auto store = Open();
  ASSERT_FALSE(store.ok());
  EXPECT_EQ(store.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_THAT(store.status().message(), HasSubstr("empty (0-byte) file"));
  EXPECT_THAT(store.status().message(), HasSubstr("--new-state"));
  EXPECT_EQ(std::filesystem::file_size(path_), 0u);  // untouched

  StateFileOptions options;
  options.new_state = true;
  ASSERT_TRUE(Open(options).ok());
  ASSERT_EQ(SetAsideFiles().size(), 1u);
  EXPECT_EQ(std::filesystem::file_size(SetAsideFiles()[0]), 0u);
}

TEST_F(StateFileTest, AForeignFileIsRefusedAndSetAsideOnlyWhenAsked) {
  std::ofstream(path_) << "this is somebody's notes, not a database\n";
  auto store = Open();
  ASSERT_FALSE(store.ok());
  EXPECT_THAT(store.status().message(), HasSubstr("not a Parallax state database"));
  StateFileOptions options;
  options.new_state = true;
  ASSERT_TRUE(Open(options).ok());
  ASSERT_EQ(SetAsideFiles().size(), 1u);
  std::ifstream kept(SetAsideFiles()[0]);
  std::string line;
  std::getline(kept, line);
  EXPECT_EQ(line, "this is somebody's notes, not a database");
}

TEST_F(StateFileTest, AnotherProgramsSqliteDatabaseIsForeign) {
  {
    auto db = SqliteConnection::Open(path_, 1000);
    ASSERT_TRUE(db.ok());
    ASSERT_TRUE((*db)->Exec("CREATE TABLE notes (text TEXT)").ok());
  }
  EXPECT_EQ(*InspectStateFile(path_), StateFileKind::kForeign);
  EXPECT_FALSE(Open().ok());
}

TEST_F(StateFileTest, ADamagedStateIsRefusedWithWhatQuickCheckFound) {
  MakeState();
  // Random bytes over the middle of the file (the pages holding the jobs).
  const auto size = std::filesystem::file_size(path_);
  {
    std::fstream f(path_, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(static_cast<std::streamoff>(size / 3));
    uint32_t x = 12345;
    for (size_t i = 0; i < size / 3; ++i) {
      x = x * 1103515245 + 12345;
      f.put(static_cast<char>(x >> 16));
    }
  }
  auto store = Open();
  ASSERT_FALSE(store.ok());
  EXPECT_THAT(store.status().message(), HasSubstr("is damaged; PRAGMA quick_check found"));
  EXPECT_THAT(store.status().message(), HasSubstr("--skip-db-check"));
  StateFileOptions skip;
  skip.check = false;
  EXPECT_TRUE(Open(skip).ok());  // served as asked, damage and all
}

TEST_F(StateFileTest, AHealthyStatePassesTheCheck) {
  MakeState();
  auto store = Open();
  ASSERT_TRUE(store.ok()) << store.status().ToString();
  EXPECT_EQ((*store)->ListJobs({}).value().size(), 20u);
}

TEST_F(StateFileTest, ACheckThatRunsOutOfTimeIsStoppedAndTheStateServed) {
  MakeState();
  SteppingClock clock(/*step_ms=*/1'000);
  auto db = SqliteConnection::Open(path_, 1000);
  ASSERT_TRUE(db.ok());
  StatusOr<std::string> result = QuickCheck(db->get(), 10, &clock);
  EXPECT_EQ(result.status().code(), StatusCode::kDeadlineExceeded);
  StateFileOptions options;
  options.clock = &clock;
  options.check_timeout_ms = 10;
  EXPECT_TRUE(Open(options).ok());
}

}  // namespace
}  // namespace parallax::coordinator
