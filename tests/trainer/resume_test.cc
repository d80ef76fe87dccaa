// Checkpoint, resume and export under a real
// parallax-coordinator and parallax-agent (which starts the trainer ranks and
// the real parallax-ps shards), driven through the real `parallax` CLI.
//
// The tiny model (2 ranks × batch 32, 30 steps, sync, SGD + Adagrad,
// embedding on 2 PS shards, dense weights on all-reduce) checkpoints every 10
// steps. In the interrupted run rank 1 exits after step 15 on attempt 1; the
// coordinator restarts the job, which resumes from step 10. Its final model
// must equal an uninterrupted run's bit for bit, and `parallax export` must
// write the same values.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>

#include "core/plan/job_plan.h"
#include "core/rpc/coordinator_client.h"
#include "tests/testing/build_paths.h"
#include "tests/testing/coordinator_connect.h"
#include "tests/testing/coordinator_process.h"
#include "tests/testing/model_file.h"
#include "tests/testing/subprocess.h"
#include "tests/testing/temp_dir.h"
#include "tests/trainer/tiny_trainer.h"

namespace parallax {
namespace {

using testing::ChildProcess;
using testing::RunProcess;
using testing::RunResult;
using testing::TinyModel;
using Clock = std::chrono::steady_clock;
using Model = std::map<std::string, std::vector<float>>;

const std::string kBin = ::parallax::testing::BuildBinDir();

Model ReadModel(const std::string& path) { return testing::ReadModelFile(path); }

// A float32 C-order .npy as `parallax export` writes it: its shape and data.
bool ReadNpy(const std::string& path, std::vector<int64_t>* shape, std::vector<float>* data) {
  const std::string bytes = testing::ReadWholeFile(path);
  if (bytes.size() < 10 || bytes.compare(0, 6, "\x93NUMPY") != 0 || bytes[6] != 1) return false;
  const size_t header_len = static_cast<unsigned char>(bytes[8]) |
                            (static_cast<size_t>(static_cast<unsigned char>(bytes[9])) << 8);
  const std::string header = bytes.substr(10, header_len);
  if (header.find("'descr': '<f4'") == std::string::npos ||
      header.find("'fortran_order': False") == std::string::npos || (10 + header_len) % 64 != 0)
    return false;
  const size_t open = header.find("'shape': (");
  const size_t close = header.find(')', open);
  std::string dims = header.substr(open + 10, close - open - 10);
  std::replace(dims.begin(), dims.end(), ',', ' ');
  std::istringstream ds(dims);
  shape->clear();
  int64_t d;
  size_t n = 1;
  while (ds >> d) {
    shape->push_back(d);
    n *= static_cast<size_t>(d);
  }
  if (bytes.size() != 10 + header_len + n * 4) return false;
  data->resize(n);
  std::memcpy(data->data(), bytes.data() + 10 + header_len, n * 4);
  return true;
}

class ResumeTest : public ::testing::Test {
 protected:
  void SetUp() override {
    testing::CoordinatorProcessOptions options;
    options.extra_args = {"--agent-timeout-ms", "5000"};
    coordinator_ = std::make_unique<testing::CoordinatorProcess>(kBin, dir_.path(), options);
    ASSERT_TRUE(coordinator_->ok()) << coordinator_->error();
    address_ = coordinator_->address();
    agent_ = std::make_unique<ChildProcess>(
        std::vector<std::string>{kBin + "/parallax-agent", "--coordinator", address_, "--name",
                                 "agent-a", "--workdir", dir_.File("agent-a"), "--slots", "2",
                                 "--grace-ms", "1000", "--heartbeat-ms", "200", "--allow-env",
                                 "TINY_*"},
        dir_.File("agent-a.log"));
  }

  std::string Log(const std::string& name) {
    return "---- " + name + "\n" + testing::ReadWholeFile(dir_.File(name));
  }

