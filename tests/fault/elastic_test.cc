// Elastic workers (docs/RELIABILITY.md, "Elastic workers"): three "hosts"
// as network namespaces (tests/testing/net_hosts.h), each running an agent
// with one slot; the tiny job asks for 3 workers with min_workers = 2 and a
// replacement wait of 1 s. Every rank of attempt 1 pauses after step 15
// (the checkpoint of step 10 is committed), host c's link is cut and the
// ranks are released into the cut. The coordinator declares agent c lost,
// restarts the job, waits 1 s for a third slot and goes on with 2 workers
// from the checkpoint of step 10 (an "elastic" event says so). That attempt
// pauses after step 15 too; the link comes back, agent c with it, and the
// ranks are released: at the checkpoint of step 20 the job grows back to
// 3 workers (another event; the ranks of attempt 2 wait after step 20 so
// that they cannot finish first) and ends SUCCEEDED, every rank of the
// last attempt having resumed from step 20. Without root or `ip netns` the test
// skips with the reason.
#include <gtest/gtest.h>
#include <sqlite3.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <thread>

#include "tests/fault/fault_cluster.h"
#include "tests/testing/net_hosts.h"

namespace parallax::testing {
namespace {

using Clock = std::chrono::steady_clock;

std::string Joined(const std::vector<std::string>& v) {
  std::string out;
  for (const std::string& s : v) out += s + "\n";
  return out;
}

// Events that start with `prefix`.
int Count(const std::vector<std::string>& events, const std::string& prefix) {
  int n = 0;
  for (const std::string& e : events) n += e.rfind(prefix, 0) == 0;
  return n;
}

class ElasticTest : public ::testing::Test {
 protected:
  static constexpr int kAgentTimeoutMs = 3000;

  ElasticTest() : net_(NetHostsOptions{.hosts = 3}) {}

  void SetUp() override {
    if (geteuid() != 0) GTEST_SKIP() << "needs root for ip netns (euid " << geteuid() << ")";
    if (std::string failed = net_.Create(); !failed.empty()) {
      GTEST_SKIP() << "the sandbox refused `" << failed << "`";
    }
    ASSERT_EQ(cluster_.StartCoordinator(net_.CoordinatorHost(), 0, kAgentTimeoutMs), "");
    for (int h = 0; h < 3; ++h) {
      cluster_.StartAgent(std::string(1, static_cast<char>('a' + h)), net_.Ns(h), net_.Host(h), 1);
    }
    std::filesystem::create_directories(PauseDir());
  }

  std::string PauseDir() const { return dir_.File("pause"); }

