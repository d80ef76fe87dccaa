// "Hosts" as network namespaces on a bridge (tests/testing/net_hosts.h). The
// coordinator listens on the bridge's address in the root namespace; hosts
// a and b each run an agent (one slot) bound to and advertising their own
// address, so the 2-rank job (with its 2 PS shards) spans both. Ranks pause
// after step 15 (TINY_PAUSE_AT), host b's link is cut (its veth set down),
// the ranks are released into the cut, and the link is restored:
//   Short*  a cut well under the coordinator's agent timeout: the job ends
//           SUCCEEDED in attempt 1, no restart;
//   Long*   a cut past it: the coordinator declares agent b lost and restarts
//           the job within the agent timeout (plus slack); once the link is
//           back the new attempt finishes SUCCEEDED.
// Every namespace, veth and bridge is removed by an RAII guard, also when
// the test fails. Without root or `ip netns` the tests skip with the reason.
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <thread>

#include "tests/fault/fault_cluster.h"
#include "tests/testing/net_hosts.h"
#include "tests/trainer/tiny_model.h"

namespace parallax::testing {
namespace {

using Clock = std::chrono::steady_clock;

class NetCutTest : public ::testing::Test {
 protected:
  static constexpr int kAgentTimeoutMs = 3000;

  void SetUp() override {
    if (geteuid() != 0) GTEST_SKIP() << "needs root for ip netns (euid " << geteuid() << ")";
    if (std::string failed = net_.Create(); !failed.empty()) {
      GTEST_SKIP() << "the sandbox refused `" << failed << "`";
    }
    ASSERT_EQ(cluster_.StartCoordinator(net_.CoordinatorHost(), 0, kAgentTimeoutMs), "");
    cluster_.StartAgent("a", net_.Ns(0), net_.Host(0), 1);
    cluster_.StartAgent("b", net_.Ns(1), net_.Host(1), 1);
    std::filesystem::create_directories(PauseDir());
  }

  std::string PauseDir() const { return dir_.File("pause"); }

  // Submits the job with both ranks pausing after step 15 and waits for
  // them there. Returns its id.
  std::string SubmitAndPause() {
    TinyJob job;
    job.tag = "cut";
    job.env = {{"TINY_PAUSE_AT", "step:15"}, {"TINY_PAUSE_DIR", PauseDir()}};
    const std::string id = cluster_.Submit(job);
    for (int r = 0; r < 2 && !id.empty(); ++r) {
      EXPECT_TRUE(WaitForFile(PauseDir() + "/paused-rank" + std::to_string(r), 60'000))
          << "rank " << r << "\n"
          << cluster_.Logs();
    }
    return id;
  }

  void Release() { std::ofstream(PauseDir() + "/go") << "go\n"; }

  // Both ranks ran on different hosts (their outputs say nothing of it; the
  // coordinator's events do not either), so check the model instead: it is
  // complete, and equals the one of an uninterrupted run in the same cluster.
  void ExpectModelOfCleanRun() {
    TinyJob clean;
    clean.tag = "clean";
    clean.max_restarts = 0;
    const std::string id = cluster_.Submit(clean);
    ASSERT_FALSE(id.empty());
    ASSERT_EQ(cluster_.WaitForEnd(id)["state"], "SUCCEEDED") << cluster_.Logs();
    for (int r = 0; r < 2; ++r) {
      Model a = ReadModel(cluster_.Output("cut", r));
      Model b = ReadModel(cluster_.Output("clean", r));
      ASSERT_EQ(a["emb"].size(), TinyModel::kRows * TinyModel::kDim) << "rank " << r;
      EXPECT_EQ(a["w"], b["w"]) << "rank " << r;
      EXPECT_EQ(a["emb"], b["emb"]) << "rank " << r;
    }
  }

  TempDir dir_;
  NetHosts net_;
  FaultCluster cluster_{dir_};
};

TEST_F(NetCutTest, ShortCutRecoversWithoutRestart) {
  const std::string id = SubmitAndPause();
  ASSERT_FALSE(id.empty());
  ASSERT_TRUE(net_.SetLink(1, false));
  Release();
  // The cut itself lasts a third of the agent timeout: heartbeats and TCP
  // retransmissions ride it out.
  std::this_thread::sleep_for(std::chrono::milliseconds(kAgentTimeoutMs / 3));
  ASSERT_TRUE(net_.SetLink(1, true));
  nlohmann::json end = cluster_.WaitForEnd(id, 90'000);
  ASSERT_EQ(end["state"], "SUCCEEDED") << end.dump() << "\n" << cluster_.Logs();
  EXPECT_EQ(end["attempt"], 1) << end.dump();
  EXPECT_EQ(cluster_.Restarts(id), 0);
  ExpectModelOfCleanRun();
  EXPECT_EQ(CheckDatabase(cluster_.Db()), "");
}

TEST_F(NetCutTest, LongCutRestartsTheJobWithinTheAgentTimeout) {
  const std::string id = SubmitAndPause();
  ASSERT_FALSE(id.empty());
  ASSERT_TRUE(net_.SetLink(1, false));
  const auto cut = Clock::now();
  Release();
  // The restart (or a FAILED job) must come within the agent timeout plus
  // slack for the coordinator's sweep; the ranks' own deadlines are longer.
  const auto deadline = cut + std::chrono::milliseconds(kAgentTimeoutMs + 10'000);
  bool restarted = false;
  std::string state;
  while (Clock::now() < deadline && !restarted && state != "FAILED") {
    restarted = cluster_.Restarts(id) > 0;
    RunResult r = cluster_.Cli({"status", id, "--json"}, 10'000);
    if (r.exit_code == 0) state = nlohmann::json::parse(r.out)["jobs"][0]["state"];
    if (!restarted) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  const double seconds = std::chrono::duration<double>(Clock::now() - cut).count();
  std::cout << "long cut: restart seen after " << seconds << " s (agent timeout " << kAgentTimeoutMs
            << " ms)\n";
  RecordProperty("restart_after_s", std::to_string(seconds));
  ASSERT_TRUE(restarted || state == "FAILED") << cluster_.Logs();
  ASSERT_TRUE(net_.SetLink(1, true));
  nlohmann::json end = cluster_.WaitForEnd(id, 120'000);
  ASSERT_EQ(end["state"], "SUCCEEDED") << end.dump() << "\n" << cluster_.Logs();
  EXPECT_GE(end["attempt"].get<int>(), 2) << end.dump();
  ExpectModelOfCleanRun();
  EXPECT_EQ(CheckDatabase(cluster_.Db()), "");
}

}  // namespace
}  // namespace parallax::testing
