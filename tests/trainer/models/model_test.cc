// The built-in models without a real session: configuration errors, the
// variables declared from the configuration alone, SampleIds, and the whole
// loss of each model against finite differences (FakeSession replays one
// batch under perturbed values).
#include "trainer/models/model.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>

#include "tests/trainer/models/fake_session.h"
#include "tests/trainer/models/synthetic_data.h"
#include "trainer/models/sampling.h"

namespace parallax::models {
namespace {

using testing::FakeSession;

std::unique_ptr<Model> Make(const std::string& name, const std::string& toml, int batch) {
  ModelOptions o;
  o.batch_size = batch;
  auto m = CreateModel(name, toml, o);
  EXPECT_TRUE(m.ok()) << m.status().ToString();
  return m.ok() ? std::move(m).value() : nullptr;
}

ModelData LmData(uint32_t vocab, uint32_t context) {
  ModelData d;
  std::vector<uint32_t> tokens = testing::MarkovTokens(vocab, 2000, 5);
  d.counts = testing::Counts(tokens, vocab);
  for (auto& c : d.counts) c += 1;
  d.heldout_tokens.assign(tokens.end() - 200, tokens.end());
  d.tokens = std::make_unique<testing::MemoryTokenSource>(tokens, context, 0, 1, 3);
  return d;
}

ModelData CtrData(const std::vector<int64_t>& tables, int dense, size_t n) {
  ModelData d;
  CtrBatch all;
  all.labels.resize(n);
  all.dense.resize(n * static_cast<size_t>(dense));
  all.categorical.resize(n * tables.size());
  HashRng rng(77);
  for (size_t i = 0; i < n; ++i) {
    all.labels[i] = static_cast<float>(rng.Next() % 2);
    for (int k = 0; k < dense; ++k) all.dense[i * static_cast<size_t>(dense) + static_cast<size_t>(k)] = static_cast<float>(rng.Normal());
    for (size_t f = 0; f < tables.size(); ++f)
      all.categorical[i * tables.size() + f] = static_cast<int64_t>(rng.Next() % static_cast<uint64_t>(tables[f]));
  }
  d.ctr_heldout = all;
  d.ctr = std::make_unique<testing::MemoryCtrSource>(std::move(all), 0, 1);
  return d;
}

// Finite differences of the model's batch loss against the gradients it
// gives the session, for the largest-gradient and some random coordinates of
// every variable.
void CheckModelGradients(Model* m, FakeSession* s, double eps = 2e-3) {
  const std::string pos = m->SaveState();
  StepStats st;
  ASSERT_TRUE(m->TrainStep(s, &st).ok());
  const double loss0 = st.loss;
  EXPECT_NEAR(s->last_loss, loss0, 1e-12);
  std::vector<std::vector<float>> grads;
  for (auto& v : s->vars) grads.push_back(v.last_grad);
  auto loss_at = [&](size_t var, size_t i, float delta) {
    const float keep = s->vars[var].values[i];
    s->vars[var].values[i] = keep + delta;
    EXPECT_TRUE(m->RestoreState(pos).ok());
    StepStats t;
    EXPECT_TRUE(m->TrainStep(s, &t).ok());
    s->vars[var].values[i] = keep;
    return t.loss;
  };
  int checked = 0, kinks = 0;
  for (size_t v = 0; v < s->vars.size(); ++v) {
    const std::vector<float>& g = grads[v];
    std::vector<size_t> order(g.size());
    std::iota(order.begin(), order.end(), 0);
    std::partial_sort(order.begin(), order.begin() + std::min<size_t>(3, g.size()), order.end(),
                      [&](size_t a, size_t b) { return std::abs(g[a]) > std::abs(g[b]); });
    std::vector<size_t> pick(order.begin(), order.begin() + std::min<size_t>(3, g.size()));
    HashRng rng(v);
    for (int r = 0; r < 3; ++r) pick.push_back(rng.Next() % g.size());
    EXPECT_GT(std::abs(g[pick[0]]), 0.0f) << s->vars[v].name << " has no gradient";
    for (size_t i : pick) {
      const double up = loss_at(v, i, static_cast<float>(eps));
      const double down = loss_at(v, i, static_cast<float>(-eps));
      // A ReLU unit switching inside [x − eps, x + eps] makes the one-sided
      // slopes differ; such a coordinate says nothing about the backward.
      if (std::abs((up - loss0) - (loss0 - down)) / eps > 2e-3 + 0.05 * std::abs(g[i])) {
        ++kinks;
        continue;
      }
      const double numeric = (up - down) / (2 * eps);
      EXPECT_NEAR(numeric, g[i], 2e-3 + 0.05 * std::abs(g[i]))
          << s->vars[v].name << " element " << i << " (loss " << loss0 << ")";
      ++checked;
    }
  }
  EXPECT_LE(kinks, checked / 5) << "too many coordinates sit on a ReLU kink";
  EXPECT_GT(checked, 0);
}

class ModelTest : public ::testing::Test {};

TEST_F(ModelTest, UnknownModelAndKeysAreNamed) {
  auto m = CreateModel("transformer", "", {});
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.status().message().find("lm, ctr, mlp"), std::string::npos) << m.status().ToString();
  m = CreateModel("lm", "dimm = 3\n", {});
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(m.status().message().find("'model.dimm'"), std::string::npos) << m.status().ToString();
  EXPECT_NE(m.status().message().find("context_mode"), std::string::npos) << m.status().ToString();
  m = CreateModel("lm", "context_mode = \"sum\"\n", {});
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.status().message().find("concat, mean"), std::string::npos) << m.status().ToString();
  m = CreateModel("ctr", "dim = \"big\"\n", {});
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.status().message().find("'model.dim'"), std::string::npos) << m.status().ToString();
  m = CreateModel("mlp", "hidden = [0]\n", {});
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.status().message().find("'model.hidden'"), std::string::npos) << m.status().ToString();
}

