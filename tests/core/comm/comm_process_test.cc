// Ranks as real processes (comm_test_rank), bootstrapped through a real
// coordinator key-value store served in this test process on an ephemeral
// port.
#include <gtest/gtest.h>

#include <filesystem>
#include <future>

#include "coordinator/service/server.h"
#include "coordinator/service/service.h"
#include "coordinator/store/sqlite_state_store.h"
#include "core/base/clock.h"
#include "core/comm/coordinator_store.h"
#include "core/comm/gradient_fusion.h"
#include "schemas/kv_keys.h"
#include "tests/core/comm/rank_threads.h"
#include "tests/testing/build_paths.h"
#include "tests/testing/subprocess.h"
#include "tests/testing/temp_dir.h"

namespace parallax::comm {
namespace {

using std::chrono::milliseconds;

std::string RankBinary() { return std::string(::parallax::testing::BuildBinDir()) + "/comm_test_rank"; }

class CommProcessTest : public ::testing::Test {
 protected:
  void SetUp() override {
    coordinator::SqliteStateStoreOptions options;
    options.path = dir_.File("state.db");
    auto store = coordinator::OpenSqliteStateStore(options);
    ASSERT_TRUE(store.ok()) << store.status().ToString();
    state_ = std::move(store).value();
    service_ = std::make_shared<coordinator::CoordinatorService>(state_.get(), RealClock(),
                                                                 coordinator::ServiceOptions{});
    ASSERT_TRUE(service_->Init().ok());
    auto server = coordinator::StartServer(coordinator::ServerOptions{}, service_);
    ASSERT_TRUE(server.ok()) << server.status().ToString();
    server_ = std::move(server).value();
  }

  void TearDown() override {
    if (service_) service_->Stop();
    if (server_) server_->Stop();
  }

  std::string Address() const { return "127.0.0.1:" + std::to_string(server_->port()); }

  // Starts `ranks` of a world of `world` in parallel and waits for them.
  std::vector<parallax::testing::RunResult> RunRanks(int world, const std::vector<int>& ranks,
                                                     const std::string& prefix,
                                                     const std::vector<std::string>& extra = {},
                                                     const std::vector<std::string>& all = {}) {
    std::vector<std::future<parallax::testing::RunResult>> futures;
    for (int r : ranks) {
      std::vector<std::string> argv = {
          RankBinary(), "--coordinator",       Address(),  "--rank", std::to_string(r),
          "--world",    std::to_string(world), "--prefix", prefix};
      argv.insert(argv.end(), all.begin(), all.end());
      if (r == ranks.back()) argv.insert(argv.end(), extra.begin(), extra.end());
      futures.push_back(std::async(
          std::launch::async, [argv] { return parallax::testing::RunProcess(argv, {}, 60'000); }));
    }
    std::vector<parallax::testing::RunResult> results;
    for (auto& f : futures) results.push_back(f.get());
    return results;
  }

  parallax::testing::TempDir dir_;
  std::unique_ptr<coordinator::StateStore> state_;
  std::shared_ptr<coordinator::CoordinatorService> service_;
  std::unique_ptr<coordinator::Server> server_;
};

TEST_F(CommProcessTest, ThreeProcessesAllReduceAndFuseThroughTheCoordinator) {
  for (bool shm : {true, false}) {
    auto results =
        RunRanks(3, {0, 1, 2}, kv_keys::CommPrefix(1, shm ? 1 : 2), {},
                 shm ? std::vector<std::string>{} : std::vector<std::string>{"--no-shm"});
    for (size_t r = 0; r < results.size(); ++r) {
      EXPECT_EQ(results[r].exit_code, 0)
          << "shm=" << shm << " rank " << r << " stderr: " << results[r].err;
    }
  }
}

TEST_F(CommProcessTest, MissingProcessTimesOutWithTheDocumentedError) {
  // A world of 3 in which rank 2 never starts.
  auto start = std::chrono::steady_clock::now();
  auto results = RunRanks(3, {0, 1}, kv_keys::CommPrefix(2, 1), {}, {"--timeout-ms", "1500"});
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(20));
  for (size_t r = 0; r < results.size(); ++r) {
    EXPECT_EQ(results[r].exit_code, 3) << results[r].err;
    EXPECT_NE(results[r].err.find("DEADLINE_EXCEEDED: rank " + std::to_string(r) +
                                  " of 3 (gloo): rendezvous under \"job/2/1/comm\" within "
                                  "1500 ms failed: no address from rank 2"),
              std::string::npos)
        << results[r].err;
  }
}

TEST_F(CommProcessTest, ProcessThatDiesMidJobFailsItsPeerPromptlyOverTcp) {
  auto start = std::chrono::steady_clock::now();
  auto results = RunRanks(2, {0, 1}, kv_keys::CommPrefix(4, 1), {"--die-after-barrier"}, {"--no-shm"});
  EXPECT_EQ(results[1].exit_code, 9);
  EXPECT_EQ(results[0].exit_code, 3);
  EXPECT_NE(results[0].err.find("UNAVAILABLE: rank 0 of 2 (gloo): AllReduce"), std::string::npos)
      << results[0].err;
  // Well before the 20 s collective deadline.
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(15));
}

// The same through shared memory: the survivor sees the dead rank's process
// end (not a socket), names it, and the segment is gone from the directory.
TEST_F(CommProcessTest, ProcessThatDiesInASharedMemoryAllReduceIsNamedAndLeavesNothing) {
  parallax::testing::TempDir shm("/dev/shm");
  auto start = std::chrono::steady_clock::now();
  auto results =
      RunRanks(2, {0, 1}, kv_keys::CommPrefix(6, 1), {"--die-after-barrier"}, {"--shm-dir", shm.path()});
  EXPECT_EQ(results[1].exit_code, 9);
  EXPECT_EQ(results[0].exit_code, 3);
  EXPECT_NE(results[0].err.find("UNAVAILABLE: rank 0 of 2 (gloo): AllReduce of 1 float32 through "
                                "shared memory: rank 1 (pid "),
            std::string::npos)
      << results[0].err;
  EXPECT_NE(results[0].err.find(") exited in the middle of it"), std::string::npos)
      << results[0].err;
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(15));
  EXPECT_TRUE(std::filesystem::is_empty(shm.path()));
}

TEST_F(CommProcessTest, ThreadRanksRendezvousThroughTheCoordinatorStore) {
  CoordinatorClientOptions client;
  client.address = Address();
  auto store = ConnectCoordinatorRendezvousStore(client);
  ASSERT_TRUE(store.ok()) << store.status().ToString();
  auto comms = testing::CreateGlooWorld(4, store.value().get(), kv_keys::CommPrefix(5, 2));
  ASSERT_EQ(comms.size(), 4u);
  testing::RunRanks(4, [&](int r) {
    std::vector<float> data(777, float(r));
    EXPECT_TRUE(
        comms[r]->AllReduce(data, ReduceOp::kSum, DeadlineAfter(milliseconds(20'000))).ok());
    EXPECT_EQ(data[776], 6.0f);
  });
  auto missing = store.value()->Get({"job/5/2/comm/never"}, DeadlineAfter(milliseconds(300)));
  EXPECT_EQ(missing.status().code(), StatusCode::kDeadlineExceeded) << missing.status().ToString();
}

}  // namespace
}  // namespace parallax::comm
