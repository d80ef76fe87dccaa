// The optimizer math against references written out in the test, and the
// equivalence of the dense and lazy sparse forms where the design says they
// agree (SGD, Adagrad) and differ (momentum, Adam).
#include "core/optim/optimizer.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

namespace parallax::optim {
namespace {

class OptimizerTest : public ::testing::Test {
 protected:
  static OptimizerSettings Spec(OptimizerType type) {
    OptimizerSettings s;
    s.type = type;
    s.lr = 0.1f;
    s.momentum = 0.5f;
    s.initial_accumulator = 0.25f;
    return s;
  }
  // Gradient of step t (1-based), element i: nonzero, sign-varying.
  static float G(int t, size_t i) {
    return 0.3f * static_cast<float>(t) - 0.2f * static_cast<float>(i) + 0.05f;
  }
};

TEST_F(OptimizerTest, DenseFormsMatchTheirFormulas) {
  const size_t n = 3;
  for (OptimizerType type : {OptimizerType::kSgd, OptimizerType::kMomentum, OptimizerType::kAdagrad,
                             OptimizerType::kAdam}) {
    OptimizerSettings s = Spec(type);
    DenseOptimizer opt(s, n);
    std::vector<float> w = {1.0f, -2.0f, 0.5f};
    std::vector<double> rw(w.begin(), w.end()), m(n, 0.0), v(n, 0.0), a(n, s.initial_accumulator);
    for (int t = 1; t <= 5; ++t) {
      std::vector<float> g(n);
      for (size_t i = 0; i < n; ++i) g[i] = G(t, i);
      opt.Apply(g, w);
      for (size_t i = 0; i < n; ++i) {
        const double gi = g[i];
        switch (type) {
          case OptimizerType::kSgd:
            rw[i] -= s.lr * gi;
            break;
          case OptimizerType::kMomentum:
            m[i] = s.momentum * m[i] + gi;
            rw[i] -= s.lr * m[i];
            break;
          case OptimizerType::kAdagrad:
            a[i] += gi * gi;
            rw[i] -= s.lr * gi / (std::sqrt(a[i]) + s.epsilon);
            break;
          case OptimizerType::kAdam:
            m[i] = s.beta1 * m[i] + (1 - s.beta1) * gi;
            v[i] = s.beta2 * v[i] + (1 - s.beta2) * gi * gi;
            rw[i] -= s.lr * (m[i] / (1 - std::pow(s.beta1, t))) /
                     (std::sqrt(v[i] / (1 - std::pow(s.beta2, t))) + s.epsilon);
            break;
        }
      }
    }
    EXPECT_EQ(opt.steps(), 5);
    for (size_t i = 0; i < n; ++i) {
      EXPECT_NEAR(w[i], rw[i], 1e-5 * std::max(1.0, std::abs(rw[i])))
          << OptimizerTypeName(type) << " element " << i;
    }
  }
}

// Row 1 is touched every step, row 0 only at step 1: the sparse form leaves
// row 0 alone afterwards.
TEST_F(OptimizerTest, SparseSgdAndAdagradEqualDenseWithZeroRows) {
  for (OptimizerType type : {OptimizerType::kSgd, OptimizerType::kAdagrad, OptimizerType::kMomentum,
                             OptimizerType::kAdam}) {
    const uint32_t dim = 2;
    const int64_t rows = 3;
    OptimizerSettings s = Spec(type);
    DenseOptimizer dense(s, rows * dim);
    SparseOptimizer sparse(s, rows, dim);
    std::vector<float> wd = {0.1f, 0.2f, 0.3f, 0.4f, 0.5f, 0.6f}, ws = wd;
    for (int t = 1; t <= 4; ++t) {
      std::vector<int64_t> ids = t == 1 ? std::vector<int64_t>{1, 0} : std::vector<int64_t>{1};
      std::vector<float> rows_g, full(rows * dim, 0.0f);
      for (int64_t id : ids) {
        for (uint32_t j = 0; j < dim; ++j) {
          const float g = G(t, static_cast<size_t>(id) * dim + j);
          rows_g.push_back(g);
          full[static_cast<size_t>(id) * dim + j] = g;
        }
      }
      dense.Apply(full, wd);
      ASSERT_TRUE(sparse.Apply(ids, rows_g, ws).ok());
    }
    const bool same = type == OptimizerType::kSgd || type == OptimizerType::kAdagrad;
    float max_diff = 0;
    for (size_t i = 0; i < wd.size(); ++i) max_diff = std::max(max_diff, std::abs(wd[i] - ws[i]));
    if (same) {
      EXPECT_LT(max_diff, 1e-6f) << OptimizerTypeName(type);
    } else {
      EXPECT_GT(max_diff, 1e-4f) << OptimizerTypeName(type) << " lazy form should differ";
    }
    // Row 2 never had a gradient: untouched by the sparse form.
    EXPECT_EQ(ws[4], 0.5f);
    EXPECT_EQ(ws[5], 0.6f);
  }
}

TEST_F(OptimizerTest, SparseRejectsBadIdsWithoutChangingAnything) {
  SparseOptimizer opt(Spec(OptimizerType::kSgd), 4, 1);
  std::vector<float> table = {1, 2, 3, 4};
  const std::vector<float> before = table;
  Status out = opt.Apply(std::vector<int64_t>{0, 4}, std::vector<float>{1, 1}, table);
  EXPECT_EQ(out.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(out.message().find("id 4"), std::string::npos) << out.message();
  Status dup = opt.Apply(std::vector<int64_t>{1, 1}, std::vector<float>{1, 1}, table);
  EXPECT_EQ(dup.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(dup.message().find("repeated"), std::string::npos) << dup.message();
  EXPECT_EQ(opt.Apply(std::vector<int64_t>{1}, std::vector<float>{1, 1}, table).code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(table, before);
}

TEST_F(OptimizerTest, ParsesAndValidates) {
  auto t = ParseOptimizerType("adagrad");
  ASSERT_TRUE(t.has_value());
  EXPECT_EQ(*t, OptimizerType::kAdagrad);
  EXPECT_STREQ(OptimizerTypeName(*t), "adagrad");
  EXPECT_FALSE(ParseOptimizerType("rmsprop").has_value());
  OptimizerSettings s;
  EXPECT_TRUE(ValidateOptimizer(s).ok());
  s.lr = 0;
  Status st = ValidateOptimizer(s);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("lr"), std::string::npos);
  s.lr = 0.1f;
  s.momentum = 1.0f;
  EXPECT_FALSE(ValidateOptimizer(s).ok());
}

// Checkpoints: an optimizer restored from another's State() continues
// exactly as the original does; a state of the wrong shape is refused.
TEST_F(OptimizerTest, StateRestoresIntoAFreshOptimizerAndContinuesIdentically) {
  OptimizerSettings adam;
  adam.type = OptimizerType::kAdam;
  adam.lr = 0.01f;
  std::vector<float> g = {0.5f, -1.0f, 2.0f};
  std::vector<float> w1 = {1, 2, 3};
  DenseOptimizer a(adam, 3);
  for (int i = 0; i < 3; ++i) a.Apply(g, w1);
  DenseOptimizer b(adam, 3);
  ASSERT_TRUE(b.Restore(a.State()).ok());
  std::vector<float> w2 = w1;
  a.Apply(g, w1);
  b.Apply(g, w2);
  EXPECT_EQ(w1, w2);
  EXPECT_EQ(b.steps(), a.steps());
  DenseOptimizer small(adam, 2);
  EXPECT_EQ(small.Restore(a.State()).code(), StatusCode::kInvalidArgument);

  SparseOptimizer sa(adam, 4, 2), sb(adam, 4, 2);
  std::vector<float> t1(8, 1.0f);
  std::vector<int64_t> ids = {1, 3};
  std::vector<float> sg = {1, 2, 3, 4};
  ASSERT_TRUE(sa.Apply(ids, sg, t1).ok());
  ASSERT_TRUE(sb.Restore(sa.State()).ok());
  std::vector<float> t2 = t1;
  ASSERT_TRUE(sa.Apply(ids, sg, t1).ok());
  ASSERT_TRUE(sb.Apply(ids, sg, t2).ok());
  EXPECT_EQ(t1, t2);
  SparseOptimizer other(adam, 5, 2);
  EXPECT_EQ(other.Restore(sa.State()).code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace parallax::optim