TEST_F(ModelTest, LmDeclaresVariablesFromConfigAlone) {
  auto m = Make("lm", "", 256);
  ASSERT_TRUE(m);
  const auto& v = m->Variables();
  ASSERT_EQ(v.size(), 7u);
  EXPECT_EQ(v[0].name, "lm/input_embedding");
  EXPECT_TRUE(v[0].sparse);
  EXPECT_EQ(v[0].rows, 50'000);
  EXPECT_EQ(v[0].dim, 128u);
  EXPECT_EQ(v[1].size, 4u * 128 * 512);  // concat of k = 4
  EXPECT_EQ(v[5].name, "lm/output_embedding");
  EXPECT_EQ(v[6].dim, 1u);
  auto w3 = Make("lm", "context_mode = \"mean\"\n", 256);
  ASSERT_TRUE(w3);
  EXPECT_EQ(w3->Variables()[1].size, 128u * 512);
}

TEST_F(ModelTest, CtrAndMlpDeclareVariables) {
  auto ctr = Make("ctr", "", 32);
  ASSERT_TRUE(ctr);
  int sparse = 0;
  for (const auto& v : ctr->Variables()) sparse += v.sparse;
  EXPECT_EQ(sparse, 26);
  auto mlp = Make("mlp", "hidden = [8, 8]\n", 32);
  ASSERT_TRUE(mlp);
  EXPECT_EQ(mlp->Variables().size(), 6u);
  for (const auto& v : mlp->Variables()) EXPECT_FALSE(v.sparse);
}

TEST_F(ModelTest, LmSampleIdsIncludeNegativesAndKeepThePosition) {
  auto m = Make("lm", "vocab = 40\ndim = 4\ncontext = 2\nhidden = 4\nnegatives = 5\n", 8);
  ASSERT_TRUE(m);
  ASSERT_TRUE(m->SetData(LmData(40, 2)).ok());
  const std::string before = m->SaveState();
  auto ids = m->SampleIds(3);
  ASSERT_TRUE(ids.ok()) << ids.status().ToString();
  EXPECT_EQ(m->SaveState(), before);
  ASSERT_EQ((*ids)["lm/output_embedding"].size(), 3u);
  for (const auto& batch : (*ids)["lm/output_embedding"]) {
    EXPECT_GT(batch.size(), 0u);
    EXPECT_LE(batch.size(), 8u + 8u * 5u);  // targets + 5 negatives per example
  }
  EXPECT_EQ((*ids)["lm/output_bias"], (*ids)["lm/output_embedding"]);
  ASSERT_EQ((*ids)["lm/input_embedding"].size(), 3u);
}

// The state a checkpoint saves inside Step() is the position of the batch
// the next step trains on: a fresh model restored from it at that step
// computes the same loss as the model that kept going.
TEST_F(ModelTest, LmStateSavedAtStepResumesWithTheNextBatch) {
  const std::string config = "vocab = 40\ndim = 4\ncontext = 2\nhidden = 4\nnegatives = 3\n";
  auto a = Make("lm", config, 8);
  ASSERT_TRUE(a);
  ASSERT_TRUE(a->SetData(LmData(40, 2)).ok());
  FakeSession sa;
  sa.advance = true;
  ASSERT_TRUE(a->Register(&sa).ok());
  ASSERT_TRUE(sa.RegisterState("data", [&] { return a->SaveState(); }, nullptr).ok());
  StepStats st;
  ASSERT_TRUE(a->TrainStep(&sa, &st).ok());
  const std::string after_step0 = sa.saved_state;
  const double loss0 = st.loss;
  ASSERT_TRUE(a->TrainStep(&sa, &st).ok());
  const double loss1 = st.loss;

  auto b = Make("lm", config, 8);
  ASSERT_TRUE(b);
  ASSERT_TRUE(b->SetData(LmData(40, 2)).ok());
  FakeSession sb;
  ASSERT_TRUE(b->Register(&sb).ok());
  sb.set_step(1);
  StepStats fresh;
  ASSERT_TRUE(b->TrainStep(&sb, &fresh).ok());  // without the state: batch 0 at step 1
  EXPECT_NE(fresh.loss, loss1);
  ASSERT_TRUE(b->RestoreState(after_step0).ok());
  StepStats resumed;
  ASSERT_TRUE(b->TrainStep(&sb, &resumed).ok());
  EXPECT_DOUBLE_EQ(resumed.loss, loss1);
  EXPECT_NE(loss0, loss1);
}

TEST_F(ModelTest, LmRejectsAVocabularyLargerThanVocab) {
  auto m = Make("lm", "vocab = 39\n", 8);
  ASSERT_TRUE(m);
  Status st = m->SetData(LmData(40, 4));
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("vocab"), std::string::npos) << st.ToString();
}

