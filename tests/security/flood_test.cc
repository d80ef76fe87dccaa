// Connection floods and unauthenticated memory against the real daemons
// (core/rpc/thrift_server.h): the coordinator and an agent's log service run
// under a small open-file limit, so that a flood several times that limit is
// cheap, while an honest client with the secret is timed, during the flood
// and after it. Each test prints the figures it saw (docs/RELIABILITY.md,
// "Connection floods").
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <functional>
#include <iostream>
#include <memory>
#include <thread>

#include "core/plan/job_plan.h"
#include "core/ps/client.h"
#include "core/ps/plan.h"
#include "core/rpc/agent_client.h"
#include "core/rpc/coordinator_client.h"
#include "tests/security/flood.h"
#include "tests/testing/build_paths.h"
#include "tests/testing/coordinator_process.h"
#include "tests/testing/subprocess.h"
#include "tests/testing/temp_dir.h"

namespace parallax {
namespace {

using testing::ConnectionFlood;
using testing::ProbeLog;
using Clock = std::chrono::steady_clock;

const std::string kBin = testing::BinDirOr(::parallax::testing::BuildBinDir());
constexpr char kSecret[] = "flood-test-secret-0123456789";
// The daemons' open-file limit in these tests, and the flood: six times it.
constexpr int kFileLimit = 128;
constexpr int kFlood = 6 * kFileLimit;
constexpr double kAnswerMs = 1'000;

bool Contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

// `connect()` until it answers, or fails otherwise than UNAVAILABLE, or
// kAnswerMs have passed. At the open-file limit a server sheds a new
// connection unanswered (EMFILE, while evicted connections are still being
// released); a client connects again, as agents and `parallax logs
// --follow` do. The whole exchange, retries included, must still be
// answered within kAnswerMs.
template <typename Connect>
auto ConnectAgainWhenShed(const Connect& connect) {
  const auto give_up = Clock::now() + std::chrono::milliseconds(static_cast<int>(kAnswerMs));
  auto client = connect();
  while (!client.ok() && client.status().code() == StatusCode::kUnavailable &&
         Clock::now() < give_up) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    client = connect();
  }
  return client;
}

// Whether a flood is still on: its connections are still being opened, or
// the server (whose log `log` returns) has not yet said it reached its cap
// (then the flood is held, for 30 s at most).
std::function<bool()> FloodOn(const ConnectionFlood& flood, std::function<std::string()> log) {
  const auto deadline = Clock::now() + std::chrono::seconds(30);
  return [&flood, log, deadline] {
    if (!flood.done()) return true;
    return !Contains(log(), "connections are open (the limit, --max-connections)") &&
           Clock::now() < deadline;
  };
}

class FloodTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { testing::RaiseOwnFileLimit(); }

  void SetUp() override {
    secret_file_ = dir_.File("secret");
    std::ofstream(secret_file_) << kSecret << "\n";
    chmod(secret_file_.c_str(), 0600);
  }

  void StartCoordinator(int file_limit, std::vector<std::string> extra = {}) {
    testing::CoordinatorProcessOptions options;
    options.open_file_limit = file_limit;
    extra.insert(extra.end(), {"--secret-file", secret_file_});
    options.extra_args = extra;
    coordinator_ = std::make_unique<testing::CoordinatorProcess>(kBin, dir_.path(), options);
    ASSERT_TRUE(coordinator_->ok()) << coordinator_->error();
  }

  CoordinatorClientOptions ClientOptions() const {
    CoordinatorClientOptions o;
    o.address = coordinator_->address();
    o.auth_token = kSecret;
    o.connect_timeout_ms = 2'000;
    o.rpc_timeout_ms = 5'000;
    // A connection the server closes to make room is retried, as every
    // Parallax client does (core/rpc/coordinator_client.h), but only within
    // the second the answer must come in: a starved server still fails the
    // probe, a refusal and its retry count in the time measured.
    o.retry_deadline_ms = static_cast<int>(kAnswerMs);
    o.retry_initial_backoff_ms = 20;
    o.retry_max_backoff_ms = 200;
    return o;
  }

