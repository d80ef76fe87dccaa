// A PS shard of an async job SIGKILLed mid-training, after a checkpoint: a
// real coordinator, one agent, two parallax-ps shards and two
// trainer_test_rank ranks (the tiny model, 30 steps, checkpoints every 10).
// The ranks pause before step 15 (TINY_PAUSE_AT) so the kill lands at a known
// moment; the coordinator starts the shard's generation 2 alone
// (coordinator/orchestration/shard_recovery.h) while they wait. Checked:
//   - no rank restarted: the same rank processes before and after the kill,
//     attempt 1 to the end, no restart event; the job SUCCEEDED;
//   - generation 2 ran, in its own task directory (the dead one's log kept);
//   - the lost updates it reported, in `parallax status` and the events,
//     equal the updates the dead process applied (its updates file, read
//     after the kill) less the versions of its partitions in the step-10
//     checkpoint (read from the checkpoint's files), and are more than 0.
// `fault`.
#include <gtest/gtest.h>
#include <signal.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>

#include "core/plan/job_plan.h"
#include "core/ps/partition_file.h"
#include "tests/fault/fault_cluster.h"
#include "tests/testing/proc_scan.h"

namespace parallax::testing {
namespace {

using Clock = std::chrono::steady_clock;

// The count in a shard's updates file (ps/updates_file.h: 8 bytes of magic,
// then a little-endian int64), read here byte by byte.
int64_t ReadUpdatesFile(const std::string& path) {
  const std::string bytes = ReadWholeFile(path);
  if (bytes.size() != 16 || bytes.compare(0, 8, "PXUPDv1\n") != 0) return -1;
  int64_t count = 0;
  std::memcpy(&count, bytes.data() + 8, sizeof(count));
  return count;
}

// The versions (updates applied) of shard `shard`'s partitions in the
// checkpoint `step_dir`, from the partition files' headers.
int64_t CheckpointVersions(const plan::JobPlan& plan, const std::string& step_dir,
                           uint32_t shard) {
  int64_t total = 0;
  for (const ps::VariableSpec& var : plan.ps.variables) {
    for (uint32_t p = 0; p < var.partition_shards.size(); ++p) {
      if (var.partition_shards[p] != shard) continue;
      auto reader = ps::PartitionFileReader::Open(
          step_dir + "/" + ps::PartitionFileName(var.id, p), /*verify=*/true);
      EXPECT_TRUE(reader.ok()) << reader.status().ToString();
      if (reader.ok()) total += (*reader)->header().version;
    }
  }
  return total;
}

std::vector<int> Sorted(std::vector<int> v) {
  std::sort(v.begin(), v.end());
  return v;
}

TEST(ShardLossTest, AsyncShardKilledAfterACheckpointComesBackAloneAndCountsItsLostUpdates) {
  TempDir dir;
  FaultCluster cluster(dir);
  ASSERT_EQ(cluster.StartCoordinator(), "");
  cluster.StartAgent("a");
  const std::string pause = dir.File("pause");
  std::filesystem::create_directories(pause);
  TinyJob job;
  job.tag = "async";
  job.job_extra = "consistency = \"async\"\n";
  job.env = {{"TINY_PAUSE_AT", "step:15"}, {"TINY_PAUSE_DIR", pause}};
  const std::string id = cluster.Submit(job);
  ASSERT_FALSE(id.empty());
  for (int r = 0; r < 2; ++r) {
    ASSERT_TRUE(WaitForFile(pause + "/paused-rank" + std::to_string(r), 60'000))
        << "rank " << r << " never reached step 15\n"
        << cluster.Logs();
  }
  const std::vector<std::string> trainers = {"PARALLAX_JOB_ID=" + id, "PARALLAX_ROLE=trainer",
                                             cluster.Marker()};
  const std::vector<int> ranks = Sorted(PidsWithEnv(trainers));
  ASSERT_EQ(ranks.size(), 2u);
  const std::vector<std::string> shard0 = {"PARALLAX_JOB_ID=" + id, "PARALLAX_ROLE=ps",
                                           "PARALLAX_SHARD=0", "PARALLAX_ATTEMPT=1",
                                           cluster.Marker()};
  const std::vector<int> first = PidsWithEnv(shard0);
  ASSERT_EQ(first.size(), 1u) << cluster.Logs();
  ASSERT_EQ(kill(first[0], SIGKILL), 0);

  // Generation 2 starts while the ranks still wait.
  std::vector<std::string> second_env = shard0;
  second_env.push_back("PARALLAX_SHARD_GENERATION=2");
  std::vector<int> second;
  for (auto deadline = Clock::now() + std::chrono::seconds(60);
       second.empty() && Clock::now() < deadline;) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    second = PidsWithEnv(second_env);
  }
  ASSERT_EQ(second.size(), 1u) << cluster.Logs();
  EXPECT_NE(second[0], first[0]);
  EXPECT_EQ(Sorted(PidsWithEnv(trainers)), ranks);

  // The ground truth: what the dead process applied, less the checkpoint's.
  const std::string tasks = dir.File("agent-a") + "/tasks/" + id + "-1-ps-0";
  const int64_t applied = ReadUpdatesFile(tasks + "/updates-applied");
  RunResult status = cluster.Cli({"status", id, "--json"});
  ASSERT_EQ(status.exit_code, 0) << status.err;
  StatusOr<plan::JobPlan> plan =
      plan::ParseJobPlan(nlohmann::json::parse(status.out)["jobs"][0]["plan"].dump());
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  const int64_t checkpointed =
      CheckpointVersions(*plan, cluster.CheckpointRoot() + "/job-" + id + "/step-10", 0);
  const int64_t lost = applied - checkpointed;
  std::cout << "shard 0 applied " << applied << " updates, the step-10 checkpoint holds "
            << checkpointed << ": " << lost << " lost\n";
  ASSERT_GT(checkpointed, 0);
  ASSERT_GT(lost, 0);

  std::ofstream(pause + "/go") << "go\n";
  nlohmann::json end = cluster.WaitForEnd(id);
  ASSERT_EQ(end["state"], "SUCCEEDED") << end.dump() << "\n" << cluster.Logs();
  EXPECT_EQ(end["attempt"], 1) << end.dump();
  EXPECT_EQ(cluster.Restarts(id), 0);
  const std::vector<std::string> events = cluster.EventMessages(id);
  for (const std::string& m : events) std::cout << "event: " << m << "\n";
  const std::string restarted =
      "attempt 1: shard 0 lost (ps/0 on agent \"a\" was killed by signal 9 (SIGKILL)), "
      "generation 2 started on agent \"a\"";
  EXPECT_EQ(std::count(events.begin(), events.end(), restarted), 1);
  const std::string counted = "attempt 1: shard 0 generation 2: " + std::to_string(lost) +
                              " update(s) its lost process applied after the checkpoint it "
                              "loaded are lost";
  EXPECT_EQ(std::count(events.begin(), events.end(), counted), 1);
  EXPECT_EQ(end["shard_restarts"], 1) << end.dump();
  EXPECT_EQ(end["lost_updates"], lost) << end.dump();
  EXPECT_EQ(end["lost_updates_unknown"], 0) << end.dump();
  RunResult text = cluster.Cli({"status", id});
  EXPECT_NE(text.out.find("shard restarts:"), std::string::npos) << text.out;
  EXPECT_NE(text.out.find(" 1 (" + std::to_string(lost) + " updates lost)"), std::string::npos)
      << text.out;
  EXPECT_NE(text.out.find("ps/0 (generation 2)"), std::string::npos) << text.out;
  // Each generation has its own directory and log.
  EXPECT_TRUE(std::filesystem::exists(tasks + "/task.log"));
  EXPECT_TRUE(std::filesystem::exists(tasks + "-g2/task.log"));
  EXPECT_EQ(CheckDatabase(cluster.Db()), "");
}

}  // namespace
}  // namespace parallax::testing
