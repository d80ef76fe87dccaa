// The real parallax-coordinator and parallax binaries, on loopback, against a
// real SQLite file: submit, SIGKILL, restart, and the CLI's contract.
#include <gtest/gtest.h>
#include <signal.h>
#include <sqlite3.h>
#include <sys/wait.h>

#include <atomic>
#include <chrono>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <thread>

#include "tests/testing/build_paths.h"
#include "tests/testing/coordinator_process.h"
#include "tests/testing/subprocess.h"
#include "tests/testing/temp_dir.h"

namespace parallax {
namespace {

using testing::ChildProcess;
using testing::LastLine;
using testing::RunProcess;
using testing::RunResult;

std::string EnvOr(const char* name, const std::string& fallback) {
  const char* v = std::getenv(name);
  return v && *v ? v : fallback;
}

const std::string kBinDir = EnvOr("PARALLAX_BIN_DIR", ::parallax::testing::BuildBinDir());
const std::string kSourceDir = EnvOr("PARALLAX_SOURCE_DIR", ::parallax::testing::SourceDir());

class CoordinatorProcessTest : public ::testing::Test {
 protected:
  std::string Db() const { return dir_.File("state.db"); }

  // Starts the coordinator on a free port and waits until it listens.
  void StartCoordinator() {
    testing::CoordinatorProcessOptions options;
    options.db = Db();
    coordinator_.reset();
    coordinator_ = std::make_unique<testing::CoordinatorProcess>(kBinDir, dir_.path(), options);
    ASSERT_TRUE(coordinator_->ok()) << coordinator_->error();
    address_ = coordinator_->address();
  }

  void KillCoordinator() { ASSERT_TRUE(coordinator_->Kill()) << "not ended by SIGKILL"; }

  std::string Log() const { return testing::ReadWholeFile(dir_.File("coordinator.log")); }

