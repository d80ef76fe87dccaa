// The built-in models train to known targets on small synthetic data, in
// process: one rank, a real Session without a coordinator (sparse variables
// all-gathered into a local replica, dense all-reduced, as on one rank).
//   lm: held-out perplexity <= half the unigram model's on a Markov chain;
//   mlp: held-out accuracy within 0.03 of the Bayes accuracy;
//   ctr: held-out AUC within 0.03 of the generator's Bayes AUC.
#include <gtest/gtest.h>

#include <sstream>

#include "tests/trainer/models/synthetic_data.h"
#include "trainer/models/layers.h"
#include "trainer/models/model.h"
#include "trainer/models/train_loop.h"

namespace parallax::models {
namespace {

class ConvergenceTest : public ::testing::Test {
 protected:
  // Trains `model` for `steps` steps on a one-rank session and evaluates.
  static EvalStats Train(Model* model, const OptimizerSettings& dense, const OptimizerSettings& sparse,
                         int64_t steps) {
    SessionOptions o;
    o.config.job.arch = Arch::kHybrid;
    o.config.dense_optimizer = dense;
    o.config.sparse_optimizer = sparse;
    auto session = Session::Create(o);
    EXPECT_TRUE(session.ok()) << session.status().ToString();
    if (!session.ok()) return {};
    Status st = model->Register(session->get());
    EXPECT_TRUE(st.ok()) << st.ToString();
    st = (*session)->Start();
    EXPECT_TRUE(st.ok()) << st.ToString();
    TrainLoopOptions loop;
    loop.steps = steps;
    std::ostringstream log;
    auto r = RunTrainLoop(session->get(), model, loop, log);
    EXPECT_TRUE(r.ok()) << r.status().ToString() << "\n" << log.str();
    if (!r.ok()) return {};
    EXPECT_EQ((*session)->step(), steps);
    EXPECT_TRUE(r->evaluated);
    RecordProperty("log", log.str());
    return r->eval;
  }
  static OptimizerSettings Sgd(double lr) {
    OptimizerSettings c;
    c.type = OptimizerType::kSgd;
    c.lr = lr;
    return c;
  }
};

TEST_F(ConvergenceTest, LmBeatsHalfTheUnigramPerplexity) {
  constexpr uint32_t kVocab = 200;
  std::vector<uint32_t> tokens = testing::MarkovTokens(kVocab, 44'000, 11);
  std::vector<uint32_t> heldout(tokens.end() - 4'000, tokens.end());
  tokens.resize(40'000);
  for (const char* mode : {"mean", "concat"}) {
    SCOPED_TRACE(mode);
    ModelOptions mo;
    mo.batch_size = 64;
    mo.steps = 3000;
    auto model = CreateModel("lm",
                             std::string("vocab = 200\ndim = 32\ncontext = 2\nhidden = 64\n"
                                         "negatives = 8\neval_tokens = 3000\ncontext_mode = \"") +
                                 mode + "\"\n",
                             mo);
    ASSERT_TRUE(model.ok()) << model.status().ToString();
    ModelData d;
    d.counts = testing::Counts(tokens, kVocab);
    d.heldout_tokens = heldout;
    d.tokens = std::make_unique<testing::MemoryTokenSource>(tokens, 2, 0, 1, 1);
    ASSERT_TRUE((*model)->SetData(std::move(d)).ok());
    EvalStats e = Train(model->get(), Sgd(0.5), Sgd(0.5), mo.steps);
    EXPECT_EQ(e.metric, "perplexity");
    EXPECT_GT(e.baseline, 50.0);  // the unigram model is poor on this chain
    EXPECT_LE(e.value, 0.5 * e.baseline);
    RecordProperty(std::string(mode) + "_perplexity", std::to_string(e.value));
    RecordProperty(std::string(mode) + "_unigram_perplexity", std::to_string(e.baseline));
  }
}

TEST_F(ConvergenceTest, MlpReachesTheBayesAccuracy) {
  ModelOptions mo;
  mo.batch_size = 256;
  mo.steps = 3000;
  auto model = CreateModel("mlp", "features = 8\nclasses = 4\nhidden = [64]\nlabel_noise = 0.1\n"
                           "eval_examples = 5000\n", mo);
  ASSERT_TRUE(model.ok()) << model.status().ToString();
  EvalStats e = Train(model->get(), Sgd(0.1), Sgd(0.1), mo.steps);
  EXPECT_EQ(e.metric, "accuracy");
  EXPECT_NEAR(e.baseline, 0.925, 1e-9);
  EXPECT_GE(e.value, e.baseline - 0.03);
  RecordProperty("accuracy", std::to_string(e.value));
}

TEST_F(ConvergenceTest, CtrReachesTheBayesAuc) {
  const int kTables = 26, kDense = 13;
  testing::CtrTruth truth(kTables, kDense, 20, 5);
  CtrBatch train, heldout;
  std::vector<float> p_train, p_heldout;
  truth.Draw(60'000, 1, &train, &p_train);
  truth.Draw(10'000, 2, &heldout, &p_heldout);
  const double bayes = Auc(p_heldout, heldout.labels);
  ModelOptions mo;
  mo.batch_size = 128;
  mo.steps = 1400;
  std::string tables = "tables = [20";
  for (int f = 1; f < kTables; ++f) tables += ", 20";
  auto model = CreateModel("ctr", tables + "]\ndim = 8\nbottom = [16]\ntop = [32]\n", mo);
  ASSERT_TRUE(model.ok()) << model.status().ToString();
  ModelData d;
  d.ctr = std::make_unique<testing::MemoryCtrSource>(std::move(train), 0, 1);
  d.ctr_heldout = std::move(heldout);
  d.ctr_bayes_auc = bayes;
  ASSERT_TRUE((*model)->SetData(std::move(d)).ok());
  OptimizerSettings adagrad;
  adagrad.type = OptimizerType::kAdagrad;
  adagrad.lr = 0.1;
  OptimizerSettings adam;
  adam.type = OptimizerType::kAdam;
  adam.lr = 3e-3;
  EvalStats e = Train(model->get(), adam, adagrad, mo.steps);
  EXPECT_EQ(e.metric, "auc");
  EXPECT_GT(bayes, 0.75);
  EXPECT_GE(e.value, bayes - 0.03);
  RecordProperty("auc", std::to_string(e.value));
  RecordProperty("bayes_auc", std::to_string(bayes));
}

}  // namespace
}  // namespace parallax::models