TEST_F(ModelTest, LmWholeLossGradients) {
  for (const char* mode : {"concat", "mean"}) {
    for (const char* sharing : {"batch", "example"}) {
      SCOPED_TRACE(std::string(mode) + " " + sharing);
      auto m = Make("lm",
                    std::string("vocab = 30\ndim = 4\ncontext = 3\nhidden = 5\nnegatives = 4\n"
                                "init_scale = 0.5\ncontext_mode = \"") + mode +
                        "\"\nnegative_sharing = \"" + sharing + "\"\n",
                    6);
      ASSERT_TRUE(m);
      ASSERT_TRUE(m->SetData(LmData(30, 3)).ok());
      FakeSession s;
      ASSERT_TRUE(m->Register(&s).ok());
      CheckModelGradients(m.get(), &s);
    }
  }
}

TEST_F(ModelTest, CtrWholeLossGradients) {
  const std::vector<int64_t> tables = {5, 7, 3};
  auto m = Make("ctr", "tables = [5, 7, 3]\ndense_features = 2\ndim = 3\nbottom = [4]\ntop = [4]\ninit_scale = 0.5\n", 8);
  ASSERT_TRUE(m);
  ASSERT_TRUE(m->SetData(CtrData(tables, 2, 64)).ok());
  FakeSession s;
  ASSERT_TRUE(m->Register(&s).ok());
  CheckModelGradients(m.get(), &s);
}

