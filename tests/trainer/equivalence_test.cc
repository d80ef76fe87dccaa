// The equivalence test: the tiny model (one sparse, one dense
// variable), sync mode, 2 rank processes × batch 32 for 30 steps under each
// arch equal a one-process run with batch 64 computed with core/optim
// (relative difference below 1e-5 on every variable). A real
// parallax-coordinator holds the plan and the rendezvous keys; PS arches run
// real parallax-ps shards started the way an agent starts them.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>

#include <chrono>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <thread>

#include "core/rpc/coordinator_client.h"
#include "tests/testing/coordinator_connect.h"
#include "tests/testing/coordinator_process.h"
#include "tests/testing/model_file.h"
#include "tests/testing/subprocess.h"
#include "tests/testing/temp_dir.h"
#include "tests/trainer/tiny_trainer.h"
#include "core/plan/job_plan.h"
#include "schemas/metric_names.h"
#include "tests/testing/build_paths.h"

namespace parallax {
namespace {

using testing::ChildProcess;
using testing::TinyModel;

std::string BinDir() { return testing::BinDirOr(::parallax::testing::BuildBinDir()); }

constexpr int kSteps = 30;
constexpr int kRanks = 2;
constexpr int kBatch = 32;

struct JobKnobs {
  std::string dense = "sgd", sparse = "adagrad";
  std::string consistency = "sync";
  std::string emb_path;  // a [[variable]] override for "emb"; empty: the plan decides
  bool shared_memory = false;  // [ps] shared_memory
  bool batch = true;           // [ps] batch
  // emb registered as a dynamic table: TINY_DYNAMIC ("1": ids 0..R-1;
  // "spread": mapped onto the whole 64-bit range); "": a table of R rows.
  std::string dynamic_emb;
  int hot_rows = 0;  // [ps] hot_rows
};

class TrainerEquivalenceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    coordinator_ = std::make_unique<testing::CoordinatorProcess>(BinDir(), dir_.path());
    ASSERT_TRUE(coordinator_->ok()) << coordinator_->error();
    port_ = coordinator_->port_text();
    auto c = testing::ConnectToCoordinator(*coordinator_);
    ASSERT_TRUE(c.ok()) << c.status().ToString();
    coord_ = std::move(c).value();
  }

  // Submits a job (it stays PENDING: no agents) and returns its id.
  int64_t Submit(const std::string& arch, int shards, const JobKnobs& opt, std::string* job_file) {
    std::string text = "[job]\nname = \"eq-" + arch + "\"\nworkers = 2\narch = \"" + arch +
                       "\"\n[trainer]\ncommand = [\"./trainer_test_rank\"]\n"
                       "[optimizer.dense]\ntype = \"" +
                       opt.dense +
                       "\"\nlr = 0.1\n"
                       "[optimizer.sparse]\ntype = \"" +
                       opt.sparse + "\"\nlr = 0.1\n";
    if (opt.consistency != "sync") {
      text.insert(text.find("[trainer]"), "consistency = \"" + opt.consistency + "\"\n" +
                                              (opt.consistency == "ssp" ? "staleness = 2\n" : ""));
    }
    if (shards > 0) text += "[ps]\nshards = " + std::to_string(shards) + "\n";
    if (shards > 0 && opt.shared_memory) text += "shared_memory = true\n";
    if (shards > 0 && !opt.batch) text += "batch = false\n";
    if (shards > 0 && opt.hot_rows > 0) text += "hot_rows = " + std::to_string(opt.hot_rows) + "\n";
    if (!opt.emb_path.empty()) text += "[[variable]]\nname = \"emb\"\npath = \"" + opt.emb_path + "\"\n";
    // The dense weights stay all-reduced under hybrid (the cost model would
    // put them on the PS with the default figures): what these runs compare.
    if (arch == "hybrid") text += "[[variable]]\nname = \"w\"\npath = \"allreduce\"\n";
    *job_file = dir_.File("job-" + arch + ".toml");
    std::ofstream(*job_file) << text;
    auto job = coord_->SubmitJob(text, *job_file);
    EXPECT_TRUE(job.ok()) << job.status().ToString();
    return job.ok() ? job->id : 0;
  }

