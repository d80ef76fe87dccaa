// The kill matrix. A real coordinator, one agent, two
// parallax-ps shards and two trainer_test_rank processes run the tiny model
// (30 steps, sync, checkpoints every 10). trainer_test_rank's TINY_PAUSE_AT
// hook stops the ranks of attempt 1 at a named moment and writes a marker
// with its pid, so the test SIGKILLs one process exactly then (no timing
// guesses), releases the survivors, and checks that
//   - the job ends SUCCEEDED,
//   - a restart is in its events (none for a coordinator kill: it comes back
//     on the same --db and port and the job goes on in attempt 1; none for an
//     agent kill: the restarted agent adopts the running tasks),
//   - the resumed attempt started from the newest complete checkpoint, never
//     from the one the kill interrupted,
//   - the final model equals an uninterrupted run's bit for bit,
//   - the coordinator's database is consistent.
// Ci/* (one case per process type) is labelled `fault`, Matrix/* `slow`.
#include <gtest/gtest.h>
#include <signal.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <map>
#include <filesystem>
#include <fstream>
#include <set>
#include <string>
#include <thread>

#include <nlohmann/json.hpp>

#include "tests/fault/fault_cluster.h"
#include "tests/testing/proc_scan.h"
#include "tests/trainer/tiny_model.h"
#include "tests/trainer/tiny_trainer.h"

namespace parallax::testing {
namespace {

// The data of a NumPy file (format 1.0: magic, version, a little-endian
// header length, the header, then the array).
template <typename T>
std::vector<T> NpyData(const std::string& path) {
  const std::string bytes = ReadWholeFile(path);
  if (bytes.size() < 10) return {};
  const size_t header = static_cast<unsigned char>(bytes[8]) |
                        (static_cast<size_t>(static_cast<unsigned char>(bytes[9])) << 8);
  const size_t at = 10 + header;
  std::vector<T> out((bytes.size() - at) / sizeof(T));
  std::memcpy(out.data(), bytes.data() + at, out.size() * sizeof(T));
  return out;
}

enum class Victim { kRank1, kShard0, kAgent, kCoordinator };

struct KillCase {
  const char* name;
  Victim victim;
  const char* moment;  // TINY_PAUSE_AT: start, step:N, ckpt:N
  int pause_rank;      // -1: every rank pauses
  int resumed;         // expected "resumed" step of the final attempt; -1: none
  // emb a dynamic table over the whole 64-bit range (TINY_DYNAMIC=spread)
  // under a budget smaller than the ids the job sees, with admission after
  // 2 contributions and LFU eviction: what its checkpoint holds (rows, the
  // eviction order, the sketch, the generator) decides the resumed run.
  bool dynamic = false;
};

std::ostream& operator<<(std::ostream& os, const KillCase& c) {
  return os << c.name << " (moment " << c.moment << ")";
}

class KillTest : public ::testing::TestWithParam<KillCase> {
 protected:
  void SetUp() override {
    ASSERT_EQ(cluster_.StartCoordinator(), "");
    cluster_.StartAgent("a");
  }

  std::string PauseDir() const { return dir_.File("pause"); }

  // Kills the victim of `c` while the job `id` is paused; then lets the
  // paused survivors go on.
  void KillAndRelease(const KillCase& c, const std::string& id) {
    const std::string marker1 = PauseDir() + "/paused-rank1";
    switch (c.victim) {
      case Victim::kRank1: {
        const int pid = std::stoi(ReadWholeFile(marker1));
        ASSERT_GT(pid, 1);
        ASSERT_EQ(kill(pid, SIGKILL), 0);
        break;
      }
      case Victim::kShard0: {
        // A hybrid job's shards start once rank 0 has stored the plan (the
        // coordinator launches no idle shard), so the shard may still be on
        // its way when the ranks pause in Start(): wait for its process.
        const std::vector<std::string> env = {"PARALLAX_JOB_ID=" + id, "PARALLAX_ROLE=ps",
                                              "PARALLAX_SHARD=0", "PARALLAX_ATTEMPT=1",
                                              cluster_.Marker()};
        std::vector<int> pids = PidsWithEnv(env);
        const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
        while (pids.empty() && std::chrono::steady_clock::now() < deadline) {
          std::this_thread::sleep_for(std::chrono::milliseconds(10));
          pids = PidsWithEnv(env);
        }
        ASSERT_EQ(pids.size(), 1u) << cluster_.Logs();
        ASSERT_EQ(kill(pids[0], SIGKILL), 0);
        break;
      }
      case Victim::kAgent:
        cluster_.KillAgent("a");
        cluster_.StartAgent("a");
        break;
      case Victim::kCoordinator:
        cluster_.KillCoordinator();
        ASSERT_EQ(cluster_.StartCoordinator("127.0.0.1", cluster_.port()), "");
        break;
    }
    std::ofstream(PauseDir() + "/go") << "go\n";
  }

