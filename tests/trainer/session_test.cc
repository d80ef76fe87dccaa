// One-rank sessions without a coordinator (the plan is computed locally):
// the training paths that need no peers equal the core/optim reference, and
// bad input gets a Status that names what is wrong.
#include "parallax/session.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <cmath>
#include <fstream>
#include <limits>

#include "tests/testing/temp_dir.h"
#include "tests/trainer/tiny_trainer.h"

namespace parallax {
namespace {

using testing::TinyModel;

class SessionTest : public ::testing::Test {
 protected:
  static SessionOptions Options(const std::string& arch) {
    SessionOptions o;
    o.config.job.arch = *ParseArch(arch);
    o.config.dense_optimizer.type = OptimizerType::kSgd;
    o.config.dense_optimizer.lr = 0.1;
    o.config.sparse_optimizer.type = OptimizerType::kAdagrad;
    o.config.sparse_optimizer.lr = 0.1;
    o.config.sparse_optimizer.initial_accumulator = 0.1;
    return o;
  }
  static OptimizerSettings Spec(OptimizerType type, float lr, float acc = 0) {
    OptimizerSettings s;
    s.type = type;
    s.lr = lr;
    s.initial_accumulator = acc;
    return s;
  }
  // Trains the tiny model for `steps` steps of batch 64 on one rank.
  static void TrainAndCompare(const SessionOptions& o, VariablePath want_emb_path) {
    auto session = Session::Create(o);
    ASSERT_TRUE(session.ok()) << session.status().ToString();
    int emb = -1, w = -1;
    ASSERT_TRUE(testing::RegisterTiny(session->get(), &emb, &w).ok());
    Status started = (*session)->Start();
    ASSERT_TRUE(started.ok()) << started.ToString();
    auto path = (*session)->PathOf(emb);
    ASSERT_TRUE(path.ok());
    EXPECT_EQ(*path, want_emb_path);
    Status trained = testing::TrainTiny(session->get(), emb, w, 30, 64, /*prefetch=*/true);
    ASSERT_TRUE(trained.ok()) << trained.ToString();
    EXPECT_EQ((*session)->step(), 30);
    testing::TinyResult ref =
        testing::TrainTinyReference(Spec(OptimizerType::kSgd, 0.1f),
                                    Spec(OptimizerType::kAdagrad, 0.1f, 0.1f), 30, 64);
    auto wv = (*session)->Dense(w);
    ASSERT_TRUE(wv.ok());
    std::vector<float> table;
    ASSERT_TRUE((*session)->ReadSparse(emb, 0, TinyModel::kRows, &table).ok());
    EXPECT_LT(testing::RelativeDifference({wv->begin(), wv->end()}, ref.w), 1e-5);
    EXPECT_LT(testing::RelativeDifference(table, ref.emb), 1e-5);
    // Training moved the variables, and a different batch size gives a
    // different result: the comparison is not trivially true.
    EXPECT_GT(testing::RelativeDifference(ref.w, InitialDenseValues(testing::WInit(), 1, 4)), 1e-3);
    testing::TinyResult half =
        testing::TrainTinyReference(Spec(OptimizerType::kSgd, 0.1f),
                                    Spec(OptimizerType::kAdagrad, 0.1f, 0.1f), 30, 32);
    EXPECT_GT(testing::RelativeDifference(half.w, ref.w), 1e-4);
    EXPECT_GT(testing::RelativeDifference(half.emb, ref.emb), 1e-4);
  }
};

TEST_F(SessionTest, OneRankAllReduceEqualsReference) {
  TrainAndCompare(Options("allreduce"), VariablePath::kAllReduce);
}

// Without a coordinator a checkpoint is written but never committed, and
// nothing is resumed. RegisterState refuses a name twice and after Start().
TEST_F(SessionTest, OneRankWritesCheckpointFilesAndRegistersStateOnce) {
  parallax::testing::TempDir dir;
  SessionOptions o = Options("allgather");
  o.job_id = 5;
  o.config.trainer.checkpoint_dir = dir.path();
  o.config.trainer.checkpoint_every = 2;
  auto session = Session::Create(o);
  ASSERT_TRUE(session.ok()) << session.status().ToString();
  int emb = -1, w = -1;
  ASSERT_TRUE(testing::RegisterTiny(session->get(), &emb, &w).ok());
  testing::TinyReader reader;
  ASSERT_TRUE(testing::RegisterTinyReader(session->get(), &reader).ok());
  EXPECT_EQ(testing::RegisterTinyReader(session->get(), &reader).code(), StatusCode::kAlreadyExists);
  ASSERT_TRUE((*session)->Start().ok());
  EXPECT_FALSE((*session)->resumed_from().has_value());
  EXPECT_EQ(testing::RegisterTinyReader(session->get(), &reader).code(),
            StatusCode::kFailedPrecondition);
  ASSERT_TRUE(testing::TrainTiny(session->get(), emb, w, 3, 8, false, &reader).ok());
  EXPECT_EQ(reader.position, 3);
  const std::string step2 = dir.path() + "/job-5/step-2/";
  for (const char* f : {"MANIFEST.json", "dense.pxck", "rank-0.state"}) {
    EXPECT_TRUE(std::ifstream(step2 + f).good()) << f;
  }
  EXPECT_FALSE(std::ifstream(dir.path() + "/job-5/step-3/MANIFEST.json").good());
}

// The job's last step is checkpointed even off the checkpoint_every grid:
// a 7-step job with checkpoint_every = 3 ends with step 7, which export finds.
TEST_F(SessionTest, TheLastStepOfTheJobIsCheckpointed) {
  parallax::testing::TempDir dir;
  SessionOptions o = Options("allgather");
  o.job_id = 6;
  o.config.trainer.checkpoint_dir = dir.path();
  o.config.trainer.checkpoint_every = 3;
  o.config.trainer.steps = 7;
  auto session = Session::Create(o);
  ASSERT_TRUE(session.ok()) << session.status().ToString();
  int emb = -1, w = -1;
  ASSERT_TRUE(testing::RegisterTiny(session->get(), &emb, &w).ok());
  ASSERT_TRUE((*session)->Start().ok());
  ASSERT_TRUE(testing::TrainTiny(session->get(), emb, w, 7, 8, false).ok());
  for (int step : {3, 6, 7}) {
    EXPECT_TRUE(std::ifstream(dir.path() + "/job-6/step-" + std::to_string(step) + "/MANIFEST.json")
                    .good())
        << step;
  }
  EXPECT_FALSE(std::ifstream(dir.path() + "/job-6/step-5/MANIFEST.json").good());
}

TEST_F(SessionTest, OneRankAllGatherEqualsReference) {
  TrainAndCompare(Options("allgather"), VariablePath::kAllGather);
}

TEST_F(SessionTest, HybridWithoutShardsKeepsSparseOnWorkers) {
  TrainAndCompare(Options("hybrid"), VariablePath::kAllGather);
}

TEST_F(SessionTest, RejectsDuplicateVariable) {
  auto s = Session::Create(Options("hybrid"));
  ASSERT_TRUE(s.ok());
  ASSERT_TRUE((*s)->RegisterDense("w", 4).ok());
  auto again = (*s)->RegisterSparse("w", 10, 2);
  EXPECT_EQ(again.status().code(), StatusCode::kAlreadyExists);
  EXPECT_NE(again.status().message().find("\"w\""), std::string::npos);
  EXPECT_EQ((*s)->RegisterDense("z", 0).status().code(), StatusCode::kInvalidArgument);
  VariableOptions two_values;
  two_values.initial_values = {1, 2};
  EXPECT_EQ((*s)->RegisterDense("v", 3, two_values).status().code(), StatusCode::kInvalidArgument);
  VariableOptions bad;
  bad.optimizer = OptimizerSettings();
  bad.optimizer->momentum = 1.5f;
  auto opt = (*s)->RegisterDense("u", 3, bad);
  EXPECT_EQ(opt.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(opt.status().message().find("momentum"), std::string::npos);
  EXPECT_NE(opt.status().message().find("\"u\""), std::string::npos);
}

TEST_F(SessionTest, RejectsIdsOutsideTheTableAndRepeatedDenseGradient) {
  auto s = Session::Create(Options("allgather"));
  ASSERT_TRUE(s.ok());
  int emb = *(*s)->RegisterSparse("emb", 10, 2);
  VariableOptions values;
  values.initial_values = {1, 2};
  int w = *(*s)->RegisterDense("w", 2, values);
  ASSERT_TRUE((*s)->Start().ok());
  std::vector<float> rows;
  std::vector<int64_t> bad = {3, 10};
  Status st = (*s)->Lookup(emb, bad, &rows);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("id 10"), std::string::npos) << st.message();
  EXPECT_NE(st.message().find("\"emb\""), std::string::npos) << st.message();
  std::vector<float> g(4, 1.0f);
  EXPECT_EQ((*s)->Gradient(emb, bad, g).code(), StatusCode::kInvalidArgument);
  std::vector<float> dw = {1, 1};
  ASSERT_TRUE((*s)->Gradient(w, dw).ok());
  EXPECT_EQ((*s)->Gradient(w, dw).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ((*s)->Gradient(emb, dw).code(), StatusCode::kInvalidArgument);  // dense call on sparse
  std::vector<float> nan_rows = {0, std::nanf("")};
  Status nan = (*s)->Gradient(emb, std::vector<int64_t>{1}, nan_rows);
  EXPECT_EQ(nan.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(nan.message().find("step 0: gradient of \"emb\" has NaN"), std::string::npos)
      << nan.message();
  // Bad input does not break the session.
  ASSERT_TRUE((*s)->Step().ok());
  auto wv = (*s)->Dense(w);
  ASSERT_TRUE(wv.ok());
  EXPECT_FLOAT_EQ((*wv)[0], 1.0f - 0.1f);  // sgd lr 0.1
}

TEST_F(SessionTest, NanLossNamesTheStep) {
  auto s = Session::Create(Options("hybrid"));
  ASSERT_TRUE(s.ok());
  ASSERT_TRUE((*s)->ReportMetrics(6, 0.5, 32).ok());
  Status st = (*s)->ReportMetrics(7, std::nan(""), 32);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("NaN at step 7"), std::string::npos) << st.message();
}

TEST_F(SessionTest, LearningRateChangesFromThisStepOn) {
  auto s = Session::Create(Options("allgather"));
  ASSERT_TRUE(s.ok());
  VariableOptions zeros;
  zeros.init.type = Initializer::Type::kZeros;
  auto w = (*s)->RegisterDense("w", 1, zeros);
  auto emb = (*s)->RegisterSparse("emb", 4, 1, zeros);
  ASSERT_TRUE(w.ok() && emb.ok());
  EXPECT_EQ((*s)->SetLearningRate(*w, 0.5).code(), StatusCode::kFailedPrecondition);  // not started
  ASSERT_TRUE((*s)->Start().ok());
  const std::vector<float> one = {1.0f};
  const std::vector<int64_t> id = {2};
  auto step = [&] {
    ASSERT_TRUE((*s)->Gradient(*w, one).ok());
    ASSERT_TRUE((*s)->Gradient(*emb, id, one).ok());
    ASSERT_TRUE((*s)->Step().ok());
  };
  step();  // sgd 0.1; adagrad 0.1 with accumulator 0.1 + 1
  ASSERT_TRUE((*s)->SetLearningRate(*w, 0.5).ok());
  ASSERT_TRUE((*s)->SetLearningRate(*emb, 1.0).ok());
  step();
  EXPECT_FLOAT_EQ((*(*s)->Dense(*w))[0], -0.1f - 0.5f);
  std::vector<float> row;
  ASSERT_TRUE((*s)->ReadSparse(*emb, 2, 1, &row).ok());
  const float first = 0.1f / (std::sqrt(1.1f) + 1e-8f), second = 1.0f / (std::sqrt(2.1f) + 1e-8f);
  EXPECT_NEAR(row[0], -first - second, 1e-6);
  for (double bad : {0.0, -1.0, std::nan(""), std::numeric_limits<double>::infinity()}) {
    Status st = (*s)->SetLearningRate(*w, bad);
    EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << bad;
    EXPECT_NE(st.message().find("\"w\""), std::string::npos) << st.message();
  }
  EXPECT_EQ((*s)->SetLearningRate(7, 0.1).code(), StatusCode::kNotFound);
}

TEST_F(SessionTest, DeviceGradientRefusesHostMemory) {
  auto s = Session::Create(Options("allreduce"));
  ASSERT_TRUE(s.ok());
  auto w = (*s)->RegisterDense("w", 4);
  ASSERT_TRUE(w.ok());
  ASSERT_TRUE((*s)->Start().ok());
  std::vector<float> host(4, 1.0f);
  Status st = (*s)->GradientDevice(*w, host.data(), host.size());
  EXPECT_EQ(st.code(), StatusCode::kFailedPrecondition) << st.ToString();
  EXPECT_NE(st.message().find("\"w\""), std::string::npos) << st.message();
  // Nothing was taken: the host gradient still goes in.
  EXPECT_TRUE((*s)->Gradient(*w, host).ok());
  EXPECT_EQ((*s)->GradientDevice(*w, host.data(), 3).code(), StatusCode::kInvalidArgument);
}

TEST_F(SessionTest, RejectsOptionsItCannotServe) {
  SessionOptions o = Options("hybrid");
  o.world_size = 2;
  EXPECT_EQ(Session::Create(o).status().code(), StatusCode::kInvalidArgument);  // no coordinator
  auto s = Session::Create(Options("ps"));
  ASSERT_TRUE(s.ok());
  ASSERT_TRUE((*s)->RegisterSparse("emb", 10, 2).ok());
  Status st = (*s)->Start();
  EXPECT_EQ(st.code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(st.message().find("shards"), std::string::npos) << st.message();
  std::vector<float> rows;
  EXPECT_EQ((*s)->Lookup(0, std::vector<int64_t>{1}, &rows).code(),
            StatusCode::kFailedPrecondition);
}

class SessionOptionsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    for (const char* name : kVars) unsetenv(name);
  }
  void TearDown() override {
    for (const char* name : kVars) unsetenv(name);
  }
  static constexpr const char* kVars[] = {
      "PARALLAX_JOB_ID",     "PARALLAX_ATTEMPT",    "PARALLAX_RANK",
      "PARALLAX_WORLD_SIZE", "PARALLAX_NUM_SHARDS", "PARALLAX_COORDINATOR",
      "PARALLAX_BIND_ADDR",  "PARALLAX_TOKEN",      "PARALLAX_JOB_FILE",
      "PARALLAX_JOB_SOURCE"};
  testing::TempDir dir_;
};

TEST_F(SessionOptionsTest, ReadsTaskEnvironmentAndJobFile) {
  const std::string job = dir_.File("job.toml");
  std::ofstream(job) << "[job]\nname = \"t\"\nworkers = 2\narch = \"allgather\"\n"
                        "[trainer]\ncommand = [\"./t\"]\n"
                        "checkpoint_dir = \"/ckpt\"\ncheckpoint_every = 4\n"
                        "keep_checkpoints = 2\nmetrics_every = 3\n"
                        "[optimizer.sparse]\ntype = \"adagrad\"\nlr = 0.5\n";
  setenv("PARALLAX_JOB_ID", "12", 1);
  setenv("PARALLAX_ATTEMPT", "3", 1);
  setenv("PARALLAX_RANK", "1", 1);
  setenv("PARALLAX_WORLD_SIZE", "2", 1);
  setenv("PARALLAX_NUM_SHARDS", "4", 1);
  setenv("PARALLAX_COORDINATOR", "127.0.0.1:7070", 1);
  setenv("PARALLAX_BIND_ADDR", "10.0.0.5", 1);
  setenv("PARALLAX_JOB_FILE", job.c_str(), 1);
  auto o = SessionOptions::FromEnvironment();
  ASSERT_TRUE(o.ok()) << o.status().ToString();
  EXPECT_EQ(o->job_id, 12);
  EXPECT_EQ(o->attempt, 3);
  EXPECT_EQ(o->rank, 1);
  EXPECT_EQ(o->world_size, 2);
  EXPECT_EQ(o->num_shards, 4);
  EXPECT_EQ(o->coordinator, "127.0.0.1:7070");
  EXPECT_EQ(o->bind_address, "10.0.0.5");
  EXPECT_EQ(o->config.job.arch, Arch::kAllGather);
  EXPECT_EQ(o->config.sparse_optimizer.type, OptimizerType::kAdagrad);
  EXPECT_DOUBLE_EQ(o->config.sparse_optimizer.lr, 0.5);
  ASSERT_TRUE(o->has_job_file());
  EXPECT_EQ(o->config.job.name, "t");
  EXPECT_EQ(o->config.trainer.checkpoint_dir, "/ckpt");
  EXPECT_EQ(o->config.trainer.checkpoint_every, 4);
  EXPECT_EQ(o->config.trainer.keep_checkpoints, 2);
  EXPECT_EQ(o->config.trainer.metrics_every, 3);
}

// The agent's copy of the job file lives in the task directory; relative
// paths resolve against the directory the job was submitted from.
TEST_F(SessionOptionsTest, RelativePathsResolveAgainstTheSubmittedFile) {
  const std::string copy = dir_.File("job.toml");
  std::ofstream(copy) << "[job]\nname = \"t\"\n[trainer]\nmodel = \"lm\"\n"
                         "[model]\ndata = \"../data/brown/train.tok\"\n";
  setenv("PARALLAX_JOB_FILE", copy.c_str(), 1);
  auto plain = SessionOptions::FromEnvironment();
  ASSERT_TRUE(plain.ok()) << plain.status().ToString();
  setenv("PARALLAX_JOB_SOURCE", "/home/u/parallax/examples/brown-lm.toml", 1);
  auto o = SessionOptions::FromEnvironment();
  ASSERT_TRUE(o.ok()) << o.status().ToString();
  EXPECT_NE(o->config.model_toml.find("/home/u/parallax/data/brown/train.tok"),
            std::string::npos)
      << o->config.model_toml;
  EXPECT_EQ(plain->config.model_toml.find("/home/u/parallax"), std::string::npos);
}

TEST_F(SessionOptionsTest, NamesTheMalformedVariable) {
  setenv("PARALLAX_RANK", "one", 1);
  auto o = SessionOptions::FromEnvironment();
  EXPECT_EQ(o.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(o.status().message().find("PARALLAX_RANK"), std::string::npos);
  setenv("PARALLAX_RANK", "2", 1);
  setenv("PARALLAX_WORLD_SIZE", "2", 1);
  EXPECT_EQ(SessionOptions::FromEnvironment().status().code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace parallax