  std::vector<std::string> Env(int64_t job, const std::string& job_file, int shards) {
    return {"PARALLAX_JOB_ID=" + std::to_string(job),
            "PARALLAX_ATTEMPT=1",
            "PARALLAX_WORLD_SIZE=" + std::to_string(kRanks),
            "PARALLAX_NUM_SHARDS=" + std::to_string(shards),
            "PARALLAX_COORDINATOR=127.0.0.1:" + port_,
            "PARALLAX_BIND_ADDR=127.0.0.1",
            "PARALLAX_JOB_FILE=" + job_file};
  }

  // Runs 2 ranks (and `shards` PS shards) of one job to the end and checks
  // every rank's variables against the one-process reference.
  void RunAndCompare(const std::string& arch, int shards, const JobKnobs& opt, bool prefetch,
                     VariablePath emb_path, VariablePath w_path) {
    std::vector<std::map<std::string, std::vector<float>>> got;
    ASSERT_NO_FATAL_FAILURE(RunJob(arch, shards, opt, prefetch, emb_path, w_path, &got));
    const testing::TinyResult ref = Reference(opt);
    for (int r = 0; r < kRanks; ++r) {
      const double dw = testing::RelativeDifference(got[r]["w"], ref.w);
      const double demb = testing::RelativeDifference(got[r]["emb"], ref.emb);
      EXPECT_LT(dw, 1e-5) << arch << " rank " << r << " w";
      EXPECT_LT(demb, 1e-5) << arch << " rank " << r << " emb";
      std::ostringstream diffs;
      diffs << std::scientific << "w " << dw << " emb " << demb;
      RecordProperty("rank" + std::to_string(r) + "_relative_difference", diffs.str());
    }
  }

  // The one-process run that 2 ranks of `opt`'s job must equal: batch
  // kRanks × kBatch, the job file's optimizers (lr 0.1, Adagrad's initial
  // accumulator its default 0.1); with `spread`, over TinyId's ids.
  static testing::TinyResult Reference(const JobKnobs& opt, bool spread = false) {
    auto spec = [](const std::string& type) {
      OptimizerSettings s;
      s.type = *ParseOptimizerType(type);
      s.lr = 0.1f;
      s.initial_accumulator = 0.1f;
      return s;
    };
    return testing::TrainTinyReference(spec(opt.dense), spec(opt.sparse), kSteps, kRanks * kBatch,
                                       spread);
  }