  TempDir dir_;
  FaultCluster cluster_{dir_};
};

TEST_P(KillTest, JobSucceedsWithTheUninterruptedModel) {
  const KillCase& c = GetParam();
  std::cout << "kill case " << c.name << ": victim " << static_cast<int>(c.victim) << ", moment "
            << c.moment << ", pause rank " << c.pause_rank << " (deterministic: no random seed)\n";
  std::filesystem::create_directories(PauseDir());
  auto dynamic = [&](TinyJob* job) {
    if (!c.dynamic) return;
    job->env["TINY_DYNAMIC"] = "spread";
    job->variable_extra = "max_rows = 90\nadmit_after = 2\neviction = \"lfu\"\n";
  };
  TinyJob faulty;
  faulty.tag = "faulty";
  faulty.env = {{"TINY_PAUSE_AT", c.moment}, {"TINY_PAUSE_DIR", PauseDir()}};
  dynamic(&faulty);
  if (c.pause_rank >= 0) faulty.env["TINY_PAUSE_RANK"] = std::to_string(c.pause_rank);
  const std::string id = cluster_.Submit(faulty);
  ASSERT_FALSE(id.empty());

  // Every paused rank is at the moment.
  for (int r = 0; r < 2; ++r) {
    if (c.pause_rank >= 0 && r != c.pause_rank) continue;
    ASSERT_TRUE(WaitForFile(PauseDir() + "/paused-rank" + std::to_string(r), 60'000))
        << "rank " << r << " never reached " << c.moment << "\n"
        << cluster_.Logs();
  }
  const std::string moment = c.moment;
  const std::string step_dir = cluster_.CheckpointRoot() + "/job-" + id + "/step-20";
  if (moment == "ckpt:20") {
    // Mid-write: the checkpoint of step 20 is not complete, so it is not
    // committed and cannot be exported.
    EXPECT_FALSE(std::filesystem::exists(step_dir + "/MANIFEST.json"));
    RunResult e = cluster_.Cli({"export", id, "--checkpoint", "20", "--out", dir_.File("x20")});
    EXPECT_NE(e.exit_code, 0) << e.out;
  }
  if (c.dynamic && moment == "step:15") {
    // While the ranks wait, `parallax status` shows the table's counters
    // (the shards report every few seconds).
    nlohmann::json table;
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    // (A shard's first report may predate its first row: wait for one with rows.)
    while ((table.is_null() || table["rows"].get<int64_t>() == 0) &&
           std::chrono::steady_clock::now() < deadline) {
      RunResult st = cluster_.Cli({"status", id, "--json"});
      const nlohmann::json j = nlohmann::json::parse(st.out, nullptr, false);
      if (!j.is_discarded() && j.contains("jobs") && j["jobs"][0].contains("dynamic_tables"))
        table = j["jobs"][0]["dynamic_tables"]["emb"];
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
    }
    ASSERT_FALSE(table.is_null()) << "no dynamic table in `parallax status`\n" << cluster_.Logs();
    std::cout << "parallax status: emb " << table.dump() << "\n";
    EXPECT_GT(table["rows"].get<int64_t>(), 0);
    EXPECT_LE(table["rows"].get<int64_t>(), 90);
    EXPECT_GE(table["admitted"].get<int64_t>(), table["rows"].get<int64_t>());
    EXPECT_GT(table["dropped_gradients"].get<int64_t>(), 0);  // admit_after = 2
    EXPECT_EQ(table["shards"].size(), 2u);
    RunResult text = cluster_.Cli({"status", id});
    EXPECT_NE(text.out.find("dynamic tables"), std::string::npos) << text.out;
  }
  ASSERT_NO_FATAL_FAILURE(KillAndRelease(c, id));

  nlohmann::json end = cluster_.WaitForEnd(id);
  ASSERT_EQ(end["state"], "SUCCEEDED") << end.dump() << "\n" << cluster_.Logs();
  const int restarts = cluster_.Restarts(id);
  // The job's story, for whoever reads the test's output.
  for (const std::string& m : cluster_.EventMessages(id)) std::cout << "event: " << m << "\n";
  const int resumed = c.resumed;
  if (c.victim == Victim::kCoordinator || c.victim == Victim::kAgent) {
    // Coordinator: calls in flight when it died, or sent after, are retried
    // on a new connection (CoordinatorClient "Retries"). Agent: its tasks keep
    // running, the restarted agent adopts them and reports their real exit
    // (their supervisor recorded it). Either way the job goes on in attempt 1.
    EXPECT_EQ(restarts, 0) << end.dump();
    EXPECT_EQ(end["attempt"], 1) << end.dump();
  } else {
    EXPECT_GE(restarts, 1) << end.dump();
    EXPECT_GE(end["attempt"].get<int>(), 2) << end.dump();
  }
  std::cout << "kill case " << c.name << ": SUCCEEDED after " << restarts << " restart(s), attempt "
            << end["attempt"] << "\n";

  // The uninterrupted run, in the same cluster.
  TinyJob clean;
  clean.tag = "clean";
  clean.max_restarts = 0;
  dynamic(&clean);
  const std::string clean_id = cluster_.Submit(clean);
  ASSERT_FALSE(clean_id.empty());
  nlohmann::json clean_end = cluster_.WaitForEnd(clean_id);
  ASSERT_EQ(clean_end["state"], "SUCCEEDED") << clean_end.dump() << "\n" << cluster_.Logs();

  for (int r = 0; r < 2; ++r) {
    Model a = ReadModel(cluster_.Output("faulty", r));
    Model b = ReadModel(cluster_.Output("clean", r));
    ASSERT_EQ(a["w"].size(), TinyModel::kDim) << "rank " << r;
    ASSERT_EQ(a["emb"].size(), TinyModel::kRows * TinyModel::kDim) << "rank " << r;
    if (resumed < 0) {
      EXPECT_TRUE(a["resumed"].empty()) << "rank " << r;
    } else {
      EXPECT_EQ(a["resumed"], std::vector<float>{static_cast<float>(resumed)}) << "rank " << r;
    }
    EXPECT_EQ(a["w"], b["w"]) << "rank " << r;
    EXPECT_EQ(a["emb"], b["emb"]) << "rank " << r;
  }
  // The newest checkpoint (step 30) is complete and exports.
  RunResult e = cluster_.Cli({"export", id, "--out", dir_.File("export")});
  EXPECT_EQ(e.exit_code, 0) << e.err;
  if (c.dynamic && e.exit_code == 0) {
    // A dynamic table exports as its ids, sorted, and their rows: each the
    // final model's row of that id.
    const std::vector<int64_t> ids = NpyData<int64_t>(dir_.File("export/emb.ids.npy"));
    const std::vector<float> rows = NpyData<float>(dir_.File("export/emb.npy"));
    ASSERT_FALSE(ids.empty());
    EXPECT_LE(ids.size(), 90u);  // max_rows
    ASSERT_EQ(rows.size(), ids.size() * TinyModel::kDim);
    EXPECT_TRUE(std::is_sorted(ids.begin(), ids.end()));
    const Model final_model = ReadModel(cluster_.Output("faulty", 0));
    std::map<int64_t, int64_t> row_of;
    for (int64_t r = 0; r < TinyModel::kRows; ++r) row_of[TinyId(r, true)] = r;
    for (size_t i = 0; i < ids.size(); ++i) {
      ASSERT_TRUE(row_of.count(ids[i])) << ids[i];
      for (uint32_t j = 0; j < TinyModel::kDim; ++j) {
        EXPECT_EQ(rows[i * TinyModel::kDim + j],
                  final_model.at("emb")[static_cast<size_t>(row_of[ids[i]]) * TinyModel::kDim + j])
            << "id " << ids[i];
      }
    }
  }
  EXPECT_EQ(CheckDatabase(cluster_.Db()), "");
}

// One case per process type: `fault` (CI).
INSTANTIATE_TEST_SUITE_P(
    Ci, KillTest,
    ::testing::Values(KillCase{"RankMidCheckpointWrite", Victim::kRank1, "ckpt:20", 1, 10},
                      KillCase{"ShardMidStep", Victim::kShard0, "step:15", -1, 10},
                      KillCase{"AgentMidStep", Victim::kAgent, "step:15", -1, -1},
                      KillCase{"CoordinatorMidStep", Victim::kCoordinator, "step:15", -1, -1},
                      KillCase{"ShardMidStepDynamicTable", Victim::kShard0, "step:15", -1, 10, true},
                      KillCase{"RankMidStepDynamicTable", Victim::kRank1, "step:15", 1, 10, true}),
    [](const ::testing::TestParamInfo<KillCase>& i) { return std::string(i.param.name); });

// The rest of the matrix: `slow`.
INSTANTIATE_TEST_SUITE_P(
    Matrix, KillTest,
    ::testing::Values(
        KillCase{"RankDuringRendezvous", Victim::kRank1, "start", 1, -1},
        KillCase{"RankMidStep", Victim::kRank1, "step:15", 1, 10},
        KillCase{"RankAfterCommit", Victim::kRank1, "step:20", -1, 20},
        // Rank 1 waits before Start(); rank 0 stores the plan, which
        // starts the shard, and waits in the rendezvous for rank 1.
        KillCase{"ShardDuringRendezvous", Victim::kShard0, "start", 1, -1},
        // Both ranks stopped as the checkpoint of step 20 begins: rank 0's
        // SAVE to the dead shard fails, step 20 is never committed.
        KillCase{"ShardMidCheckpointWrite", Victim::kShard0, "ckpt:20", -1, 10},
        // A killed agent's tasks keep running (a cluster agent leaves them
        // running) and finish the job's 30 steps; the restarted agent adopts
        // them and reports how they ended: no restart.
        KillCase{"AgentDuringRendezvous", Victim::kAgent, "start", -1, -1},
        KillCase{"AgentMidCheckpointWrite", Victim::kAgent, "ckpt:20", -1, -1},
        KillCase{"CoordinatorDuringRendezvous", Victim::kCoordinator, "start", -1, -1},
        // Rank 1 stopped in its part of step 20's checkpoint; rank 0 is in
        // the commit protocol, waiting on the coordinator for rank 1's digest
        // (a KvGet in flight when it dies). No restart: nothing resumes.
        KillCase{"CoordinatorDuringCheckpointCommit", Victim::kCoordinator, "ckpt:20", 1, -1}),
    [](const ::testing::TestParamInfo<KillCase>& i) { return std::string(i.param.name); });

// SIGKILL of the coordinator while three agents heartbeat (every 200 ms),
// a client submits jobs and the placed jobs run and commit checkpoints:
// after a restart on the same --db every acknowledged job is there, the
// database is consistent, and every job still ends SUCCEEDED. `fault`.
TEST(CoordinatorKillTest, DuringSubmitsHeartbeatsAndCommitsLosesNothing) {
  TempDir dir;
  FaultCluster cluster(dir);
  ASSERT_EQ(cluster.StartCoordinator(), "");
  for (const char* name : {"a", "b", "c"}) cluster.StartAgent(name);
  std::set<std::string> acknowledged;
  std::atomic<int> count{0};
  // 12 submits: some before the kill, some refused while it is down, the
  // rest after the restart.
  std::thread submitter([&] {
    for (int i = 0; i < 12; ++i) {
      TinyJob job;
      job.tag = "job" + std::to_string(i);
      job.max_restarts = 2;
      // A submit lost to the kill is expected here.
      std::string id = cluster.Submit(job, /*expect_ok=*/false);
      if (!id.empty()) {
        acknowledged.insert(id);
        ++count;
      }
    }
  });
  while (count < 4) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  cluster.KillCoordinator();
  EXPECT_EQ(CheckDatabase(cluster.Db()), "") << "right after the kill";
  const std::string restarted = cluster.StartCoordinator("127.0.0.1", cluster.port());
  submitter.join();
  ASSERT_EQ(restarted, "");
  std::cout << acknowledged.size() << " jobs acknowledged around the kill\n";
  for (const std::string& id : acknowledged) {
    nlohmann::json end = cluster.WaitForEnd(id);
    EXPECT_EQ(end["state"], "SUCCEEDED") << "job " << id << ": " << end.dump() << "\n"
                                         << cluster.Logs();
  }
  EXPECT_EQ(CheckDatabase(cluster.Db()), "");
}

}  // namespace
}  // namespace parallax::testing