  RunResult Cli(std::vector<std::string> args) {
    std::vector<std::string> argv = {kBin + "/parallax", "--coordinator", address_};
    argv.insert(argv.end(), args.begin(), args.end());
    return RunProcess(argv, {}, 60'000);
  }

  // Submits the tiny job; `crash` makes rank 1 exit after step 15 on
  // attempt 1. Returns the job id.
  // `arch` other than hybrid runs without PS shards (hybrid puts the
  // embedding on 2 shards); `optimizer` is the
  // dense and sparse one (momentum/adam carry worker-side state).
  std::string Submit(const std::string& tag, bool crash, const std::string& arch = "hybrid",
                     const std::string& dense = "sgd", const std::string& sparse = "adagrad",
                     const std::string& job_extra = "", const std::string& ps_extra = "",
                     const std::string& env_extra = "") {
    const std::string path = dir_.File(tag + ".toml");
    std::ofstream f(path);
    f << "[job]\nname = \"" << tag << "\"\nworkers = 2\narch = \"" << arch
      << "\"\nmax_restarts = " << (crash ? 1 : 0) << "\n"
      << job_extra
      << "\n[trainer]\ncommand = [\"" << kBin << "/trainer_test_rank\", \""
      << dir_.File(tag + "-rank{rank}.out") << "\", \"30\", \"32\"]\n"
      << "checkpoint_every = 10\ncheckpoint_dir = \"" << dir_.File("ckpt") << "\"\n"
      << "keep_checkpoints = 2\nmetrics_every = 5\n";
    if (crash) f << "[trainer.env]\nTINY_EXIT_AT_STEP = \"15\"\nTINY_EXIT_RANK = \"1\"\n" << env_extra;
    f << "[optimizer.dense]\ntype = \"" << dense << "\"\nlr = 0.1\n"
      << "[optimizer.sparse]\ntype = \"" << sparse << "\"\nlr = 0.1\n";
    // The cost model would all-gather the embedding with 2 workers; keep it
    // on the shards so that the checkpoint has partition files.
    if (arch == "hybrid")
      f << "[ps]\nshards = 2\n" << ps_extra << "[[variable]]\nname = \"emb\"\npath = \"ps\"\n";
    f.close();
    RunResult r = Cli({"submit", path});
    EXPECT_EQ(r.exit_code, 0) << r.err;
    std::istringstream in(r.out);
    std::string line, last;
    while (std::getline(in, line))
      if (!line.empty()) last = line;
    return last;
  }

  nlohmann::json WaitFor(const std::string& id, const std::string& state) {
    nlohmann::json j;
    const auto deadline = Clock::now() + std::chrono::seconds(120);
    while (Clock::now() < deadline) {
      RunResult r = Cli({"status", id, "--json"});
      if (r.exit_code == 0) {
        j = nlohmann::json::parse(r.out)["jobs"][0];
        if (j["state"] == state) return j;
        if (j["state"] == "FAILED") break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    ADD_FAILURE() << "job " << id << " did not reach " << state << ": " << j.dump() << "\n"
                  << Log("coordinator.log") << Log("agent-a.log");
    return j;
  }

  testing::TempDir dir_;
  std::string address_;
  std::unique_ptr<testing::CoordinatorProcess> coordinator_;
  std::unique_ptr<ChildProcess> agent_;
};

TEST_F(ResumeTest, InterruptedRunResumesToTheSameModelAndExportsIt) {
  const std::string crashed = Submit("crashed", /*crash=*/true);
  ASSERT_FALSE(crashed.empty());
  nlohmann::json cj = WaitFor(crashed, "SUCCEEDED");
  EXPECT_EQ(cj["attempt"], 2) << cj.dump();
  const std::string clean = Submit("clean", /*crash=*/false);
  ASSERT_FALSE(clean.empty());
  nlohmann::json clj = WaitFor(clean, "SUCCEEDED");
  EXPECT_EQ(clj["attempt"], 1);

  // Both ranks of the resumed attempt say where they resumed; the model
  // equals the uninterrupted one bit for bit.
  for (int r = 0; r < 2; ++r) {
    Model a = ReadModel(dir_.File("crashed-rank" + std::to_string(r) + ".out"));
    Model b = ReadModel(dir_.File("clean-rank" + std::to_string(r) + ".out"));
    ASSERT_EQ(a["w"].size(), TinyModel::kDim) << "rank " << r;
    ASSERT_EQ(a["emb"].size(), TinyModel::kRows * TinyModel::kDim) << "rank " << r;
    EXPECT_EQ(a["resumed"], std::vector<float>{10.0f}) << "rank " << r;
    EXPECT_TRUE(b["resumed"].empty());
    EXPECT_EQ(a["w"], b["w"]) << "rank " << r;
    EXPECT_EQ(a["emb"], b["emb"]) << "rank " << r;
  }

  // keep_checkpoints = 2: steps 20 and 30 stay, 10 was pruned.
  const std::string job_dir = dir_.File("ckpt/job-" + crashed);
  EXPECT_FALSE(std::filesystem::exists(job_dir + "/step-10"));
  for (const char* step : {"step-20", "step-30"}) {
    for (const char* file : {"MANIFEST.json", "dense.pxck", "rank-0.state", "rank-1.state",
                             "var0-part0.pxps", "var0-part1.pxps"}) {
      EXPECT_TRUE(std::filesystem::exists(job_dir + "/" + step + "/" + file))
          << step << "/" << file;
    }
  }

  // Export of the newest checkpoint (step 30) = what the ranks ended with.
  const std::string out = dir_.File("export");
  // 7 rows at a time: the 100-row table is filled and streamed in chunks.
  RunResult e = Cli({"export", crashed, "--out", out, "--chunk-rows", "7"});
  ASSERT_EQ(e.exit_code, 0) << e.err;
  Model final_model = ReadModel(dir_.File("crashed-rank0.out"));
  std::vector<int64_t> shape;
  std::vector<float> data;
  ASSERT_TRUE(ReadNpy(out + "/emb.npy", &shape, &data));
  EXPECT_EQ(shape, (std::vector<int64_t>{TinyModel::kRows, TinyModel::kDim}));
  EXPECT_EQ(data, final_model["emb"]);
  ASSERT_TRUE(ReadNpy(out + "/w.npy", &shape, &data));
  EXPECT_EQ(shape, (std::vector<int64_t>{TinyModel::kDim}));
  EXPECT_EQ(data, final_model["w"]);
  nlohmann::json m = nlohmann::json::parse(testing::ReadWholeFile(out + "/manifest.json"));
  EXPECT_EQ(m["step"], 30);
  EXPECT_EQ(m["job"], std::stoll(crashed));
  ASSERT_EQ(m["variables"].size(), 2u);
  EXPECT_EQ(m["variables"][0]["name"], "emb");
  EXPECT_EQ(m["variables"][0]["path"], "ps");
  EXPECT_EQ(m["variables"][0]["dtype"], "float32");
  EXPECT_EQ(m["variables"][0]["file"], "emb.npy");
  EXPECT_EQ(m["variables"][1]["shape"], nlohmann::json::array({TinyModel::kDim}));

  // A pruned checkpoint cannot be exported; an older kept one can.
  RunResult pruned = Cli({"export", crashed, "--checkpoint", "10", "--out", dir_.File("x10")});
  EXPECT_EQ(pruned.exit_code, 1);
  EXPECT_NE(pruned.err.find("step-10"), std::string::npos) << pruned.err;
  // A corrupt newest checkpoint is skipped for the one before it.
  {
    std::fstream f(job_dir + "/step-30/dense.pxck",
                   std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(20);
    f.put('\x7f');
  }
  const std::string out20 = dir_.File("export20");
  RunResult e20 = Cli({"export", crashed, "--out", out20});
  ASSERT_EQ(e20.exit_code, 0) << e20.err;
  EXPECT_EQ(nlohmann::json::parse(testing::ReadWholeFile(out20 + "/manifest.json"))["step"], 20);
  RunResult e30 = Cli({"export", crashed, "--checkpoint", "30", "--out", dir_.File("x30")});
  EXPECT_EQ(e30.exit_code, 1);
  EXPECT_NE(e30.err.find("dense.pxck"), std::string::npos) << e30.err;

  // Metrics by path, counted at the transport: w (4 floats) is the only
  // all-reduced buffer, and both ranks share this host, so it is reduced
  // through shared memory and no all-reduce byte crosses a socket; the
  // embedding goes through the PS (push and pull both move bytes); nothing
  // is all-gathered.
  RunResult st = Cli({"status", clean, "--json"});
  ASSERT_EQ(st.exit_code, 0) << st.err;
  nlohmann::json metrics = nlohmann::json::parse(st.out)["jobs"][0]["metrics"];
  ASSERT_EQ(metrics.size(), 2u) << st.out;
  for (const auto& p : metrics) {
    const auto& v = p["values"];
    EXPECT_EQ(v["allreduce_sent_bytes"], 0.0) << p.dump();
    EXPECT_EQ(v["allreduce_recv_bytes"], 0.0) << p.dump();
    EXPECT_EQ(v["allgather_sent_bytes"], 0.0) << p.dump();
    EXPECT_GT(v["ps_push_sent_bytes"].get<double>(), 64.0) << p.dump();
    EXPECT_GT(v["ps_pull_recv_bytes"].get<double>(), 64.0) << p.dump();
    EXPECT_GE(v["compute_ms"].get<double>(), 0.0);
    EXPECT_EQ(v["steps"], 5.0) << p.dump();
  }
  RecordProperty("metrics", metrics.dump());
  RunResult text = Cli({"status", clean});
  RecordProperty("status_text", text.out);
  EXPECT_NE(text.out.find("PS PUSH S/R"), std::string::npos) << text.out;
}

// Under ssp the shards' clocks start over after a LOAD; every resumed rank
// tells them where it is, so the resumed attempt's pulls are not held
// forever. (ssp is not deterministic: only completion is checked.)
TEST_F(ResumeTest, SspJobResumesAndFinishes) {
  const std::string id =
      Submit("ssp", true, "hybrid", "sgd", "adagrad", "consistency = \"ssp\"\nstaleness = 2\n");
  ASSERT_FALSE(id.empty());
  EXPECT_EQ(WaitFor(id, "SUCCEEDED")["attempt"], 2);
  for (int r = 0; r < 2; ++r) {
    Model a = ReadModel(dir_.File("ssp-rank" + std::to_string(r) + ".out"));
    EXPECT_EQ(a["resumed"], std::vector<float>{10.0f}) << "rank " << r;
    EXPECT_EQ(a["emb"].size(), TinyModel::kRows * TinyModel::kDim) << "rank " << r;
  }
}

// The all-gather path keeps a replica of the table on every rank: rank 0
// writes it with the worker-side Adam and momentum state (per-row steps
// included) into dense.pxck, and every rank restores it.
TEST_F(ResumeTest, AllGatherWithAdamResumesToTheSameModel) {
  const std::string crashed = Submit("ag-crashed", true, "allgather", "momentum", "adam");
  ASSERT_FALSE(crashed.empty());
  EXPECT_EQ(WaitFor(crashed, "SUCCEEDED")["attempt"], 2);
  const std::string clean = Submit("ag-clean", false, "allgather", "momentum", "adam");
  ASSERT_FALSE(clean.empty());
  WaitFor(clean, "SUCCEEDED");
  for (int r = 0; r < 2; ++r) {
    Model a = ReadModel(dir_.File("ag-crashed-rank" + std::to_string(r) + ".out"));
    Model b = ReadModel(dir_.File("ag-clean-rank" + std::to_string(r) + ".out"));
    ASSERT_EQ(a["emb"].size(), TinyModel::kRows * TinyModel::kDim) << "rank " << r;
    EXPECT_EQ(a["resumed"], std::vector<float>{10.0f}) << "rank " << r;
    EXPECT_EQ(a["w"], b["w"]) << "rank " << r;
    EXPECT_EQ(a["emb"], b["emb"]) << "rank " << r;
  }
  const std::string out = dir_.File("ag-export");
  RunResult e = Cli({"export", crashed, "--out", out});
  ASSERT_EQ(e.exit_code, 0) << e.err;
  std::vector<int64_t> shape;
  std::vector<float> data;
  ASSERT_TRUE(ReadNpy(out + "/emb.npy", &shape, &data));
  EXPECT_EQ(data, ReadModel(dir_.File("ag-crashed-rank0.out"))["emb"]);
  EXPECT_EQ(
      nlohmann::json::parse(testing::ReadWholeFile(out + "/manifest.json"))["variables"][0]["path"],
      "allgather");
}

// Hot rows ([ps] hot_rows) are re-measured while the job trains: rank 0
// counts in how many of its steps each row appears (one step in 4) and
// stores the counts at every checkpoint; the resumed attempt's plan takes its
// hot rows from them (steps 0, 4 and 8, before the checkpoint of step 10),
// not from the 3
// batches sampled at start, and the coordinator records the changed hot set
// as a `replan` event. The hot rows hand their whole state back to the
// shards at each checkpoint and take it over at each start, so rows that
// cooled train on with the Adam state they had as hot rows, and rows that
// warmed with the state the shards kept: the model equals an uninterrupted
// run's (which keeps its first hot set).
TEST_F(ResumeTest, HotRowsResumeUnderAnotherHotSetToTheSameModel) {
  const std::string ps = "hot_rows = 16\n";
  const std::string crashed = Submit("hot-crashed", true, "hybrid", "momentum", "adam", "", ps);
  ASSERT_FALSE(crashed.empty());
  EXPECT_EQ(WaitFor(crashed, "SUCCEEDED")["attempt"], 2);
  const std::string clean = Submit("hot-clean", false, "hybrid", "momentum", "adam", "", ps);
  ASSERT_FALSE(clean.empty());
  WaitFor(clean, "SUCCEEDED");

  // The two attempts' plans made different rows hot, and kept some.
  auto coord = testing::ConnectToCoordinator(*coordinator_);
  ASSERT_TRUE(coord.ok()) << coord.status().ToString();
  std::vector<std::vector<int64_t>> hot;
  for (int attempt : {1, 2}) {
    std::string json;
    ASSERT_TRUE((*coord)
                    ->Call([&](rpc::CoordinatorClient& c) {
                      c.GetPlan(json, (*coord)->Header(), std::stoll(crashed), attempt, 0);
                    })
                    .ok());
    auto plan = plan::ParseJobPlan(json);
    ASSERT_TRUE(plan.ok()) << plan.status().ToString();
    hot.push_back(plan->variables[0].hot_rows);
    ASSERT_EQ(hot.back().size(), 16u) << json;
    EXPECT_EQ(plan->variables[0].reason.find("re-measured over steps 0-9 of attempt 1") != std::string::npos,
              attempt == 2)
        << plan->variables[0].reason;
  }
  std::vector<int64_t> a = hot[0], b = hot[1], kept;
  std::sort(a.begin(), a.end());
  std::sort(b.begin(), b.end());
  std::set_intersection(a.begin(), a.end(), b.begin(), b.end(), std::back_inserter(kept));
  RecordProperty("hot_rows_kept", std::to_string(kept.size()) + " of 16");
  EXPECT_LT(kept.size(), 16u) << "the resumed attempt's plan must change the hot set";
  // Attempt 2's are the 16 rows in most of rank 0's batches of steps 0-9
  // that it counted (one in 4: 0, 4, 8).
  std::map<int64_t, int> steps_of;
  for (int64_t step = 0; step < 10; step += 4) {
    std::vector<int64_t> ids = TinyModel::MakeBatch(step, 0, 32).ids;
    std::sort(ids.begin(), ids.end());
    ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
    for (int64_t id : ids) ++steps_of[id];
  }
  std::vector<int> counts;
  for (const auto& [id, c] : steps_of) counts.push_back(c);
  std::sort(counts.rbegin(), counts.rend());
  ASSERT_GE(counts.size(), 16u);
  const int last = counts[15];
  for (int64_t id : b) EXPECT_GE(steps_of[id], last) << "row " << id << " is not among the most present";
  for (const auto& [id, c] : steps_of) {
    if (c > last) {
      EXPECT_TRUE(std::binary_search(b.begin(), b.end(), id)) << "row " << id << " in " << c << " steps";
    }
  }
  RunResult events = Cli({"events", crashed});
  ASSERT_EQ(events.exit_code, 0) << events.err;
  EXPECT_NE(events.out.find("attempt 2 changed its hot rows: \"emb\" 16 -> 16"), std::string::npos)
      << events.out;

  for (int r = 0; r < 2; ++r) {
    Model got = ReadModel(dir_.File("hot-crashed-rank" + std::to_string(r) + ".out"));
    Model want = ReadModel(dir_.File("hot-clean-rank" + std::to_string(r) + ".out"));
    ASSERT_EQ(got["emb"].size(), TinyModel::kRows * TinyModel::kDim) << "rank " << r;
    EXPECT_EQ(got["resumed"], std::vector<float>{10.0f}) << "rank " << r;
    const double demb = testing::RelativeDifference(got["emb"], want["emb"]);
    const double dw = testing::RelativeDifference(got["w"], want["w"]);
    std::ostringstream diffs;
    diffs << std::scientific << "emb " << demb << " w " << dw;
    RecordProperty("rank" + std::to_string(r) + "_relative_difference", diffs.str());
    EXPECT_LT(demb, 1e-5) << "rank " << r;
    EXPECT_LT(dw, 1e-5) << "rank " << r;
  }
}

// In-process ranks (one here) under a real coordinator and no agent: a
// committed checkpoint whose files no longer match its manifest is skipped
// for the one before it, and training from there ends where the first run
// ended.
class CheckpointFallbackTest : public ::testing::Test {
 protected:
  void SetUp() override {
    coordinator_ = std::make_unique<testing::CoordinatorProcess>(kBin, dir_.path());
    ASSERT_TRUE(coordinator_->ok()) << coordinator_->error();
    address_ = coordinator_->address();
  }

  SessionOptions Options(int64_t job, int attempt) {
    SessionOptions o;
    o.job_id = job;
    o.attempt = attempt;
    o.coordinator = address_;
    o.config.job.arch = Arch::kAllGather;
    o.config.dense_optimizer.type = OptimizerType::kMomentum;
    o.config.dense_optimizer.lr = 0.1;
    o.config.sparse_optimizer.type = OptimizerType::kAdagrad;
    o.config.sparse_optimizer.lr = 0.1;
    o.config.trainer.checkpoint_dir = dir_.File("ckpt");
    o.config.trainer.checkpoint_every = 5;
    o.config.trainer.keep_checkpoints = 10;
    return o;
  }

  // Trains until step 20; returns w and emb after it.
  void Train(const SessionOptions& o, std::optional<int64_t>* resumed, int64_t* first_position,
             Model* out) {
    auto session = Session::Create(o);
    ASSERT_TRUE(session.ok()) << session.status().ToString();
    int emb = -1, w = -1;
    ASSERT_TRUE(testing::RegisterTiny(session->get(), &emb, &w).ok());
    testing::TinyReader reader;
    ASSERT_TRUE(testing::RegisterTinyReader(session->get(), &reader).ok());
    Status started = (*session)->Start();
    ASSERT_TRUE(started.ok()) << started.ToString();
    *resumed = (*session)->resumed_from();
    *first_position = reader.position;
    Status trained = testing::TrainTiny(session->get(), emb, w, 20, 16, false, &reader);
    ASSERT_TRUE(trained.ok()) << trained.ToString();
    auto wv = (*session)->Dense(w);
    ASSERT_TRUE(wv.ok());
    (*out)["w"].assign(wv->begin(), wv->end());
    ASSERT_TRUE((*session)->ReadSparse(emb, 0, TinyModel::kRows, &(*out)["emb"]).ok());
  }

  testing::TempDir dir_;
  std::string address_;
  std::unique_ptr<testing::CoordinatorProcess> coordinator_;
};

TEST_F(CheckpointFallbackTest, ResumeSkipsACorruptNewestCheckpoint) {
  CoordinatorClientOptions co;
  co.address = address_;
  auto coord = CoordinatorClient::Connect(co);
  ASSERT_TRUE(coord.ok()) << coord.status().ToString();
  // A job no agent runs: the ranks are this test's sessions.
  auto job = (*coord)->SubmitJob(
      "[job]\nname = \"fallback\"\n[trainer]\ncommand = [\"./none\"]\n", dir_.File("j.toml"));
  ASSERT_TRUE(job.ok()) << job.status().ToString();

  std::optional<int64_t> resumed;
  int64_t position = -1;
  Model first, second;
  ASSERT_NO_FATAL_FAILURE(Train(Options(job->id, 1), &resumed, &position, &first));
  EXPECT_FALSE(resumed.has_value());
  EXPECT_EQ(position, 0);

  // Step 20 is committed, but one byte of its rank state changed.
  const std::string step20 = dir_.File("ckpt/job-" + std::to_string(job->id) + "/step-20");
  {
    std::fstream f(step20 + "/rank-0.state", std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(-1, std::ios::end);
    f.put('9');
  }
  ASSERT_NO_FATAL_FAILURE(Train(Options(job->id, 2), &resumed, &position, &second));
  EXPECT_EQ(resumed, std::optional<int64_t>(15));
  EXPECT_EQ(position, 15);  // the reader's position came back with it
  EXPECT_EQ(second["w"], first["w"]);
  EXPECT_EQ(second["emb"], first["emb"]);
}

}  // namespace
}  // namespace parallax