  // An honest client's whole exchange: connect, Hello, list the jobs; and a
  // call on a connection opened before the flood. "" when both answered.
  std::string ProbeCoordinator(CoordinatorClient* existing) {
    auto fresh = ConnectAgainWhenShed([&] { return CoordinatorClient::Connect(ClientOptions()); });
    if (!fresh.ok()) return "new client: " + fresh.status().ToString();
    if (auto jobs = (*fresh)->ListJobs(); !jobs.ok()) return "new client: " + jobs.status().ToString();
    if (auto jobs = existing->ListJobs(); !jobs.ok()) return "old client: " + jobs.status().ToString();
    return "";
  }

  // Floods the coordinator with `kind` connections and checks that an honest
  // client is answered within a second during the flood (until every flood
  // connection is open and the server has been at its cap) and after it.
  void FloodCoordinator(ConnectionFlood::Kind kind, const std::string& what) {
    auto existing = CoordinatorClient::Connect(ClientOptions());
    ASSERT_TRUE(existing.ok()) << existing.status().ToString();
    auto flood = std::make_unique<ConnectionFlood>(coordinator_->port(), kind, kFlood, 1'500);
    ProbeLog during = testing::ProbeWhile(
        FloodOn(*flood, [&] { return coordinator_->Log(); }),
        [&] { return ProbeCoordinator(existing->get()); }, 100, 5);
    const int opened = flood->opened();
    flood->Close();
    ProbeLog after = testing::ProbeWhile([] { return false; },
                                         [&] { return ProbeCoordinator(existing->get()); }, 50, 5);
    std::cout << "[figures] coordinator, " << what << " flood: " << opened
              << " connections (open-file limit " << kFileLimit << "); honest client max "
              << during.max_ms << " ms during (" << during.probes << " probes), "
              << after.max_ms << " ms after (" << after.probes << " probes)" << std::endl;
    EXPECT_GE(opened, 4 * kFileLimit);
    EXPECT_TRUE(during.failures.empty()) << during.failures.front() << "\n" << coordinator_->Log();
    EXPECT_TRUE(after.failures.empty()) << after.failures.front() << "\n" << coordinator_->Log();
    EXPECT_LT(during.max_ms, kAnswerMs);
    EXPECT_LT(after.max_ms, kAnswerMs);
  }

  testing::TempDir dir_;
  std::string secret_file_;
  std::unique_ptr<testing::CoordinatorProcess> coordinator_;
};

TEST_F(FloodTest, IdleConnectionsSeveralTimesTheFileLimitDoNotStopTheCoordinator) {
  StartCoordinator(kFileLimit);
  FloodCoordinator(ConnectionFlood::Kind::kIdle, "idle");
}

TEST_F(FloodTest, SlowRequestsSeveralTimesTheFileLimitDoNotStopTheCoordinator) {
  StartCoordinator(kFileLimit);
  FloodCoordinator(ConnectionFlood::Kind::kSlow, "slow");
}

TEST_F(FloodTest, RunningOutOfFileDescriptorsDoesNotEndTheAcceptLoop) {
  // A cap above the open-file limit: the flood takes every descriptor, so
  // accept() fails with EMFILE. Once the flood is gone the server answers.
  StartCoordinator(64, {"--max-connections", "1000"});
  auto flood = std::make_unique<ConnectionFlood>(coordinator_->port(),
                                                 ConnectionFlood::Kind::kIdle, 400, 4'000);
  // Held until the server has run out (30 s at most).
  const auto deadline = Clock::now() + std::chrono::seconds(30);
  while ((!flood->done() || !Contains(coordinator_->Log(), "out of file descriptors")) &&
         Clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  flood->Close();
  auto existing = CoordinatorClient::Connect(ClientOptions());
  ASSERT_TRUE(existing.ok()) << existing.status().ToString() << "\n" << coordinator_->Log();
  ProbeLog after = testing::ProbeWhile([] { return false; },
                                       [&] { return ProbeCoordinator(existing->get()); }, 50, 5);
  std::cout << "[figures] coordinator out of descriptors: honest client max " << after.max_ms
            << " ms after the flood" << std::endl;
  EXPECT_TRUE(after.failures.empty()) << after.failures.front();
  EXPECT_LT(after.max_ms, kAnswerMs);
  EXPECT_TRUE(Contains(coordinator_->Log(), "out of file descriptors")) << coordinator_->Log();
}

TEST_F(FloodTest, TheAgentLogServiceAnswersThroughIdleAndSlowFloods) {
  StartCoordinator(0);
  const std::string port_file = dir_.File("agent.port");
  testing::ChildProcess agent(
      testing::WithOpenFileLimit(
          kFileLimit, {kBin + "/parallax-agent", "--coordinator", coordinator_->address(),
                       "--name", "a", "--workdir", dir_.File("agent"), "--secret-file",
                       secret_file_, "--port-file", port_file}),
      dir_.File("agent.log"));
  const std::string port = testing::WaitForFileWord(port_file, 20'000, &agent);
  ASSERT_FALSE(port.empty()) << testing::ReadWholeFile(dir_.File("agent.log"));
  const std::string address = "127.0.0.1:" + port;
  auto probe = [&]() -> std::string {
    auto client =
        ConnectAgainWhenShed([&] { return AgentClient::Connect(address, kSecret, 2'000); });
    if (!client.ok()) return client.status().ToString();
    rpc::TaskKey key;
    key.job_id = 1;
    key.attempt = 1;
    key.role = rpc::TaskRole::TRAINER;
    key.index = 0;
    StatusOr<rpc::LogChunk> chunk = (*client)->ReadLog(key, 0, 100);
    // No such task: an answer all the same.
    return chunk.status().code() == StatusCode::kNotFound ? "" : chunk.status().ToString();
  };
  for (auto kind : {ConnectionFlood::Kind::kIdle, ConnectionFlood::Kind::kSlow}) {
    auto flood = std::make_unique<ConnectionFlood>(std::stoi(port), kind, kFlood, 1'500);
    // The agent's log is shared by both floods: the first one's line is
    // enough for the second, which then runs as long as it takes to open.
    ProbeLog during = testing::ProbeWhile(
        FloodOn(*flood, [&] { return testing::ReadWholeFile(dir_.File("agent.log")); }), probe,
        100, 5);
    flood->Close();
    ProbeLog after = testing::ProbeWhile([] { return false; }, probe, 50, 5);
    std::cout << "[figures] agent log service, "
              << (kind == ConnectionFlood::Kind::kIdle ? "idle" : "slow") << " flood of "
              << kFlood << ": honest client max " << during.max_ms << " ms during, "
              << after.max_ms << " ms after" << std::endl;
    EXPECT_TRUE(during.failures.empty()) << during.failures.front();
    EXPECT_TRUE(after.failures.empty()) << after.failures.front();
    EXPECT_LT(during.max_ms, kAnswerMs);
    EXPECT_LT(after.max_ms, kAnswerMs);
  }
}

TEST_F(FloodTest, APsShardAnswersThroughIdleFloods) {
  ps::PsPlan plan;
  plan.consistency = Consistency::kAsync;
  plan.num_workers = 1;
  plan.num_shards = 1;
  ps::VariableSpec v;
  v.id = 0;
  v.name = "emb";
  v.rows = 100;
  v.dim = 4;
  v.partitions = 1;
  v.partition_shards = {0};
  plan.variables.push_back(v);
  const std::string plan_file = dir_.File("plan.json");
  std::ofstream(plan_file) << plan::JobPlanToJson(plan::JobPlanOfPs(plan));
  testing::ChildProcess shard(
      testing::WithOpenFileLimit(kFileLimit, {kBin + "/parallax-ps", "--plan", plan_file,
                                              "--listen", "tcp://127.0.0.1:0", "--port-file",
                                              dir_.File("shard.endpoint"), "--prefault-mb", "0"}),
      dir_.File("shard.log"));
  const std::string endpoint = testing::WaitForFileWord(dir_.File("shard.endpoint"), 20'000, &shard);
  ASSERT_FALSE(endpoint.empty()) << testing::ReadWholeFile(dir_.File("shard.log"));
  // A worker connected before the flood, and a new one for every probe.
  ps::PsClientOptions options;
  options.plan = plan;
  options.shard_endpoints = {endpoint};
  auto existing = ps::PsClient::Create(options);
  ASSERT_TRUE(existing.ok()) << existing.status().ToString();
  auto stats = [](ps::PsClient& client) -> std::string {
    std::vector<std::string> out;
    StatusOr<ps::Ticket> ticket = client.Stats(&out);
    if (!ticket.ok()) return ticket.status().ToString();
    Status s = client.Wait(*ticket, ps::DeadlineIn(2'000));
    return s.ok() ? "" : s.ToString();
  };
  ASSERT_EQ(stats(**existing), "");
  auto probe = [&]() -> std::string {
    auto fresh = ps::PsClient::Create(options);
    if (!fresh.ok()) return fresh.status().ToString();
    std::string failure = stats(**fresh);
    if (!failure.empty()) return "new worker: " + failure;
    failure = stats(**existing);
    return failure.empty() ? "" : "old worker: " + failure;
  };
  const int port = std::stoi(endpoint.substr(endpoint.rfind(':') + 1));
  auto flood = std::make_unique<ConnectionFlood>(port, ConnectionFlood::Kind::kIdle, kFlood, 1'500);
  ProbeLog during = testing::ProbeWhile(
      FloodOn(*flood, [&] { return testing::ReadWholeFile(dir_.File("shard.log")); }), probe, 100,
      5);
  flood->Close();
  ProbeLog after = testing::ProbeWhile([] { return false; }, probe, 50, 5);
  std::cout << "[figures] PS shard, idle flood of " << kFlood << " (open-file limit "
            << kFileLimit << "): worker max " << during.max_ms << " ms during, " << after.max_ms
            << " ms after" << std::endl;
  EXPECT_TRUE(during.failures.empty()) << during.failures.front();
  EXPECT_TRUE(after.failures.empty()) << after.failures.front();
  EXPECT_LT(during.max_ms, kAnswerMs);
  EXPECT_LT(after.max_ms, kAnswerMs);
}

TEST_F(FloodTest, UnauthenticatedRequestsCannotMakeTheCoordinatorHoldMemory) {
  StartCoordinator(0);
  auto client = CoordinatorClient::Connect(ClientOptions());
  ASSERT_TRUE(client.ok()) << client.status().ToString();
  ASSERT_TRUE((*client)->ListJobs().ok());
  const int pid = coordinator_->process()->pid();
  const int64_t base = testing::ResidentBytes(pid);
  constexpr uint32_t kAnnounced = 24 << 20;  // --max-request-bytes, the default

  // 40 connections hold a request that announces 24 MiB and sends 60 KiB of
  // it: under the bytes read before the secret is checked, so each holds its
  // slot.
  auto held = std::make_unique<ConnectionFlood>(coordinator_->port(),
                                                ConnectionFlood::Kind::kUnauthenticatedBody, 40,
                                                1'000, kAnnounced, 60 << 10);
  while (!held->done()) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  ASSERT_TRUE((*client)->ListJobs().ok());  // the server has read what they sent by now
  const int64_t holding = testing::ResidentBytes(pid) - base;
  // 20 more send 24 MiB less one byte each, the attack that grew the
  // coordinator by 460 MB when it allocated frames before checking secrets.
  auto filled = std::make_unique<ConnectionFlood>(coordinator_->port(),
                                                  ConnectionFlood::Kind::kUnauthenticatedBody, 20,
                                                  1'000, kAnnounced, kAnnounced - 1);
  while (!filled->done()) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  const int64_t peak = testing::ResidentBytes(pid) - base;
  held->Close();
  filled->Close();
  // Once they are gone, memory goes back (checked until it does, 10 s at most).
  int64_t left = 0;
  const auto deadline = Clock::now() + std::chrono::seconds(10);
  do {
    ASSERT_TRUE((*client)->ListJobs().ok());
    left = testing::ResidentBytes(pid) - base;
    if (left <= (50 << 20)) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  } while (Clock::now() < deadline);
  std::cout << "[figures] unauthenticated memory: base " << (base >> 20) << " MiB; 40 held "
            << "requests +" << holding / 40 / 1024 << " KiB each; with 20 filled ones +"
            << (peak >> 20) << " MiB in all; after they left +" << (left >> 20) << " MiB"
            << std::endl;
  EXPECT_LE(holding / 40, 1 << 20);
  EXPECT_LE(peak, 60 * (1 << 20));  // 60 connection slots, at most 1 MiB each
  EXPECT_LE(left, 50 << 20);
}

}  // namespace
}  // namespace parallax
