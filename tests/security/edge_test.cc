// The edges a hostile user and a careless operator found, each against the
// real binaries: job files the CLI must not read whole, databases the
// coordinator must not silently replace, a daemon listening beyond this
// machine without a secret, and `parallax status` of a shard never launched.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>

#include "core/rpc/coordinator_client.h"
#include "schemas/coordinator_constants.h"
#include "tests/testing/build_paths.h"
#include "tests/testing/coordinator_process.h"
#include "tests/testing/subprocess.h"
#include "tests/testing/temp_dir.h"

namespace parallax {
namespace {

using testing::RunProcess;
using testing::RunResult;

const std::string kBin = testing::BinDirOr(::parallax::testing::BuildBinDir());

bool Contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

class EdgeTest : public ::testing::Test {
 protected:
  testing::TempDir dir_;
};

TEST_F(EdgeTest, AJobFileOverTheLimitIsRefusedBeforeAnythingIsSent) {
  // 50 MB of a valid TOML comment: the file would pass validation.
  const std::string path = dir_.File("big.toml");
  {
    std::ofstream f(path);
    f << "[job]\nname = \"big\"\nworkers = 1\n[trainer]\ncommand = [\"/bin/true\"]\n";
    const std::string line = "# " + std::string(1000, 'x') + "\n";
    for (int i = 0; i < 50'000; ++i) f << line;
  }
  // No coordinator listens there: the file is refused before a connection.
  RunResult r = RunProcess({kBin + "/parallax", "--coordinator", "127.0.0.1:1", "submit", path},
                           {}, 30'000);
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_TRUE(Contains(r.err, "job file '" + path + "' is over 1 MiB")) << r.err;
  EXPECT_FALSE(Contains(r.err, "unreachable")) << r.err;
}

TEST_F(EdgeTest, AnEndlessJobFileIsReadOnlyToTheLimit) {
  RunResult r = RunProcess(
      {kBin + "/parallax", "--coordinator", "127.0.0.1:1", "submit", "/dev/zero"}, {}, 10'000);
  EXPECT_EQ(r.exit_code, 2) << "signal " << r.signal << ": " << r.err;
  EXPECT_TRUE(Contains(r.err, "is over 1 MiB")) << r.err;
}

TEST_F(EdgeTest, AnEmptyDatabaseFileIsRefusedUnlessANewStateIsAskedFor) {
  const std::string db = dir_.File("state.db");
  std::ofstream(db).flush();
  RunResult r = RunProcess({kBin + "/parallax-coordinator", "--listen", "127.0.0.1:0", "--db", db},
                           {}, 20'000);
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_TRUE(Contains(r.err, "is an empty (0-byte) file")) << r.err;
  EXPECT_TRUE(Contains(r.err, "--new-state")) << r.err;
  EXPECT_EQ(std::filesystem::file_size(db), 0u);

  testing::CoordinatorProcessOptions options;
  options.db = db;
  options.extra_args = {"--new-state"};
  testing::CoordinatorProcess coordinator(kBin, dir_.path(), options);
  ASSERT_TRUE(coordinator.ok()) << coordinator.error();
  int set_aside = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir_.path())) {
    set_aside += Contains(e.path().filename().string(), "state.db.set-aside-");
  }
  EXPECT_EQ(set_aside, 1);
}

TEST_F(EdgeTest, ADaemonListeningBeyondThisMachineWithoutASecretSaysSo) {
  testing::CoordinatorProcessOptions open;
  open.listen_host = "0.0.0.0";
  open.name = "open";
  open.db = dir_.File("open.db");
  {
    testing::CoordinatorProcess coordinator(kBin, dir_.path(), open);
    ASSERT_TRUE(coordinator.ok()) << coordinator.error();
    EXPECT_TRUE(Contains(coordinator.Log(), "serves 0.0.0.0:0, beyond this machine, without a "
                                            "shared secret")) << coordinator.Log();
  }
  const std::string secret = dir_.File("secret");
  std::ofstream(secret) << "edge-secret\n";
  chmod(secret.c_str(), 0600);
  testing::CoordinatorProcessOptions closed = open;
  closed.name = "closed";
  closed.db = dir_.File("closed.db");
  closed.extra_args = {"--secret-file", secret};
  testing::CoordinatorProcess with_secret(kBin, dir_.path(), closed);
  ASSERT_TRUE(with_secret.ok()) << with_secret.error();
  testing::CoordinatorProcessOptions local;
  local.name = "local";
  local.db = dir_.File("local.db");
  testing::CoordinatorProcess on_loopback(kBin, dir_.path(), local);
  ASSERT_TRUE(on_loopback.ok()) << on_loopback.error();
  EXPECT_FALSE(Contains(with_secret.Log(), "without a shared secret")) << with_secret.Log();
  EXPECT_FALSE(Contains(on_loopback.Log(), "without a shared secret")) << on_loopback.Log();
}

TEST_F(EdgeTest, StatusShowsAShardThePlanNeverNeededAsNotLaunched) {
  testing::CoordinatorProcess coordinator(kBin, dir_.path());
  ASSERT_TRUE(coordinator.ok()) << coordinator.error();
  CoordinatorClientOptions options;
  options.address = coordinator.address();
  auto client = CoordinatorClient::Connect(options);
  ASSERT_TRUE(client.ok()) << client.status().ToString();
  CoordinatorClient& c = **client;
  // The test plays the agent and rank 0.
  rpc::AgentInfo agent;
  agent.name = "a";
  agent.address = "127.0.0.1:1";
  agent.slots = 1;
  agent.gpus = 0;
  ASSERT_TRUE(c.RegisterAgent(agent).ok());
  auto job = c.SubmitJob("[job]\nname = \"h\"\nworkers = 1\n[trainer]\nmodel = \"lm\"\n", "");
  ASSERT_TRUE(job.ok()) << job.status().ToString();
  rpc::PollRequest poll;
  poll.agent_name = "a";
  poll.timeout_ms = 5'000;  // a long poll: placement runs in the background
  rpc::PollResponse work;
  ASSERT_TRUE(c.Call([&](rpc::CoordinatorClient& s) { s.PollAssignments(work, c.Header(), poll); })
                  .ok());
  ASSERT_EQ(work.start.size(), 1u);  // rank 0; the shard waits for the plan
  rpc::TaskReport running;
  running.key = work.start[0].key;
  running.state = rpc::TaskState::RUNNING;
  ASSERT_TRUE(
      c.Call([&](rpc::CoordinatorClient& s) { s.ReportTasks(c.Header(), "a", {running}); }).ok());
  ASSERT_TRUE(c.PutPlan(job->id, 1, "{\"version\":1,\"variables\":[],\"ps\":{\"variables\":[]}}")
                  .ok());
  // The orchestrator acts on the plan in its next pass, in the background:
  // status shows it within a deadline.
  RunResult r;
  std::string shard_line;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  do {
    r = RunProcess({kBin + "/parallax", "--coordinator", coordinator.address(), "status",
                    std::to_string(job->id)},
                   {}, 30'000);
    ASSERT_EQ(r.exit_code, 0) << r.err;
    std::istringstream lines(r.out);
    for (std::string line; std::getline(lines, line);) {
      if (line.rfind("ps/0", 0) == 0) shard_line = line;
    }
  } while (!Contains(shard_line, "NOT LAUNCHED") && std::chrono::steady_clock::now() < deadline);
  EXPECT_TRUE(Contains(shard_line, "NOT LAUNCHED")) << r.out;
  EXPECT_FALSE(Contains(shard_line, "EXITED")) << r.out;
}

}  // namespace
}  // namespace parallax
