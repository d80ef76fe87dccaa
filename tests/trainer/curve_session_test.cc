// The Session API over a CURVE-protected PS: a real parallax-coordinator with
// a secret file and a real parallax-ps started with PARALLAX_TOKEN (so its
// socket is a CURVE server admitting only published client keys). One
// in-process rank trains the tiny model (async, arch "ps") and must match the
// one-process reference, as it does without CURVE. A job with
// `[ps] curve = false` trains over plain sockets on the same secured cluster.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <sstream>

#include "core/config/job_config.h"
#include "core/rpc/coordinator_client.h"
#include "tests/testing/build_paths.h"
#include "tests/testing/coordinator_connect.h"
#include "tests/testing/coordinator_process.h"
#include "tests/testing/subprocess.h"
#include "tests/testing/temp_dir.h"
#include "tests/trainer/tiny_trainer.h"

namespace parallax {
namespace {

using testing::ChildProcess;
using testing::TinyModel;

constexpr char kSecret[] = "curve-session-secret";
constexpr int kSteps = 30;
constexpr int kBatch = 64;

std::string BinDir() { return testing::BinDirOr(::parallax::testing::BuildBinDir()); }

// Trains with a secured coordinator; `ps_section` is appended to the job file.
// Returns the shard's log.
std::string TrainOverSecuredPs(const std::string& ps_section) {
  parallax::testing::TempDir dir;
  const std::string secret_file = dir.File("secret");
  std::ofstream(secret_file) << kSecret << "\n";
  chmod(secret_file.c_str(), 0600);
  testing::CoordinatorProcessOptions options;
  options.extra_args = {"--secret-file", secret_file};
  testing::CoordinatorProcess coordinator(BinDir(), dir.path(), options);
  EXPECT_TRUE(coordinator.ok()) << coordinator.error();
  if (!coordinator.ok()) return "";
  const std::string port = coordinator.port_text();
  CoordinatorClientOptions co;
  co.auth_token = kSecret;
  auto coord = testing::ConnectToCoordinator(coordinator, co);
  EXPECT_TRUE(coord.ok()) << coord.status().ToString();
  if (!coord.ok()) return "";
  const std::string job_file = dir.File("job.toml");
  const std::string text =
      "[job]\nname = \"curve\"\nworkers = 1\narch = \"ps\"\nconsistency = \"async\"\n"
      "[trainer]\ncommand = [\"./x\"]\n[optimizer.dense]\ntype = \"sgd\"\nlr = 0.1\n"
      "[optimizer.sparse]\ntype = \"adagrad\"\nlr = 0.1\n[ps]\nshards = 1\n" + ps_section;
  std::ofstream(job_file) << text;
  auto job = (*coord)->SubmitJob(text, job_file);
  EXPECT_TRUE(job.ok()) << job.status().ToString();
  if (!job.ok()) return "";

  ChildProcess shard({BinDir() + "/parallax-ps"}, dir.File("shard.log"),
                     {"PARALLAX_JOB_ID=" + std::to_string(job->id), "PARALLAX_ATTEMPT=1",
                      "PARALLAX_WORLD_SIZE=1", "PARALLAX_NUM_SHARDS=1", "PARALLAX_SHARD=0",
                      "PARALLAX_ROLE=ps", "PARALLAX_COORDINATOR=127.0.0.1:" + port,
                      "PARALLAX_BIND_ADDR=127.0.0.1", "PARALLAX_JOB_FILE=" + job_file,
                      std::string("PARALLAX_TOKEN=") + kSecret});
  SessionOptions o;
  o.job_id = job->id;
  o.coordinator = "127.0.0.1:" + port;
  o.token = kSecret;
  o.num_shards = 1;
  o.config.job.arch = Arch::kPs;
  o.config.job.consistency = Consistency::kAsync;
  o.config.dense_optimizer.type = OptimizerType::kSgd;
  o.config.dense_optimizer.lr = 0.1;
  o.config.sparse_optimizer.type = OptimizerType::kAdagrad;
  o.config.sparse_optimizer.lr = 0.1;
  o.plan_timeout = o.rendezvous_timeout = o.step_timeout = std::chrono::milliseconds(30'000);
  JobLoadOptions load;
  load.check_paths = false;
  auto config = LoadJobConfig(job_file, load);  // as SessionOptions::FromEnvironment does
  EXPECT_TRUE(config.ok()) << config.status().ToString();
  if (!config.ok()) return "";
  o.config.ps.curve = config->ps.curve;
  auto session = Session::Create(o);
  EXPECT_TRUE(session.ok()) << session.status().ToString();
  if (!session.ok()) return "";
  int emb = -1, w = -1;
  EXPECT_TRUE(testing::RegisterTiny(session->get(), &emb, &w).ok());
  Status started = (*session)->Start();
  EXPECT_TRUE(started.ok()) << started.ToString() << testing::ReadWholeFile(dir.File("shard.log"));
  if (!started.ok()) return "";
  Status trained = testing::TrainTiny(session->get(), emb, w, kSteps, kBatch, false);
  EXPECT_TRUE(trained.ok()) << trained.ToString();
  OptimizerSettings sgd, adagrad;
  sgd.lr = adagrad.lr = 0.1f;
  adagrad.type = OptimizerType::kAdagrad;
  adagrad.initial_accumulator = 0.1f;
  testing::TinyResult ref = testing::TrainTinyReference(sgd, adagrad, kSteps, kBatch);
  auto wv = (*session)->Dense(w);
  std::vector<float> table;
  EXPECT_TRUE((*session)->ReadSparse(emb, 0, TinyModel::kRows, &table).ok());
  EXPECT_TRUE(wv.ok());
  if (wv.ok()) {
    EXPECT_LT(testing::RelativeDifference({wv->begin(), wv->end()}, ref.w), 1e-5);
  }
  EXPECT_LT(testing::RelativeDifference(table, ref.emb), 1e-5);
  session->reset();
  shard.Signal(SIGTERM);
  EXPECT_NE(shard.Wait(10'000), -1);
  return testing::ReadWholeFile(dir.File("shard.log"));
}

TEST(CurveSessionTest, AsyncPsTrainingOverCurveMatchesTheReference) {
  std::string log = TrainOverSecuredPs("");
  EXPECT_NE(log.find("with CURVE"), std::string::npos) << log;
}

TEST(CurveSessionTest, ACurveFalseJobTrainsOverPlainSockets) {
  std::string log = TrainOverSecuredPs("curve = false\n");
  EXPECT_NE(log.find("serving on"), std::string::npos) << log;
  EXPECT_EQ(log.find("with CURVE"), std::string::npos) << log;
}

}  // namespace
}  // namespace parallax