  // Runs the job; (*got)[rank] holds the variables each rank wrote.
  void RunJob(const std::string& arch, int shards, const JobKnobs& opt, bool prefetch,
              VariablePath emb_path, VariablePath w_path,
              std::vector<std::map<std::string, std::vector<float>>>* got) {
    std::string job_file;
    const int64_t job = Submit(arch, shards, opt, &job_file);
    ASSERT_GT(job, 0);
    const std::string tag = arch + "-" + std::to_string(job);
    std::vector<std::unique_ptr<ChildProcess>> shard_procs, ranks;
    for (int s = 0; s < shards; ++s) {
      auto env = Env(job, job_file, shards);
      env.push_back("PARALLAX_ROLE=ps");
      env.push_back("PARALLAX_SHARD=" + std::to_string(s));
      shard_procs.push_back(std::make_unique<ChildProcess>(
          std::vector<std::string>{BinDir() + "/parallax-ps"},
          dir_.File(tag + "-shard" + std::to_string(s) + ".log"), env));
    }
    for (int r = 0; r < kRanks; ++r) {
      auto env = Env(job, job_file, shards);
      env.push_back("PARALLAX_ROLE=trainer");
      env.push_back("PARALLAX_RANK=" + std::to_string(r));
      if (!opt.dynamic_emb.empty()) env.push_back("TINY_DYNAMIC=" + opt.dynamic_emb);
      std::vector<std::string> argv = {BinDir() + "/trainer_test_rank",
                                       dir_.File(tag + "-rank" + std::to_string(r) + ".out"),
                                       std::to_string(kSteps), std::to_string(kBatch)};
      if (prefetch) argv.push_back("prefetch");
      ranks.push_back(std::make_unique<ChildProcess>(
          argv, dir_.File(tag + "-rank" + std::to_string(r) + ".log"), env));
    }
    for (int r = 0; r < kRanks; ++r) {
      const int status = ranks[static_cast<size_t>(r)]->Wait(120'000);
      ASSERT_TRUE(status != -1 && WIFEXITED(status) && WEXITSTATUS(status) == 0)
          << "rank " << r << " (status " << status << "):\n"
          << testing::ReadWholeFile(dir_.File(tag + "-rank" + std::to_string(r) + ".log"));
    }
    for (auto& s : shard_procs) {
      s->Signal(SIGTERM);
      EXPECT_NE(s->Wait(10'000), -1);
    }

    // The plan rank 0 put is the one the arch asks for.
    std::string plan_json;
    ASSERT_TRUE(coord_
                    ->Call([&](rpc::CoordinatorClient& c) {
                      c.GetPlan(plan_json, coord_->Header(), job, 1, 0);
                    })
                    .ok());
    auto parsed = plan::ParseJobPlan(plan_json);
    ASSERT_TRUE(parsed.ok()) << parsed.status().ToString();
    ASSERT_EQ(parsed->variables.size(), 2u);
    EXPECT_EQ(parsed->variables[0].path, emb_path) << plan_json;
    EXPECT_EQ(parsed->variables[1].path, w_path) << plan_json;
    plan_ = *parsed;

    got->assign(kRanks, {});
    for (int r = 0; r < kRanks; ++r) {
      (*got)[r] = testing::ReadModelFile(dir_.File(tag + "-rank" + std::to_string(r) + ".out"));
      ASSERT_EQ((*got)[r]["w"].size(), TinyModel::kDim) << "rank " << r;
      ASSERT_EQ((*got)[r]["emb"].size(), TinyModel::kRows * TinyModel::kDim) << "rank " << r;
    }

    // Both ranks reported loss and throughput.
    rpc::GetMetricsRequest req;
    req.job_id = job;
    std::vector<rpc::MetricPoint> points;
    ASSERT_TRUE(
        coord_
            ->Call([&](rpc::CoordinatorClient& c) { c.GetMetrics(points, coord_->Header(), req); })
            .ok());
    int per_rank[kRanks] = {0, 0};
    pull_recv_bytes_ = 0;
    ps_requests_ = 0;
    hot_hits_ = hot_misses_ = 0;
    for (const auto& p : points) {
      if (p.rank >= 0 && p.rank < kRanks) ++per_rank[p.rank];
      EXPECT_GT(p.loss, 0.0);
      auto it = p.values.find("ps_pull_recv_bytes");
      if (it != p.values.end()) pull_recv_bytes_ += it->second;
      ps_requests_ += metric_names::ValueOf(p.values, metric_names::kPsRequests);
      hot_hits_ += metric_names::ValueOf(p.values, metric_names::kHotRowHits);
      hot_misses_ += metric_names::ValueOf(p.values, metric_names::kHotRowMisses);
    }
    EXPECT_EQ(per_rank[0], kSteps / 5);
    EXPECT_EQ(per_rank[1], kSteps / 5);
  }

  plan::JobPlan plan_;           // the last RunJob's
  double pull_recv_bytes_ = 0;  // the last RunJob: sum over its points of ps_pull_recv_bytes
  double ps_requests_ = 0;      // the last RunJob: sum over its points of ps_requests
  double hot_hits_ = 0, hot_misses_ = 0;  // ... of hot_row_hits and hot_row_misses
  testing::TempDir dir_;
  std::string port_;
  std::unique_ptr<testing::CoordinatorProcess> coordinator_;
  std::unique_ptr<CoordinatorClient> coord_;
};

TEST_F(TrainerEquivalenceTest, AllReduceEqualsOneProcess) {
  RunAndCompare("allreduce", 0, {}, false, VariablePath::kAllReduce, VariablePath::kAllReduce);
}

TEST_F(TrainerEquivalenceTest, AllGatherEqualsOneProcess) {
  RunAndCompare("allgather", 0, {}, false, VariablePath::kAllGather, VariablePath::kAllReduce);
}

TEST_F(TrainerEquivalenceTest, PsEqualsOneProcess) {
  RunAndCompare("ps", 2, {}, true, VariablePath::kPs, VariablePath::kPs);
}

// A dynamic table whose ids are 0..R-1 (admitted at once, no budget) trains
// as the table of R rows does: 2 ranks, 2 shards, sync, Adagrad, the same
// values to 1e-6 as the fixed table's run (rows no batch touched read the
// initializer's values in both), and one process's.
TEST_F(TrainerEquivalenceTest, DynamicTableEqualsTheFixedTable) {
  JobKnobs dynamic_knobs;
  dynamic_knobs.dynamic_emb = "1";
  std::vector<std::map<std::string, std::vector<float>>> fixed, dynamic;
  ASSERT_NO_FATAL_FAILURE(
      RunJob("ps", 2, {}, false, VariablePath::kPs, VariablePath::kPs, &fixed));
  ASSERT_NO_FATAL_FAILURE(
      RunJob("ps", 2, dynamic_knobs, false, VariablePath::kPs, VariablePath::kPs, &dynamic));
  for (int r = 0; r < kRanks; ++r) {
    EXPECT_LT(testing::RelativeDifference(dynamic[r]["emb"], fixed[r]["emb"]), 1e-6) << "rank " << r;
    EXPECT_LT(testing::RelativeDifference(dynamic[r]["w"], fixed[r]["w"]), 1e-6) << "rank " << r;
  }
  EXPECT_LT(testing::RelativeDifference(dynamic[0]["emb"], Reference(dynamic_knobs).emb), 1e-5);
}

// The same over ids spread across the whole 64-bit range (negative int64
// included, each of the model's rows r sent as a 64-bit mix of r): 2 ranks
// × batch 32 equal one process with batch 64 whose rows start from the
// initializer's values of those ids.
TEST_F(TrainerEquivalenceTest, DynamicTableOverThe64BitRangeEqualsOneProcess) {
  JobKnobs spread;
  spread.dynamic_emb = "spread";
  std::vector<std::map<std::string, std::vector<float>>> got;
  ASSERT_NO_FATAL_FAILURE(RunJob("ps", 2, spread, true, VariablePath::kPs, VariablePath::kPs, &got));
  int negative = 0;
  for (int64_t r = 0; r < TinyModel::kRows; ++r) negative += testing::TinyId(r, true) < 0;
  EXPECT_GT(negative, 20) << "the ids cover negative int64 too";
  const testing::TinyResult ref = Reference(spread, /*spread=*/true);
  const testing::TinyResult ids_as_rows = Reference(spread);
  for (int r = 0; r < kRanks; ++r) {
    EXPECT_LT(testing::RelativeDifference(got[r]["emb"], ref.emb), 1e-5) << "rank " << r;
    EXPECT_LT(testing::RelativeDifference(got[r]["w"], ref.w), 1e-5) << "rank " << r;
  }
  // The ids matter: rows started from other initial values differ.
  EXPECT_GT(testing::RelativeDifference(got[0]["emb"], ids_as_rows.emb), 1e-3);
}

// Only PS shards hold a table with no row count: under arch = "allreduce"
// rank 0 fails at Start() while it builds the plan, naming the table and
// what to set.
TEST_F(TrainerEquivalenceTest, ADynamicTableOffThePsIsRefusedByName) {
  JobKnobs dynamic_knobs;
  dynamic_knobs.dynamic_emb = "1";
  std::string job_file;
  const int64_t job = Submit("allreduce", 0, dynamic_knobs, &job_file);
  ASSERT_GT(job, 0);
  std::vector<std::unique_ptr<ChildProcess>> ranks;
  for (int r = 0; r < kRanks; ++r) {
    auto env = Env(job, job_file, 0);
    env.push_back("PARALLAX_ROLE=trainer");
    env.push_back("PARALLAX_RANK=" + std::to_string(r));
    env.push_back("TINY_DYNAMIC=1");
    ranks.push_back(std::make_unique<ChildProcess>(
        std::vector<std::string>{BinDir() + "/trainer_test_rank",
                                 dir_.File("refused-rank" + std::to_string(r) + ".out"), "5", "8"},
        dir_.File("refused-rank" + std::to_string(r) + ".log"), env));
  }
  // Rank 0 builds the plan and fails at once; rank 1, which waits for the
  // plan, is not waited for.
  const int status = ranks[0]->Wait(60'000);
  EXPECT_TRUE(status != -1 && WIFEXITED(status) && WEXITSTATUS(status) != 0) << status;
  ranks[1]->Signal(SIGKILL);
  ranks[1]->Wait(10'000);
  const std::string log = testing::ReadWholeFile(dir_.File("refused-rank0.log"));
  EXPECT_NE(log.find("variable \"emb\" is a dynamic table"), std::string::npos) << log;
  EXPECT_NE(log.find("only PS shards hold it"), std::string::npos) << log;
}

// Shards on this machine map each rank's region: the rows come through
// shared memory (the pulls' socket bytes shrink to headers) and the result
// is the same.
TEST_F(TrainerEquivalenceTest, PsWithSharedMemoryEqualsOneProcessAndMovesRowsOffTheSocket) {
  RunAndCompare("ps", 2, {}, true, VariablePath::kPs, VariablePath::kPs);
  const double socket = pull_recv_bytes_;
  JobKnobs shm;
  shm.shared_memory = true;
  RunAndCompare("ps", 2, shm, true, VariablePath::kPs, VariablePath::kPs);
  EXPECT_GT(socket, 0);
  EXPECT_LT(pull_recv_bytes_, socket * 0.75) << "with shared memory " << pull_recv_bytes_ << ", without " << socket;
  RecordProperty("ps_pull_recv_bytes", std::to_string(socket) + " -> " + std::to_string(pull_recv_bytes_));
}

// [ps] batch (the default) sends a step's pushes of both PS variables to
// each shard as one message; off, one per variable and partition. The same
// training either way, with fewer messages batched.
TEST_F(TrainerEquivalenceTest, PsPushesBatchedOrNotEqualOneProcess) {
  RunAndCompare("ps", 2, {}, true, VariablePath::kPs, VariablePath::kPs);
  const double batched = ps_requests_;
  RunAndCompare("ps", 2, {.batch = false}, true, VariablePath::kPs, VariablePath::kPs);
  EXPECT_GT(batched, 0);
  EXPECT_LT(batched, ps_requests_) << "PS messages per step, summed over the points: batched "
                                    << batched << ", one per variable and partition " << ps_requests_;
  RecordProperty("ps_requests", std::to_string(ps_requests_) + " -> " + std::to_string(batched));
}

// The cost model's choice with its default figures (core/plan/cost_model.h):
// the 2 workers share a host, so the whole 1,600-byte embedding all-reduced
// through shared memory (about 20 us, nothing on a socket) beats its 2 PS
// round trips (1.44 ms each) and all-gather's 2 collective calls (9 ms each).
// The PS path: HybridWithEmbeddingOnPsEqualsOneProcess.
TEST_F(TrainerEquivalenceTest, HybridEqualsOneProcess) {
  RunAndCompare("hybrid", 2, {}, true, VariablePath::kAllReduce, VariablePath::kAllReduce);
}

// The embedding on PS shards and the dense weights all-reduced.
TEST_F(TrainerEquivalenceTest, HybridWithEmbeddingOnPsEqualsOneProcess) {
  RunAndCompare("hybrid", 2, {.emb_path = "ps"}, true, VariablePath::kPs,
                VariablePath::kAllReduce);
}

// [ps] hot_rows = 16: the 16 rows rank 0's sampled batches touch most are
// kept on both ranks and all-reduced, the other 84 stay on the shards. The
// same training as one process (and so as the PS alone) to 1e-5 with every
// sparse optimizer: SGD and Adagrad, and lazy momentum and Adam, which must
// update only the hot rows some rank touched, as a shard does. Under arch
// "ps" the hot block is the only all-reduce of a step; under hybrid it
// joins the dense weights' bucket. Fewer pull bytes reach the ranks.
TEST_F(TrainerEquivalenceTest, PsWithHotRowsEqualsOneProcessForEveryOptimizer) {
  RunAndCompare("ps", 2, {}, true, VariablePath::kPs, VariablePath::kPs);
  const double without = pull_recv_bytes_;
  EXPECT_TRUE(plan_.variables[0].hot_rows.empty());
  EXPECT_EQ(hot_hits_ + hot_misses_, 0) << "no hot rows, no hot-row counts";
  for (const char* sparse : {"adagrad", "sgd", "momentum", "adam"}) {
    SCOPED_TRACE(sparse);
    RunAndCompare("ps", 2, {.sparse = sparse, .hot_rows = 16}, true, VariablePath::kPs,
                  VariablePath::kPs);
    ASSERT_EQ(plan_.variables[0].hot_rows.size(), 16u);
    EXPECT_NE(plan_.variables[0].reason.find("hot rows: 16 of 100"), std::string::npos)
        << plan_.variables[0].reason;
    // The ranks count the distinct rows of their steps' gradients that the
    // hot rows served, and the others, near the share the plan expected.
    EXPECT_GT(hot_hits_, 0);
    EXPECT_GT(hot_misses_, 0);
    const double share = hot_hits_ / (hot_hits_ + hot_misses_);
    RecordProperty("hot_share", std::to_string(share) + " measured, " +
                                    std::to_string(plan_.variables[0].hot_share) + " planned");
    EXPECT_NEAR(share, plan_.variables[0].hot_share, 0.15);
    if (std::string(sparse) == "adagrad") {
      EXPECT_GT(without, 0);
      // (The points' per-step means move the sums by ~5% run to run; the
      // hot rows take ~0.78×.)
      EXPECT_LT(pull_recv_bytes_, without * 0.9)
          << "pull bytes with hot rows " << pull_recv_bytes_ << ", without " << without;
      RecordProperty("ps_pull_recv_bytes", std::to_string(without) + " -> " + std::to_string(pull_recv_bytes_));
    }
  }
  RunAndCompare("hybrid", 2, {.emb_path = "ps", .hot_rows = 16}, false, VariablePath::kPs,
                VariablePath::kAllReduce);
  EXPECT_EQ(plan_.variables[0].hot_rows.size(), 16u);
}

TEST_F(TrainerEquivalenceTest, HybridWithSwappedOptimizersEqualsOneProcess) {
  RunAndCompare("hybrid", 1, {.dense = "adagrad", .sparse = "sgd", .emb_path = "ps"}, false,
                VariablePath::kPs, VariablePath::kAllReduce);
}

TEST_F(TrainerEquivalenceTest, PlanThatNeverArrivesIsADeadline) {
  std::string job_file;
  const int64_t job = Submit("hybrid", 0, {}, &job_file);
  SessionOptions o;
  o.job_id = job;
  o.rank = 1;  // only rank 0 puts the plan, and it never comes
  o.world_size = 2;
  o.coordinator = "127.0.0.1:" + port_;
  o.plan_timeout = std::chrono::milliseconds(300);
  auto session = Session::Create(o);
  ASSERT_TRUE(session.ok()) << session.status().ToString();
  ASSERT_TRUE((*session)->RegisterDense("w", 4).ok());
  Status st = (*session)->Start();
  EXPECT_EQ(st.code(), StatusCode::kDeadlineExceeded) << st.ToString();
  EXPECT_NE(st.message().find("plan"), std::string::npos) << st.message();
}

// Ranks that register different shapes: both stop at Start() with the
// message naming the rank, the variable and both shapes (well before the
// 20 s rendezvous deadline).
TEST_F(TrainerEquivalenceTest, ShapeDifferingBetweenRanksStopsBoth) {
  std::string job_file;
  const int64_t job = Submit("allgather", 0, {}, &job_file);
  ASSERT_GT(job, 0);
  std::vector<std::unique_ptr<ChildProcess>> ranks;
  for (int r = 0; r < kRanks; ++r) {
    auto env = Env(job, job_file, 0);
    env.push_back("PARALLAX_RANK=" + std::to_string(r));
    env.push_back("TINY_RENDEZVOUS_MS=20000");
    ranks.push_back(std::make_unique<ChildProcess>(
        std::vector<std::string>{BinDir() + "/trainer_test_rank", dir_.File("shape.out"), "1", "4",
                                 r == 1 ? "dim=8" : "prefetch"},
        dir_.File("shape-rank" + std::to_string(r) + ".log"), env));
  }
  const auto start = std::chrono::steady_clock::now();
  for (int r = 0; r < kRanks; ++r) {
    const int status = ranks[static_cast<size_t>(r)]->Wait(60'000);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 1) << "rank " << r << ": " << status;
  }
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(15));
  for (int r = 0; r < kRanks; ++r) {
    const std::string log =
        testing::ReadWholeFile(dir_.File("shape-rank" + std::to_string(r) + ".log"));
    EXPECT_NE(log.find("FAILED_PRECONDITION"), std::string::npos) << log;
    EXPECT_NE(log.find("differs between ranks: rank 1 registered \"emb\" sparse 100x8, rank 0 "
                       "\"emb\" sparse 100x4"),
              std::string::npos)
        << log;
  }
}

// Under ssp (staleness 2) two ranks with prefetching finish; nothing is
// deterministic about the interleaving, so the check is that training ran:
// finite values that moved away from their initial values.
TEST_F(TrainerEquivalenceTest, SspHybridTrainsToTheEnd) {
  JobKnobs knobs;
  knobs.consistency = "ssp";
  knobs.emb_path = "ps";  // ssp is a PS-side mode
  std::vector<std::map<std::string, std::vector<float>>> got;
  ASSERT_NO_FATAL_FAILURE(
      RunJob("hybrid", 2, knobs, true, VariablePath::kPs, VariablePath::kAllReduce, &got));
  const std::vector<float> w0 = InitialDenseValues(testing::WInit(), 1, TinyModel::kDim);
  for (int r = 0; r < kRanks; ++r) {
    for (float x : got[r]["emb"]) ASSERT_TRUE(std::isfinite(x));
    EXPECT_GT(testing::RelativeDifference(got[r]["w"], w0), 1e-3) << "rank " << r;
  }
  // Dense variables stay on synchronous all-reduce: identical on both ranks.
  EXPECT_EQ(got[0]["w"], got[1]["w"]);
}

// One rank under async applies each push as it arrives, which for a single
// worker is exactly the sync result: the one-process reference. (Without
// prefetching: an eager pull under async returns the rows as they are when
// it arrives, i.e. before this step's push, by design.)
TEST_F(TrainerEquivalenceTest, AsyncOneRankEqualsOneProcess) {
  std::string job_file;
  JobKnobs knobs;
  knobs.consistency = "async";
  const int64_t job = Submit("ps", 1, knobs, &job_file);
  ASSERT_GT(job, 0);
  auto env = Env(job, job_file, 1);
  env.push_back("PARALLAX_SHARD=0");
  ChildProcess shard({BinDir() + "/parallax-ps"}, dir_.File("async-shard.log"), env);
  SessionOptions o;
  o.job_id = job;
  o.coordinator = "127.0.0.1:" + port_;
  o.num_shards = 1;
  o.config.job.arch = Arch::kPs;
  o.config.job.consistency = Consistency::kAsync;
  o.config.dense_optimizer.type = OptimizerType::kSgd;
  o.config.dense_optimizer.lr = 0.1;
  o.config.sparse_optimizer.type = OptimizerType::kAdagrad;
  o.config.sparse_optimizer.lr = 0.1;
  o.plan_timeout = o.rendezvous_timeout = o.step_timeout = std::chrono::milliseconds(30'000);
  auto session = Session::Create(o);
  ASSERT_TRUE(session.ok()) << session.status().ToString();
  int emb = -1, w = -1;
  ASSERT_TRUE(testing::RegisterTiny(session->get(), &emb, &w).ok());
  Status started = (*session)->Start();
  ASSERT_TRUE(started.ok()) << started.ToString();
  Status trained = testing::TrainTiny(session->get(), emb, w, kSteps, kRanks * kBatch, false);
  ASSERT_TRUE(trained.ok()) << trained.ToString();
  OptimizerSettings sgd, adagrad;
  sgd.lr = adagrad.lr = 0.1f;
  adagrad.type = OptimizerType::kAdagrad;
  adagrad.initial_accumulator = 0.1f;
  testing::TinyResult ref = testing::TrainTinyReference(sgd, adagrad, kSteps, kRanks * kBatch);
  auto wv = (*session)->Dense(w);
  ASSERT_TRUE(wv.ok());
  std::vector<float> table;
  ASSERT_TRUE((*session)->ReadSparse(emb, 0, TinyModel::kRows, &table).ok());
  EXPECT_LT(testing::RelativeDifference({wv->begin(), wv->end()}, ref.w), 1e-5);
  EXPECT_LT(testing::RelativeDifference(table, ref.emb), 1e-5);
}

// A PS shard that disappears makes the step fail, within the step deadline,
// with a Status naming the variable and the shard.
TEST_F(TrainerEquivalenceTest, LostShardFailsTheStepNamingIt) {
  std::string job_file;
  const int64_t job = Submit("ps", 1, {}, &job_file);
  auto env = Env(job, job_file, 1);
  env.push_back("PARALLAX_SHARD=0");
  ChildProcess shard({BinDir() + "/parallax-ps"}, dir_.File("lost-shard.log"), env);
  SessionOptions o;
  o.job_id = job;
  o.coordinator = "127.0.0.1:" + port_;
  o.num_shards = 1;
  o.config.job.arch = Arch::kPs;
  o.plan_timeout = o.rendezvous_timeout = std::chrono::milliseconds(20'000);
  o.step_timeout = std::chrono::milliseconds(3'000);
  auto session = Session::Create(o);
  ASSERT_TRUE(session.ok()) << session.status().ToString();
  int emb = -1, w = -1;
  ASSERT_TRUE(testing::RegisterTiny(session->get(), &emb, &w).ok());
  Status started = (*session)->Start();
  ASSERT_TRUE(started.ok()) << started.ToString();
  Status trained = testing::TrainTiny(session->get(), emb, w, 3, 8, /*prefetch=*/false);
  ASSERT_TRUE(trained.ok()) << trained.ToString();

  shard.Signal(SIGKILL);
  ASSERT_NE(shard.Wait(10'000), -1);
  Status st = testing::TrainTiny(session->get(), emb, w, 4, 8, false);  // step 3
  EXPECT_EQ(st.code(), StatusCode::kDeadlineExceeded) << st.ToString();
  EXPECT_NE(st.message().find("PS shard 0 at tcp://127.0.0.1:"), std::string::npos) << st.message();
  EXPECT_NE(st.message().find("step 3"), std::string::npos) << st.message();
  // The session is broken from now on.
  std::vector<float> rows;
  EXPECT_EQ((*session)->Lookup(emb, std::vector<int64_t>{1}, &rows).code(),
            StatusCode::kFailedPrecondition);
}

}  // namespace
}  // namespace parallax