TEST_F(ModelTest, CtrRejectsIdsOutsideTheirTable) {
  auto m = Make("ctr", "tables = [5, 2, 3]\ndense_features = 2\n", 8);
  ASSERT_TRUE(m);
  Status st = m->SetData(CtrData({5, 7, 3}, 2, 64));
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("feature 1"), std::string::npos) << st.ToString();
}

// ids = "hashed": 26 dynamic tables with the [model] section's settings and
// no row counts; any 64-bit value is an id.
TEST_F(ModelTest, HashedCtrDeclaresDynamicTables) {
  auto m = Make("ctr", "ids = \"hashed\"\nmax_rows = [5000]\nadmit_after = 2\nttl_steps = 7\n"
                "eviction = \"lfu\"\ndense_features = 2\n", 8);
  ASSERT_TRUE(m);
  int dynamic = 0;
  for (const auto& v : m->Variables()) {
    if (!v.dynamic) continue;
    ++dynamic;
    EXPECT_TRUE(v.sparse);
    EXPECT_EQ(v.dynamic_settings.max_rows, 5000);
    EXPECT_EQ(v.dynamic_settings.admit_after, 2);
    EXPECT_EQ(v.dynamic_settings.ttl_steps, 7);
    EXPECT_EQ(v.dynamic_settings.eviction, EvictionPolicy::kLfu);
    // An empty field reads as id 0, the missing value: never a row.
    EXPECT_EQ(v.dynamic_settings.never_admit, (std::vector<int64_t>{0}));
  }
  EXPECT_EQ(dynamic, 26);
  EXPECT_TRUE(m->data_spec().raw_ids);
  std::vector<int64_t> huge(26, int64_t{1} << 62);
  ModelData d = CtrData(huge, 2, 16);
  d.ctr_heldout.categorical[3] = -5;  // a value with the top bit set
  EXPECT_TRUE(m->SetData(std::move(d)).ok());
  // One budget per table; none: no budget.
  std::string per_table = "ids = \"hashed\"\nmax_rows = [";
  for (int f = 0; f < 26; ++f) per_table += std::to_string(100 + f) + (f < 25 ? ", " : "]\n");
  auto each = Make("ctr", per_table, 8);
  ASSERT_TRUE(each);
  EXPECT_EQ(each->Variables()[25].dynamic_settings.max_rows, 125);
  auto none = Make("ctr", "ids = \"hashed\"\n", 8);
  ASSERT_TRUE(none);
  EXPECT_EQ(none->Variables()[0].dynamic_settings.max_rows, 0);
  EXPECT_FALSE(Make("ctr", "", 8)->Variables()[0].dynamic);
}

TEST_F(ModelTest, HashedCtrSettingsAreCheckedAgainstIds) {
  auto bad = [](const std::string& toml, const std::string& expect) {
    auto m = CreateModel("ctr", toml, {});
    ASSERT_FALSE(m.ok()) << toml;
    EXPECT_EQ(m.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(m.status().message().find(expect), std::string::npos) << m.status().ToString();
  };
  bad("ids = \"hashed\"\ntables = [10]\n", "takes no table sizes");
  bad("max_rows = [10]\n", "only with ids = \"hashed\"");
  bad("eviction = \"lfu\"\n", "model.eviction");
  bad("ids = \"hashed\"\nmax_rows = [1, 2]\n", "one entry or 26");
  bad("ids = \"random\"\n", "model.ids");
  bad("ids = \"hashed\"\nadmit_after = 0\n", "model.admit_after");
}

TEST_F(ModelTest, MlpWholeLossGradients) {
  auto m = Make("mlp", "features = 3\nclasses = 3\nhidden = [4, 4]\n", 5);
  ASSERT_TRUE(m);
  FakeSession s;
  ASSERT_TRUE(m->Register(&s).ok());
  CheckModelGradients(m.get(), &s);
}

}  // namespace
}  // namespace parallax::models