  // trainer_test_rank's files for a pause of `attempt` after step 15.
  std::string Paused(int attempt, int rank) const {
    return PauseDir() + "/paused-a" + std::to_string(attempt) + "-step:15-rank" +
           std::to_string(rank);
  }
  // Waits until `ranks` ranks of `attempt` are paused after step 15.
  bool WaitPaused(int attempt, int ranks) {
    for (int r = 0; r < ranks; ++r) {
      if (!WaitForFile(Paused(attempt, r), 60'000)) return false;
    }
    return true;
  }
  void Release(int attempt) {
    std::ofstream(PauseDir() + "/go-a" + std::to_string(attempt) + "-step:15") << "go\n";
  }

  // Waits until the coordinator's own view has agent `name` back: its
  // "is back" event (not about a job, so read from the database; `parallax
  // agents` shows the heartbeat itself, which the view follows at its next
  // sweep).
  bool WaitAgentBack(const std::string& name, int timeout_ms) {
    const std::string like = "agent \"" + name + "\" is back%";
    const auto deadline = Clock::now() + std::chrono::milliseconds(timeout_ms);
    while (Clock::now() < deadline) {
      sqlite3* db = nullptr;
      bool back = false;
      if (sqlite3_open_v2(cluster_.Db().c_str(), &db, SQLITE_OPEN_READONLY, nullptr) == SQLITE_OK) {
        sqlite3_busy_timeout(db, 1000);
        sqlite3_stmt* st = nullptr;
        if (sqlite3_prepare_v2(db, "SELECT COUNT(*) FROM events WHERE message LIKE ?1", -1, &st,
                               nullptr) == SQLITE_OK) {
          sqlite3_bind_text(st, 1, like.c_str(), -1, SQLITE_TRANSIENT);
          back = sqlite3_step(st) == SQLITE_ROW && sqlite3_column_int(st, 0) > 0;
        }
        sqlite3_finalize(st);
      }
      sqlite3_close(db);
      if (back) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    return false;
  }

  TempDir dir_;
  NetHosts net_;
  FaultCluster cluster_{dir_};
};

TEST_F(ElasticTest, LostHostShrinksToMinWorkersAndAReturningHostGrowsIt) {
  TinyJob job;
  job.tag = "elastic";
  job.workers = 3;
  job.max_restarts = 2;
  job.job_extra = "min_workers = 2\nreplace_timeout_s = 1\n";
  // Attempts 1 and 2 pause after step 15; attempt 2 also after step 20 (its
  // checkpoint committed), where the grow stops it: it never finishes.
  job.env = {{"TINY_PAUSE_AT", "step:15,step:20"},
             {"TINY_PAUSE_DIR", PauseDir()},
             {"TINY_PAUSE_ATTEMPTS", "1,2"}};
  const std::string id = cluster_.Submit(job);
  ASSERT_FALSE(id.empty());
  ASSERT_TRUE(WaitPaused(1, 3)) << cluster_.Logs();

  // Host c is cut off: after the agent timeout and the 1 s wait for a
  // replacement, the job goes on at 2 workers from step 10.
  ASSERT_TRUE(net_.SetLink(2, false));
  const auto cut = Clock::now();
  Release(1);
  ASSERT_TRUE(WaitPaused(2, 2)) << Joined(cluster_.EventMessages(id)) << cluster_.Logs();
  const double shrink_s = std::chrono::duration<double>(Clock::now() - cut).count();
  std::cout << "elastic: attempt 2 on 2 workers trained 5 steps " << shrink_s
            << " s after the cut (agent timeout " << kAgentTimeoutMs << " ms, replace wait 1 s)\n";
  std::vector<std::string> events = cluster_.EventMessages(id);
  EXPECT_EQ(Count(events, "elastic: shrinks to 2 of 3 workers (min_workers = 2)"), 1)
      << Joined(events);
  EXPECT_FALSE(std::filesystem::exists(Paused(2, 2)));

  // Host c comes back; at the next checkpoint (step 20) the job grows.
  ASSERT_TRUE(net_.SetLink(2, true));
  ASSERT_TRUE(WaitAgentBack("c", 30'000)) << cluster_.Logs();
  Release(2);
  nlohmann::json end = cluster_.WaitForEnd(id, 90'000);
  events = cluster_.EventMessages(id);
  ASSERT_EQ(end["state"], "SUCCEEDED") << end.dump() << "\n" << Joined(events) << cluster_.Logs();
  EXPECT_EQ(end["attempt"], 3) << end.dump();
  EXPECT_EQ(Count(events, "elastic: grows from 2 to 3 of 3 workers"), 1) << Joined(events);
  EXPECT_EQ(Count(events, "RUNNING -> PENDING: elastic: grows from 2 to 3"), 1) << Joined(events);
  EXPECT_EQ(cluster_.Restarts(id), 1) << "only the lost host counts as a restart\n"
                                      << Joined(events);
  for (int r = 0; r < 3; ++r) {
    Model m = ReadModel(cluster_.Output("elastic", r));
    EXPECT_EQ(m["resumed"], std::vector<float>{20}) << "rank " << r;
  }
  EXPECT_EQ(CheckDatabase(cluster_.Db()), "");
}

}  // namespace
}  // namespace parallax::testing
