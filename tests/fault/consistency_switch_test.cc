// Consistency at run time on a real job (coordinator, agent, two
// parallax-ps shards, two trainer_test_rank ranks of the tiny model, 30
// steps): `parallax set JOB consistency=...` while the ranks are held at a
// known step (trainer_test_rank's TINY_HOLD_AT), then the job runs on. Every
// rank and every shard logs the step its behaviour changed at; the test
// reads those lines (`parallax logs`) and the job's events and checks that
// they name the step the coordinator picked. `sync_warmup_steps` likewise.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <regex>
#include <string>

#include "tests/fault/fault_cluster.h"

namespace parallax::testing {
namespace {

class ConsistencySwitchTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_EQ(cluster_.StartCoordinator(), "");
    cluster_.StartAgent("a");
    std::filesystem::create_directories(HoldDir());
  }

  std::string HoldDir() const { return dir_.File("hold"); }

  // Waits until both ranks are held after `step`.
  void WaitHeld(int step) {
    for (int r = 0; r < 2; ++r) {
      ASSERT_TRUE(WaitForFile(HoldDir() + "/held-rank" + std::to_string(r) + "-step" +
                                  std::to_string(step),
                              120'000))
          << "rank " << r << " never reached step " << step << "\n"
          << cluster_.Logs();
    }
  }
  void Release(int step) { std::ofstream(HoldDir() + "/go-step" + std::to_string(step)) << "go\n"; }

  // `parallax set`; the step the coordinator picked.
  int64_t Set(const std::string& id, const std::string& consistency) {
    RunResult r = cluster_.Cli({"set", id, "consistency=" + consistency});
    EXPECT_EQ(r.exit_code, 0) << r.err;
    std::smatch m;
    const std::regex line("consistency " + consistency + " from step ([0-9]+)");
    if (!std::regex_search(r.out, m, line)) {
      ADD_FAILURE() << "no step in: " << r.out;
      return -1;
    }
    return std::stoll(m[1]);
  }

  std::string TaskLog(const std::string& id, const std::string& task) {
    RunResult r = cluster_.Cli({"logs", id, "--task", task});
    EXPECT_EQ(r.exit_code, 0) << r.err;
    return r.out;
  }

  // Every rank logs "rank R: consistency MODE from step S" for the first
  // step it pushed in that mode; every shard "PS shard K: consistency MODE
  // from step S: first push there is of step T" for the first push it
  // applied in that mode (T >= S; a sync step pushes to every partition,
  // so there T == S).
  void ExpectEveryoneSwitchedAt(const std::string& id, const std::string& mode, int64_t step) {
    for (int r = 0; r < 2; ++r) {
      const std::string log = TaskLog(id, "trainer/" + std::to_string(r));
      EXPECT_NE(log.find("rank " + std::to_string(r) + ": consistency " + mode + " from step " +
                         std::to_string(step) + "\n"),
                std::string::npos)
          << "trainer/" << r << ":\n" << log;
    }
    for (int s = 0; s < 2; ++s) {
      const std::string log = TaskLog(id, "ps/" + std::to_string(s));
      std::smatch m;
      const std::regex line("PS shard " + std::to_string(s) + ": consistency " + mode +
                            " from step " + std::to_string(step) +
                            ": first push there is of step ([0-9]+)");
      ASSERT_TRUE(std::regex_search(log, m, line)) << "ps/" << s << ":\n" << log;
      if (mode == "sync") {
        EXPECT_EQ(std::stoll(m[1]), step);
      } else {
        EXPECT_GE(std::stoll(m[1]), step);
      }
      // No other switch to this mode at another step.
      const std::regex any("consistency " + mode + " from step [0-9]+:");
      EXPECT_EQ(std::distance(std::sregex_iterator(log.begin(), log.end(), any),
                              std::sregex_iterator()),
                1)
          << log;
    }
  }

  TempDir dir_;
  FaultCluster cluster_{dir_};
};

TEST_F(ConsistencySwitchTest, SyncToAsyncToSyncSwitchesEveryRankAndShardAtOneStep) {
  TinyJob job;
  job.tag = "switch";
  job.max_restarts = 0;
  job.env = {{"TINY_HOLD_AT", "8,18"}, {"TINY_PAUSE_DIR", HoldDir()}};
  const std::string id = cluster_.Submit(job);
  ASSERT_FALSE(id.empty());

  WaitHeld(8);
  const int64_t to_async = Set(id, "async");
  Release(8);
  WaitHeld(18);
  const int64_t to_sync = Set(id, "sync");
  Release(18);
  nlohmann::json end = cluster_.WaitForEnd(id);
  ASSERT_EQ(end["state"], "SUCCEEDED") << end.dump() << "\n" << cluster_.Logs();
  EXPECT_EQ(end["attempt"], 1);

  std::cout << "switched to async from step " << to_async << " (asked after step 8), to sync from step "
            << to_sync << " (asked after step 18)\n";
  // The ranks were held after steps 8 and 18, so each switch lands after
  // that step and within one lease (8 steps) of it.
  EXPECT_GT(to_async, 8);
  EXPECT_LE(to_async, 8 + 9);
  EXPECT_GT(to_sync, 18);
  EXPECT_LE(to_sync, 18 + 9);
  ExpectEveryoneSwitchedAt(id, "async", to_async);
  ExpectEveryoneSwitchedAt(id, "sync", to_sync);
  const std::vector<std::string> events = cluster_.EventMessages(id);
  for (const auto& [mode, step] : {std::pair{"async", to_async}, std::pair{"sync", to_sync}}) {
    const std::string want = std::string("consistency ") + mode + " from step " + std::to_string(step);
    EXPECT_TRUE(std::any_of(events.begin(), events.end(),
                            [&](const std::string& e) { return e.rfind(want, 0) == 0; }))
        << want;
  }
  // A switch of a job that ended is refused.
  RunResult late = cluster_.Cli({"set", id, "consistency=async"});
  EXPECT_EQ(late.exit_code, 1);
  EXPECT_NE(late.err.find("SUCCEEDED"), std::string::npos) << late.err;
}

// The switches are the job's: an attempt that resumes from a checkpoint
// replays them, so its steps run in the modes they had.
TEST_F(ConsistencySwitchTest, AResumedAttemptKeepsTheSwitchedMode) {
  TinyJob job;
  job.tag = "resumed";
  job.max_restarts = 1;
  job.env = {{"TINY_HOLD_AT", "8"},
             {"TINY_PAUSE_DIR", HoldDir()},
             {"TINY_EXIT_AT_STEP", "25"},
             {"TINY_EXIT_RANK", "1"}};
  const std::string id = cluster_.Submit(job);
  ASSERT_FALSE(id.empty());
  WaitHeld(8);
  const int64_t to_async = Set(id, "async");
  Release(8);
  nlohmann::json end = cluster_.WaitForEnd(id);
  ASSERT_EQ(end["state"], "SUCCEEDED") << end.dump() << "\n" << cluster_.Logs();
  ASSERT_EQ(end["attempt"], 2);  // rank 1 exited after step 25; resumed from step 20
  ASSERT_LT(to_async, 20);
  for (int r = 0; r < 2; ++r) {
    RunResult log = cluster_.Cli({"logs", id, "--task", "trainer/" + std::to_string(r), "--attempt", "2"});
    EXPECT_NE(log.out.find("learned consistency async from step " + std::to_string(to_async) +
                           " before step 20"),
              std::string::npos)
        << log.out;
  }
  for (int s = 0; s < 2; ++s) {
    RunResult log = cluster_.Cli({"logs", id, "--task", "ps/" + std::to_string(s), "--attempt", "2"});
    std::smatch m;
    const std::regex line("consistency async from step " + std::to_string(to_async) +
                          ": first push there is of step ([0-9]+)");
    ASSERT_TRUE(std::regex_search(log.out, m, line)) << log.out;
    EXPECT_GE(std::stoll(m[1]), 20);
    EXPECT_EQ(log.out.find("consistency sync from step"), std::string::npos) << log.out;
  }
}

TEST_F(ConsistencySwitchTest, SyncWarmupStepsThenTheConfiguredMode) {
  TinyJob job;
  job.tag = "warmup";
  job.max_restarts = 0;
  job.job_extra = "consistency = \"async\"\nsync_warmup_steps = 12\n";
  const std::string id = cluster_.Submit(job);
  ASSERT_FALSE(id.empty());
  nlohmann::json end = cluster_.WaitForEnd(id);
  ASSERT_EQ(end["state"], "SUCCEEDED") << end.dump() << "\n" << cluster_.Logs();
  ExpectEveryoneSwitchedAt(id, "async", 12);
}

}  // namespace
}  // namespace parallax::testing
