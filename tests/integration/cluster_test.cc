// A cluster on this machine: the real parallax-coordinator, two real
// parallax-agent processes (distinct names and workdirs) and the real CLI,
// running jobs of px_test_task (tests/agent/test_task.cc).
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>

#include "tests/testing/proc_scan.h"
#include "tests/testing/coordinator_process.h"
#include "tests/testing/subprocess.h"
#include "tests/testing/temp_dir.h"
#include "tests/testing/build_paths.h"

namespace parallax {
namespace {

using testing::ChildProcess;
using testing::LastLine;
using testing::PidsWithEnv;
using testing::RunProcess;
using testing::RunResult;
using Clock = std::chrono::steady_clock;

const std::string kBin = ::parallax::testing::BuildBinDir();

class ClusterTest : public ::testing::Test {
 protected:
  void SetUp() override {
    // A marker in every task's environment, to find them in /proc.
    marker_ = "PX_TEST_MARK=" + std::to_string(getpid()) + "-" +
              ::testing::UnitTest::GetInstance()->current_test_info()->name();
    StartCoordinator("127.0.0.1:0");
    ASSERT_FALSE(address_.empty()) << Log("coordinator.log");
    for (const char* name : {"agent-a", "agent-b"}) StartAgent(name);
    // Both agents registered and alive.
    auto deadline = Clock::now() + std::chrono::seconds(20);
    while (Clock::now() < deadline) {
      RunResult r = Cli({"agents", "--json"});
      if (r.exit_code == 0) {
        auto j = nlohmann::json::parse(r.out)["agents"];
        int alive = 0;
        for (const auto& a : j) alive += a["alive"].get<bool>();
        if (alive == 2) return;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    FAIL() << "agents did not register\n" << Log("agent-a.log") << Log("agent-b.log");
  }

  void TearDown() override {
    agents_.clear();
    coordinator_.reset();
    testing::KillAllWithEnv({marker_});
  }

  // Starts parallax-coordinator on `listen` and sets address_ ("" on failure).
  void StartCoordinator(const std::string& listen) {
    testing::CoordinatorProcessOptions options;
    const size_t colon = listen.rfind(':');
    options.listen_host = listen.substr(0, colon);
    options.port = std::stoi(listen.substr(colon + 1));
    options.extra_args = {"--agent-timeout-ms", "2000"};
    coordinator_.reset();
    coordinator_ = std::make_unique<testing::CoordinatorProcess>(kBin, dir_.path(), options);
    address_ = coordinator_->ok() ? coordinator_->address() : "";
  }

  void StartAgent(const std::string& name) {
    agents_[name] = std::make_unique<ChildProcess>(
        std::vector<std::string>{kBin + "/parallax-agent", "--coordinator", address_, "--name", name,
                                 "--workdir", dir_.File(name), "--slots", "2", "--grace-ms", "1000",
                                 "--heartbeat-ms", "200", "--allow-env", "PX_TEST_*"},
        dir_.File(name + ".log"));
  }

  std::string Log(const std::string& name) {
    std::ifstream in(dir_.File(name));
    std::stringstream s;
    s << in.rdbuf();
    return "---- " + name + "\n" + s.str();
  }

  RunResult Cli(std::vector<std::string> args) {
    std::vector<std::string> argv = {kBin + "/parallax", "--coordinator", address_};
    argv.insert(argv.end(), args.begin(), args.end());
    return RunProcess(argv, {}, 30'000);
  }

  std::string WriteJob(int workers, const std::string& behavior, int max_restarts = 0) {
    std::string path = dir_.File("job.toml");
    std::ofstream(path) << "[job]\nname = \"cluster\"\nworkers = " << workers
                        << "\narch = \"allreduce\"\nmax_restarts = " << max_restarts
                        << "\n[trainer]\ncommand = [\"" << kBin << "/px_test_task\"]\n"
                        << "[trainer.env]\nPX_TEST_BEHAVIOR = \"" << behavior << "\"\n"
                        << "PX_TEST_MARK = \"" << marker_.substr(marker_.find('=') + 1) << "\"\n";
    return path;
  }

  std::string Submit(const std::string& path) {
    RunResult r = Cli({"submit", path});
    EXPECT_EQ(r.exit_code, 0) << r.err;
    return LastLine(r.out);
  }

  nlohmann::json Job(const std::string& id) {
    RunResult r = Cli({"status", id, "--json"});
    if (r.exit_code != 0) return {};
    return nlohmann::json::parse(r.out)["jobs"][0];
  }

  // Waits until the job is in `state`; returns the last status seen.
  nlohmann::json WaitFor(const std::string& id, const std::string& state, int seconds = 30) {
    nlohmann::json j;
    auto deadline = Clock::now() + std::chrono::seconds(seconds);
    while (Clock::now() < deadline) {
      j = Job(id);
      if (!j.is_null() && j["state"] == state) return j;
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    ADD_FAILURE() << "job " << id << " did not reach " << state << "; last: " << j.dump() << "\n"
                  << Log("coordinator.log") << Log("agent-a.log") << Log("agent-b.log");
    return j;
  }

  // Waits until no task process of this test is left.
  bool NoTasksLeft(int seconds) {
    auto deadline = Clock::now() + std::chrono::seconds(seconds);
    while (Clock::now() < deadline) {
      if (PidsWithEnv({marker_}).empty()) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    return false;
  }

  testing::TempDir dir_;
  std::string marker_;
  std::string address_;
  std::unique_ptr<testing::CoordinatorProcess> coordinator_;
  std::map<std::string, std::unique_ptr<ChildProcess>> agents_;
};

TEST_F(ClusterTest, FourRanksOnTwoAgentsSucceedAndLogsShowEachRank) {
  std::string id = Submit(WriteJob(4, "exit:0"));
  WaitFor(id, "SUCCEEDED");
  for (int r = 0; r < 4; ++r) {
    RunResult logs = Cli({"logs", id, "--task", "trainer/" + std::to_string(r)});
    EXPECT_EQ(logs.exit_code, 0) << logs.err;
    EXPECT_NE(logs.out.find("PARALLAX_RANK=" + std::to_string(r)), std::string::npos) << logs.out;
    EXPECT_NE(logs.out.find("PARALLAX_WORLD_SIZE=4"), std::string::npos) << logs.out;
    EXPECT_NE(logs.out.find("PARALLAX_LOCAL_WORLD_SIZE=2"), std::string::npos) << logs.out;
  }
  RunResult status = Cli({"status", id});
  EXPECT_NE(status.out.find("agent-a"), std::string::npos) << status.out;
  EXPECT_NE(status.out.find("agent-b"), std::string::npos) << status.out;
  EXPECT_TRUE(NoTasksLeft(5));
}

TEST_F(ClusterTest, CancelLeavesNoProcessBehind) {
  std::string id = Submit(WriteJob(4, "hang"));
  WaitFor(id, "RUNNING");
  auto running = Clock::now() + std::chrono::seconds(10);
  while (PidsWithEnv({marker_}).size() < 4 && Clock::now() < running) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  ASSERT_EQ(PidsWithEnv({marker_}).size(), 4u);
  RunResult cancel = Cli({"cancel", id});
  ASSERT_EQ(cancel.exit_code, 0) << cancel.err;
  EXPECT_TRUE(NoTasksLeft(15)) << PidsWithEnv({marker_}).size() << " task processes left";
}

TEST_F(ClusterTest, SigkillOfOneRankRestartsTheJobWhichThenSucceeds) {
  std::string id = Submit(WriteJob(4, "hang_rank_on_attempt:1:1", /*max_restarts=*/1));
  std::vector<int> pids;
  auto deadline = Clock::now() + std::chrono::seconds(20);
  while (pids.empty() && Clock::now() < deadline) {
    pids = PidsWithEnv({marker_, "PARALLAX_RANK=1", "PARALLAX_ATTEMPT=1"});
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  ASSERT_EQ(pids.size(), 1u);
  ASSERT_EQ(kill(pids[0], SIGKILL), 0);
  nlohmann::json j = WaitFor(id, "SUCCEEDED");
  EXPECT_EQ(j["attempt"], 2);
  RunResult events = Cli({"events", id});
  EXPECT_NE(events.out.find("killed by signal 9 (SIGKILL)"), std::string::npos) << events.out;
  EXPECT_NE(events.out.find("restart 1 of 1"), std::string::npos) << events.out;
  EXPECT_TRUE(NoTasksLeft(10));
}

TEST_F(ClusterTest, SigkillOfAnAgentTakesTheLostAgentPath) {
  std::string id = Submit(WriteJob(4, "hang"));
  WaitFor(id, "RUNNING");
  agents_["agent-b"]->Signal(SIGKILL);
  ASSERT_NE(agents_["agent-b"]->Wait(5'000), -1);
  nlohmann::json j = WaitFor(id, "FAILED", 20);
  std::string reason = j.value("reason", "");
  EXPECT_NE(reason.find("agent \"agent-b\" stopped heartbeating"), std::string::npos) << reason;
  RunResult agents = Cli({"agents", "--json"});
  nlohmann::json listed = nlohmann::json::parse(agents.out)["agents"];
  ASSERT_EQ(listed.size(), 2u) << agents.out;
  for (const auto& a : listed) {
    EXPECT_EQ(a["alive"].get<bool>(), a["name"] == "agent-a") << a.dump();
  }
  // agent-a stops its ranks; agent-b's ranks are orphans of a dead agent,
  // which TearDown removes.
  auto deadline = Clock::now() + std::chrono::seconds(10);
  while (Clock::now() < deadline && PidsWithEnv({marker_}).size() > 2) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  EXPECT_EQ(PidsWithEnv({marker_}).size(), 2u);
}

TEST_F(ClusterTest, CoordinatorRestartKeepsRunningTasksAndStartsNothingTwice) {
  std::string id = Submit(WriteJob(4, "hang"));
  WaitFor(id, "RUNNING");
  auto deadline = Clock::now() + std::chrono::seconds(10);
  while (PidsWithEnv({marker_}).size() < 4 && Clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  std::vector<int> before = PidsWithEnv({marker_});
  ASSERT_EQ(before.size(), 4u);

  // SIGKILL the coordinator and start it again on the same database and port;
  // the agents keep their tasks, register again and report them.
  std::string listen = address_;
  ASSERT_TRUE(coordinator_->Kill());
  StartCoordinator(listen);
  ASSERT_EQ(address_, listen) << Log("coordinator.log");
  auto registered = Clock::now() + std::chrono::seconds(10);
  while (Clock::now() < registered) {
    RunResult r = Cli({"agents", "--json"});
    int alive = 0;
    if (r.exit_code == 0) {
      nlohmann::json agents = nlohmann::json::parse(r.out)["agents"];
      for (const auto& a : agents) alive += a["alive"].get<bool>();
    }
    if (alive == 2) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  // Give the re-registered agents a few polls: nothing may change.
  for (int i = 0; i < 10; ++i) {
    nlohmann::json j = Job(id);
    ASSERT_EQ(j["state"], "RUNNING") << j.dump();
    ASSERT_EQ(j["attempt"], 1) << j.dump();
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  std::vector<int> after = PidsWithEnv({marker_});
  std::sort(before.begin(), before.end());
  std::sort(after.begin(), after.end());
  EXPECT_EQ(after, before) << "tasks were restarted or started twice";
  RunResult cancel = Cli({"cancel", id});
  ASSERT_EQ(cancel.exit_code, 0) << cancel.err;
  EXPECT_TRUE(NoTasksLeft(15));
}

TEST_F(ClusterTest, ACommandThatDoesNotExistFailsWithAClearReason) {
  std::string path = dir_.File("missing.toml");
  std::ofstream(path) << "[job]\nname = \"missing\"\nworkers = 1\narch = \"allreduce\"\n"
                      << "[trainer]\ncommand = [\"/nonexistent/trainer\"]\n";
  std::string id = Submit(path);
  nlohmann::json j = WaitFor(id, "FAILED");
  EXPECT_NE(j.value("reason", "").find("/nonexistent/trainer"), std::string::npos) << j.dump();
}

}  // namespace
}  // namespace parallax

namespace parallax {
namespace {

// `parallax run`: embedded coordinator and agent as children of the CLI.
class RunCommandTest : public ::testing::Test {
 protected:
  std::string WriteJob(const std::string& behavior) {
    std::string path = dir_.File("run.toml");
    std::ofstream(path) << "[job]\nname = \"run\"\nworkers = 2\narch = \"allreduce\"\n"
                        << "[trainer]\ncommand = [\"" << kBin << "/px_test_task\"]\n"
                        << "[trainer.env]\nPX_TEST_BEHAVIOR = \"" << behavior << "\"\n"
                        << "PX_TEST_MARK = \"" << mark_ << "\"\n";
    return path;
  }
  std::vector<std::string> Run(const std::string& job) {
    return {kBin + "/parallax", "run", "--state-dir", dir_.File("state"), job};
  }
  void TearDown() override { testing::KillAllWithEnv({"PX_TEST_MARK=" + mark_}); }

  testing::TempDir dir_;
  std::string mark_ = "run-" + std::to_string(getpid());
};

TEST_F(RunCommandTest, RunsAJobToSuccessAndExitsZero) {
  RunResult r = RunProcess(Run(WriteJob("exit:0")), {}, 60'000);
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("SUCCEEDED"), std::string::npos) << r.out;
  // A second run on the same state directory works too (the agent comes back).
  RunResult again = RunProcess(Run(WriteJob("exit:0")), {}, 60'000);
  EXPECT_EQ(again.exit_code, 0) << again.out << again.err;
}

TEST_F(RunCommandTest, AFailingJobExitsOneWithTheReason) {
  RunResult r = RunProcess(Run(WriteJob("exit:3")), {}, 60'000);
  EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
  EXPECT_NE(r.out.find("exited with code 3"), std::string::npos) << r.out;
}

TEST_F(RunCommandTest, AnInvalidJobFileExitsTwo) {
  std::string bad = dir_.File("bad.toml");
  std::ofstream(bad) << "[job]\nname = \"x\"\nworkers = 0\n";
  RunResult r = RunProcess(Run(bad), {}, 30'000);
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("job.workers"), std::string::npos) << r.err;
}

TEST_F(RunCommandTest, InterruptCancelsTheJobExits130AndLeavesNoTask) {
  ChildProcess run(Run(WriteJob("hang")), dir_.File("run.log"));
  auto deadline = Clock::now() + std::chrono::seconds(20);
  while (PidsWithEnv({"PX_TEST_MARK=" + mark_}).size() < 2 && Clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  ASSERT_EQ(PidsWithEnv({"PX_TEST_MARK=" + mark_}).size(), 2u);
  run.Signal(SIGINT);
  int status = run.Wait(30'000);
  ASSERT_TRUE(WIFEXITED(status)) << status;
  EXPECT_EQ(WEXITSTATUS(status), 130);
  EXPECT_TRUE(PidsWithEnv({"PX_TEST_MARK=" + mark_}).empty());
}

TEST_F(RunCommandTest, SigkillOfRunTakesItsDaemonsAndTasksWithIt) {
  ChildProcess run(Run(WriteJob("hang")), dir_.File("run.log"));
  auto deadline = Clock::now() + std::chrono::seconds(20);
  while (PidsWithEnv({"PX_TEST_MARK=" + mark_}).size() < 2 && Clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  ASSERT_EQ(PidsWithEnv({"PX_TEST_MARK=" + mark_}).size(), 2u);
  run.Signal(SIGKILL);
  run.Wait(5'000);
  // PR_SET_PDEATHSIG stops the daemons; the agent stops its tasks on exit.
  auto gone = Clock::now() + std::chrono::seconds(15);
  while (!PidsWithEnv({"PX_TEST_MARK=" + mark_}).empty() && Clock::now() < gone) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  EXPECT_TRUE(PidsWithEnv({"PX_TEST_MARK=" + mark_}).empty());
}

}  // namespace
}  // namespace parallax
