// Local aggregation (docs/ARCHITECTURE.md "Data plane"): 4
// rank processes as 2 hosts × 2 ranks (PARALLAX_HOST_INDEX and friends, as an
// agent sets them), sync mode, the sparse table on 2 real parallax-ps shards.
// The ranks of a host sum their sparse gradients and the host's first rank
// pushes them; the trained variables equal a one-process run with the whole
// batch, and only the hosts' first ranks sent PS pushes; with hot rows too.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>

#include <fstream>
#include <map>
#include <sstream>

#include "core/rpc/coordinator_client.h"
#include "tests/testing/coordinator_connect.h"
#include "tests/testing/coordinator_process.h"
#include "tests/testing/model_file.h"
#include "tests/testing/subprocess.h"
#include "tests/testing/temp_dir.h"
#include "tests/trainer/tiny_trainer.h"
#include "core/plan/job_plan.h"
#include "tests/testing/build_paths.h"

namespace parallax {
namespace {

using testing::ChildProcess;
using testing::TinyModel;

constexpr int kHosts = 2, kPerHost = 2, kRanks = kHosts * kPerHost;
constexpr int kShards = 2, kSteps = 20, kBatch = 16;

std::string BinDir() { return testing::BinDirOr(::parallax::testing::BuildBinDir()); }

// What a run of the 4 ranks left: the plan and each rank's bytes per path.
struct TwoHostsRun {
  plan::JobPlan plan;
  std::map<int, double> push_bytes, gather_bytes;
};

// Runs the 4 ranks with `more_ps` in the job's [ps] table and checks that
// every rank's variables equal the one-process run with the whole batch.
void RunTwoHosts(const std::string& more_ps, TwoHostsRun* out) {
  testing::TempDir dir;
  testing::CoordinatorProcess coordinator(BinDir(), dir.path());
  ASSERT_TRUE(coordinator.ok()) << coordinator.error();
  auto coord = testing::ConnectToCoordinator(coordinator);
  ASSERT_TRUE(coord.ok()) << coord.status().ToString();
  const std::string port = coordinator.port_text();

  const std::string job_file = dir.File("job.toml");
  const std::string text =
      "[job]\nname = \"local-aggregation\"\nworkers = 4\n"
      "[trainer]\ncommand = [\"./trainer_test_rank\"]\n"
      "[optimizer.dense]\ntype = \"sgd\"\nlr = 0.1\n"
      "[optimizer.sparse]\ntype = \"adagrad\"\nlr = 0.1\n"
      "[ps]\nshards = 2\nlocal_aggregation = true\n" + more_ps +
      "[[variable]]\nname = \"emb\"\npath = \"ps\"\n"
      // The dense weights all-reduced (the cost model may put them on the PS).
      "[[variable]]\nname = \"w\"\npath = \"allreduce\"\n";
  std::ofstream(job_file) << text;
  auto job = (*coord)->SubmitJob(text, job_file);
  ASSERT_TRUE(job.ok()) << job.status().ToString();
  const int64_t id = job->id;

  auto env = [&](const std::string& role) {
    return std::vector<std::string>{"PARALLAX_JOB_ID=" + std::to_string(id),
                                    "PARALLAX_ATTEMPT=1",
                                    "PARALLAX_WORLD_SIZE=" + std::to_string(kRanks),
                                    "PARALLAX_NUM_HOSTS=" + std::to_string(kHosts),
                                    "PARALLAX_NUM_SHARDS=" + std::to_string(kShards),
                                    "PARALLAX_COORDINATOR=127.0.0.1:" + port,
                                    "PARALLAX_BIND_ADDR=127.0.0.1",
                                    "PARALLAX_JOB_FILE=" + job_file,
                                    "PARALLAX_ROLE=" + role};
  };
  std::vector<std::unique_ptr<ChildProcess>> shards, ranks;
  for (int s = 0; s < kShards; ++s) {
    auto e = env("ps");
    e.push_back("PARALLAX_SHARD=" + std::to_string(s));
    e.push_back("PARALLAX_HOST_INDEX=" + std::to_string(s % kHosts));
    shards.push_back(std::make_unique<ChildProcess>(
        std::vector<std::string>{BinDir() + "/parallax-ps"},
        dir.File("shard" + std::to_string(s) + ".log"), e));
  }
  for (int r = 0; r < kRanks; ++r) {
    auto e = env("trainer");
    e.push_back("PARALLAX_RANK=" + std::to_string(r));
    e.push_back("PARALLAX_HOST_INDEX=" + std::to_string(r / kPerHost));
    e.push_back("PARALLAX_LOCAL_RANK=" + std::to_string(r % kPerHost));
    e.push_back("PARALLAX_LOCAL_WORLD_SIZE=" + std::to_string(kPerHost));
    ranks.push_back(std::make_unique<ChildProcess>(
        std::vector<std::string>{BinDir() + "/trainer_test_rank",
                                 dir.File("rank" + std::to_string(r) + ".out"),
                                 std::to_string(kSteps), std::to_string(kBatch)},
        dir.File("rank" + std::to_string(r) + ".log"), e));
  }
  for (int r = 0; r < kRanks; ++r) {
    const int status = ranks[static_cast<size_t>(r)]->Wait(120'000);
    ASSERT_TRUE(status != -1 && WIFEXITED(status) && WEXITSTATUS(status) == 0)
        << "rank " << r << ":\n"
        << testing::ReadWholeFile(dir.File("rank" + std::to_string(r) + ".log"));
  }
  for (auto& s : shards) {
    s->Signal(SIGTERM);
    EXPECT_NE(s->Wait(10'000), -1);
  }

  // The plan says so: one contributor per host.
  std::string plan_json;
  ASSERT_TRUE((*coord)
                  ->Call([&](rpc::CoordinatorClient& c) {
                    c.GetPlan(plan_json, (*coord)->Header(), id, 1, 0);
                  })
                  .ok());
  auto parsed = plan::ParseJobPlan(plan_json);
  ASSERT_TRUE(parsed.ok()) << parsed.status().ToString();
  EXPECT_TRUE(parsed->local_aggregation) << plan_json;
  EXPECT_EQ(parsed->ps.contributors(), static_cast<uint32_t>(kHosts)) << plan_json;
  out->plan = *parsed;

  // Every rank's variables equal the one-process run with the whole batch.
  OptimizerSettings dense, sparse;
  dense.type = *ParseOptimizerType("sgd");
  dense.lr = 0.1f;
  sparse.type = *ParseOptimizerType("adagrad");
  sparse.lr = 0.1f;
  sparse.initial_accumulator = 0.1f;
  testing::TinyResult ref = testing::TrainTinyReference(dense, sparse, kSteps, kRanks * kBatch);
  for (int r = 0; r < kRanks; ++r) {
    testing::ModelFile got = testing::ReadModelFile(dir.File("rank" + std::to_string(r) + ".out"));
    ASSERT_EQ(got["emb"].size(), TinyModel::kRows * TinyModel::kDim) << "rank " << r;
    EXPECT_LT(testing::RelativeDifference(got["w"], ref.w), 1e-5) << "rank " << r;
    EXPECT_LT(testing::RelativeDifference(got["emb"], ref.emb), 1e-5) << "rank " << r;
  }

  // Each rank's bytes per path, as its transports counted them.
  rpc::GetMetricsRequest req;
  req.job_id = id;
  std::vector<rpc::MetricPoint> points;
  ASSERT_TRUE(
      (*coord)
          ->Call([&](rpc::CoordinatorClient& c) { c.GetMetrics(points, (*coord)->Header(), req); })
          .ok());
  auto value = [](const rpc::MetricPoint& p, const char* name) {
    return p.values.count(name) ? p.values.at(name) : 0.0;
  };
  for (const auto& p : points) {
    out->push_bytes[p.rank] += value(p, "ps_push_sent_bytes");
    out->gather_bytes[p.rank] += value(p, "local_agg_sent_bytes");
  }
}

// PS push bytes at the transport: only local rank 0 of each host pushed;
// the others sent their rows to it over the host's collective instead.
void ExpectOnlyHostLeadersPush(const TwoHostsRun& run) {
  ASSERT_EQ(run.push_bytes.size(), static_cast<size_t>(kRanks));
  for (int r = 0; r < kRanks; ++r) {
    if (r % kPerHost == 0) {
      EXPECT_GT(run.push_bytes.at(r), 0) << "rank " << r << " leads its host and pushes";
    } else {
      EXPECT_EQ(run.push_bytes.at(r), 0) << "rank " << r << " must leave the push to its host's rank";
    }
    EXPECT_GT(run.gather_bytes.at(r), 0) << "rank " << r << " exchanged rows within its host";
  }
}

TEST(LocalAggregationTest, TwoHostsOfTwoRanksEqualOneProcessAndOnlyHostLeadersPush) {
  TwoHostsRun run;
  ASSERT_NO_FATAL_FAILURE(RunTwoHosts("", &run));
  EXPECT_TRUE(run.plan.variables[0].hot_rows.empty());
  ExpectOnlyHostLeadersPush(run);
}

// [ps] hot_rows with local aggregation: the hot rows' block takes the dense
// gradients' all-reduce (host-aware: here all 4 ranks share one machine's
// memory, so it never reaches a socket), the cold rows' gradients are
// aggregated by host and pushed by its first rank, and the training is
// still the one-process run's.
TEST(LocalAggregationTest, HotRowsAreReducedOnTheHostFirstAndTrainTheSame) {
  TwoHostsRun run;
  ASSERT_NO_FATAL_FAILURE(RunTwoHosts("hot_rows = 4\n", &run));
  ASSERT_EQ(run.plan.variables[0].name, "emb");
  EXPECT_EQ(run.plan.variables[0].hot_rows.size(), 4u) << run.plan.variables[0].reason;
  ExpectOnlyHostLeadersPush(run);
}

}  // namespace
}  // namespace parallax