  RunResult Cli(std::vector<std::string> args, std::vector<std::string> env = {}) {
    std::vector<std::string> argv = {kBinDir + "/parallax"};
    if (!address_.empty()) {
      argv.push_back("--coordinator");
      argv.push_back(address_);
    }
    argv.insert(argv.end(), args.begin(), args.end());
    return RunProcess(argv, env, 30'000);
  }

  nlohmann::json StatusJson(const std::string& job = "") {
    std::vector<std::string> args = {"status", "--json"};
    if (!job.empty()) args.push_back(job);
    RunResult r = Cli(args);
    EXPECT_EQ(r.exit_code, 0) << r.err;
    return nlohmann::json::parse(r.out);
  }

  // A built-in model's job that names no data files (brown-lm's would have
  // to exist: submit checks paths, and a fresh clone has no data/).
  std::string Example() const { return kSourceDir + "/examples/mlp.toml"; }

  testing::TempDir dir_;
  std::unique_ptr<testing::CoordinatorProcess> coordinator_;
  std::string address_;
};

TEST_F(CoordinatorProcessTest, JobSurvivesSigkillAndRestart) {
  StartCoordinator();
  RunResult submit = Cli({"submit", Example()});
  ASSERT_EQ(submit.exit_code, 0) << submit.err;
  std::string id = LastLine(submit.out);
  ASSERT_FALSE(id.empty());
  nlohmann::json before = StatusJson(id);
  ASSERT_EQ(before["jobs"].size(), 1u);
  EXPECT_EQ(before["jobs"][0]["state"], "PENDING");
  EXPECT_EQ(before["jobs"][0]["name"], "mlp");

  KillCoordinator();
  StartCoordinator();

  nlohmann::json after = StatusJson(id);
  ASSERT_EQ(after["jobs"].size(), 1u);
  EXPECT_EQ(after["jobs"][0]["id"], before["jobs"][0]["id"]);
  EXPECT_EQ(after["jobs"][0]["created"], before["jobs"][0]["created"]);
  EXPECT_EQ(after["jobs"][0]["state"], "PENDING");
  RunResult events = Cli({"events", id});
  EXPECT_EQ(events.exit_code, 0) << events.err;
  EXPECT_NE(events.out.find("submitted"), std::string::npos) << events.out;
}

TEST_F(CoordinatorProcessTest, SigkillDuringSubmitsLosesNothingAcknowledged) {
  StartCoordinator();
  std::set<int64_t> acknowledged;
  std::atomic<bool> stop{false};
  std::atomic<int> count{0};
  std::thread submitter([&] {
    while (!stop) {
      RunResult r = Cli({"submit", Example()});
      if (r.exit_code == 0) {
        acknowledged.insert(std::stoll(LastLine(r.out)));
        ++count;
      }
    }
  });
  while (count < 20) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  KillCoordinator();
  stop = true;
  submitter.join();
  StartCoordinator();

  nlohmann::json all = StatusJson();
  std::set<int64_t> stored;
  for (const auto& j : all["jobs"]) stored.insert(j["id"].get<int64_t>());
  for (int64_t id : acknowledged) EXPECT_TRUE(stored.count(id)) << "lost job " << id;

  // The database is consistent: every job has its "submitted" event.
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open_v2(Db().c_str(), &db, SQLITE_OPEN_READONLY, nullptr), SQLITE_OK);
  auto scalar = [&](const char* sql) {
    sqlite3_stmt* st = nullptr;
    EXPECT_EQ(sqlite3_prepare_v2(db, sql, -1, &st, nullptr), SQLITE_OK) << sql;
    std::string v;
    if (sqlite3_step(st) == SQLITE_ROW) v = reinterpret_cast<const char*>(sqlite3_column_text(st, 0));
    sqlite3_finalize(st);
    return v;
  };
  EXPECT_EQ(scalar("PRAGMA integrity_check"), "ok");
  EXPECT_EQ(scalar("SELECT COUNT(*) FROM jobs"),
            scalar("SELECT COUNT(*) FROM events WHERE kind = 'submitted'"));
  sqlite3_close(db);
}

TEST_F(CoordinatorProcessTest, SecondCoordinatorOnSameDatabaseIsRefused) {
  StartCoordinator();
  RunResult second = RunProcess({kBinDir + "/parallax-coordinator", "--listen", "127.0.0.1:0",
                                 "--db", Db()},
                                {}, 10'000);
  EXPECT_EQ(second.exit_code, 1);
  EXPECT_NE(second.err.find("in use by another parallax-coordinator"), std::string::npos)
      << second.err;
  // The first one still serves.
  EXPECT_EQ(Cli({"status"}).exit_code, 0);
}

TEST_F(CoordinatorProcessTest, InvalidJobFileExitsTwoAndSubmitsNothing) {
  StartCoordinator();
  std::string bad = dir_.File("bad.toml");
  std::ofstream(bad) << "[job]\nname = \"x\"\nworker = 2\n[trainer]\nmodel = \"lm\"\n";
  RunResult r = Cli({"submit", bad});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find(bad + ":3:1"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("did you mean 'workers'"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("nothing was submitted"), std::string::npos) << r.err;
  EXPECT_TRUE(StatusJson()["jobs"].empty());

  RunResult missing = Cli({"submit", dir_.File("nope.toml")});
  EXPECT_EQ(missing.exit_code, 2);
  EXPECT_NE(missing.err.find("nope.toml"), std::string::npos);
}

TEST_F(CoordinatorProcessTest, StatusJsonHasTheDocumentedFields) {
  StartCoordinator();
  RunResult submit = Cli({"submit", Example()});
  ASSERT_EQ(submit.exit_code, 0) << submit.err;
  nlohmann::json s = StatusJson();
  ASSERT_EQ(s["jobs"].size(), 1u);
  const auto& j = s["jobs"][0];
  for (const char* key : {"id", "name", "state", "workers", "step", "created", "updated"}) {
    EXPECT_TRUE(j.contains(key)) << key;
  }
  EXPECT_EQ(j["workers"], 2);
  std::string created = j["created"];
  EXPECT_EQ(created.size(), 20u) << created;  // 2026-11-22T10:00:00Z
  EXPECT_EQ(created.back(), 'Z');
  EXPECT_EQ(created[10], 'T');
}

TEST_F(CoordinatorProcessTest, CancelUnknownAndFinishedJobs) {
  StartCoordinator();
  std::string id = LastLine(Cli({"submit", Example()}).out);
  RunResult cancel = Cli({"cancel", id});
  EXPECT_EQ(cancel.exit_code, 0) << cancel.err;
  EXPECT_EQ(StatusJson(id)["jobs"][0]["state"], "CANCELLED");
  RunResult again = Cli({"cancel", id});
  EXPECT_EQ(again.exit_code, 1);
  EXPECT_NE(again.err.find("already CANCELLED"), std::string::npos) << again.err;
  RunResult unknown = Cli({"status", "999"});
  EXPECT_EQ(unknown.exit_code, 1);
  EXPECT_NE(unknown.err.find("999"), std::string::npos) << unknown.err;
  RunResult agents = Cli({"agents", "--json"});
  EXPECT_EQ(agents.exit_code, 0);
  EXPECT_EQ(nlohmann::json::parse(agents.out), nlohmann::json::parse(R"({"agents":[]})"));
}

TEST_F(CoordinatorProcessTest, UnreachableCoordinatorExitsThreeAndSaysWhere) {
  // Nothing listens on port 1.
  RunResult r = RunProcess({kBinDir + "/parallax", "status"}, {"PARALLAX_COORDINATOR=127.0.0.1:1"});
  EXPECT_EQ(r.exit_code, 3);
  EXPECT_NE(r.err.find("127.0.0.1:1"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("PARALLAX_COORDINATOR"), std::string::npos) << r.err;
  RunResult flag = RunProcess({kBinDir + "/parallax", "--coordinator", "127.0.0.1:1", "agents"});
  EXPECT_EQ(flag.exit_code, 3);
  EXPECT_NE(flag.err.find("--coordinator"), std::string::npos) << flag.err;
}

TEST_F(CoordinatorProcessTest, UsageHelpAndVersion) {
  EXPECT_EQ(RunProcess({kBinDir + "/parallax"}).exit_code, 2);
  EXPECT_EQ(RunProcess({kBinDir + "/parallax", "status", "abc"}).exit_code, 2);
  EXPECT_EQ(RunProcess({kBinDir + "/parallax", "frobnicate"}).exit_code, 2);
  for (const char* cmd : {"submit", "status", "cancel", "agents", "events"}) {
    RunResult help = RunProcess({kBinDir + "/parallax", cmd, "--help"});
    EXPECT_EQ(help.exit_code, 0) << cmd;
    EXPECT_NE(help.out.find("Usage"), std::string::npos) << cmd << ": " << help.out;
  }
  for (const char* bin : {"parallax", "parallax-coordinator"}) {
    RunResult v = RunProcess({kBinDir + "/" + bin, "--version"});
    EXPECT_EQ(v.exit_code, 0) << bin;
    EXPECT_NE(v.out.find("0.1.0"), std::string::npos) << bin << ": " << v.out;
  }
}

}  // namespace
}  // namespace parallax
