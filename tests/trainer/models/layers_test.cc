// Every layer's backward against central finite differences of a scalar
// L = Σ R ⊙ output (R random), and the metrics against hand-computed values.
#include "trainer/models/layers.h"

#include <gtest/gtest.h>

#include <cmath>
#include <functional>

#include "trainer/models/sampling.h"

namespace parallax::models {
namespace {

Matrix Random(Eigen::Index r, Eigen::Index c, uint64_t seed, float scale = 1.0f) {
  HashRng rng(seed);
  Matrix m(r, c);
  for (Eigen::Index i = 0; i < m.size(); ++i) m.data()[i] = scale * static_cast<float>(rng.Normal());
  return m;
}

// Checks d loss / d x[i] for every element of x against (L(x+e) − L(x−e)) / 2e.
void CheckGradient(Matrix* x, const Matrix& analytic, const std::function<double()>& loss,
                   const std::string& what, double eps = 1e-2) {
  ASSERT_EQ(x->size(), analytic.size()) << what;
  double worst = 0;
  for (Eigen::Index i = 0; i < x->size(); ++i) {
    const float keep = x->data()[i];
    x->data()[i] = keep + static_cast<float>(eps);
    const double up = loss();
    x->data()[i] = keep - static_cast<float>(eps);
    const double down = loss();
    x->data()[i] = keep;
    const double numeric = (up - down) / (2 * eps);
    const double a = analytic.data()[i];
    const double err = std::abs(numeric - a) / (1e-2 + std::abs(a));
    worst = std::max(worst, err);
    ASSERT_LT(err, 2e-2) << what << " element " << i << ": numeric " << numeric << " analytic " << a;
  }
  ::testing::Test::RecordProperty(what + "_worst_relative_error", std::to_string(worst));
}

double Dot(const Matrix& a, const Matrix& b) {
  return (a.cast<double>().array() * b.cast<double>().array()).sum();
}

class LayersTest : public ::testing::Test {};

TEST_F(LayersTest, LinearGradients) {
  const int n = 5, in = 4, out = 3;
  Matrix x = Random(n, in, 1), w = Random(in, out, 2), b = Random(1, out, 3), r = Random(n, out, 4);
  Matrix y(n, out);
  auto loss = [&] {
    LinearForward(ConstMatMap(x.data(), n, in), ConstMatMap(w.data(), in, out),
                  ConstVecMap(b.data(), out), MatMap(y.data(), n, out));
    return Dot(y, r);
  };
  Matrix dw(in, out), db(1, out), dx(n, in);
  MatMap dxm(dx.data(), n, in);
  loss();
  LinearBackward(ConstMatMap(x.data(), n, in), ConstMatMap(w.data(), in, out),
                 ConstMatMap(r.data(), n, out), MatMap(dw.data(), in, out), VecMap(db.data(), out), &dxm);
  CheckGradient(&x, dx, loss, "linear_x");
  CheckGradient(&w, dw, loss, "linear_w");
  CheckGradient(&b, db, loss, "linear_b");
}

TEST_F(LayersTest, ReluGradient) {
  const int n = 4, c = 6;
  Matrix z = Random(n, c, 5), r = Random(n, c, 6), y(n, c);
  // Keep inputs away from the kink so finite differences are defined.
  for (Eigen::Index i = 0; i < z.size(); ++i)
    if (std::abs(z.data()[i]) < 0.05f) z.data()[i] = 0.3f;
  auto loss = [&] {
    y = z;
    ReluForward(MatMap(y.data(), n, c));
    return Dot(y, r);
  };
  loss();
  Matrix dz = r;
  ReluBackward(ConstMatMap(y.data(), n, c), MatMap(dz.data(), n, c));
  EXPECT_GT((dz.array() == 0).count(), 0);  // some units are off
  CheckGradient(&z, dz, loss, "relu");
}

TEST_F(LayersTest, EmbeddingBagGradients) {
  const int n = 3, k = 4, d = 5, u = 4;
  const std::vector<int32_t> index = {0, 1, 1, 3, 2, 2, 2, 0, 3, 3, 1, 0};
  for (bool concat : {true, false}) {
    const int width = concat ? k * d : d;
    Matrix rows = Random(u, d, 7), r = Random(n, width, 8), y(n, width);
    auto loss = [&] {
      if (concat) {
        GatherConcat(ConstMatMap(rows.data(), u, d), index, k, MatMap(y.data(), n, width));
      } else {
        GatherMean(ConstMatMap(rows.data(), u, d), index, k, MatMap(y.data(), n, width));
      }
      return Dot(y, r);
    };
    Matrix drows = Matrix::Zero(u, d);
    if (concat) {
      ScatterConcat(ConstMatMap(r.data(), n, width), index, k, MatMap(drows.data(), u, d));
    } else {
      ScatterMean(ConstMatMap(r.data(), n, width), index, k, MatMap(drows.data(), u, d));
    }
    CheckGradient(&rows, drows, loss, concat ? "concat" : "mean");
  }
}

TEST_F(LayersTest, NegativeSamplingGradients) {
  const int n = 4, d = 6, u = 7, k = 3;
  const std::vector<int32_t> pos = {0, 1, 2, 1};
  for (bool shared : {true, false}) {
    const std::vector<int32_t> neg = shared ? std::vector<int32_t>{3, 4, 1}
                                            : std::vector<int32_t>{3, 4, 5, 6, 0, 3, 2, 2, 4, 5, 6, 0};
    Matrix h = Random(n, d, 9, 0.5f), out = Random(u, d, 10, 0.5f), bias = Random(1, u, 11, 0.5f);
    Matrix dh(n, d), dout(u, d), dbias(1, u);
    NegSamplingScratch scratch;
    auto run = [&] {
      dout.setZero();
      dbias.setZero();
      return NegativeSamplingLoss(ConstMatMap(h.data(), n, d), ConstMatMap(out.data(), u, d),
                                  ConstVecMap(bias.data(), u), pos, neg, k, shared,
                                  MatMap(dh.data(), n, d), MatMap(dout.data(), u, d),
                                  VecMap(dbias.data(), u), &scratch);
    };
    // The loss is its definition: −log σ(s⁺) − Σ log σ(−s⁻), mean over examples.
    double expect = 0;
    for (int i = 0; i < n; ++i) {
      auto score = [&](int r) { return static_cast<double>(h.row(i).dot(out.row(r)) + bias(0, r)); };
      expect += std::log1p(std::exp(-score(pos[i])));
      for (int m = 0; m < k; ++m) expect += std::log1p(std::exp(score(neg[shared ? m : i * k + m])));
    }
    EXPECT_NEAR(run(), expect / n, 1e-5);
    const Matrix gh = dh, gout = dout, gbias = dbias;
    CheckGradient(&h, gh, run, shared ? "ns_shared_h" : "ns_example_h");
    CheckGradient(&out, gout, run, shared ? "ns_shared_out" : "ns_example_out");
    CheckGradient(&bias, gbias, run, shared ? "ns_shared_bias" : "ns_example_bias");
  }
}

TEST_F(LayersTest, FullSoftmaxMatchesDirectComputationInAnyChunking) {
  const int n = 5, d = 4, v = 11;
  Matrix h = Random(n, d, 12), out = Random(v, d, 13), bias = Random(1, v, 14);
  const std::vector<uint32_t> targets = {0, 10, 3, 7, 3};
  double direct = 0;
  for (int i = 0; i < n; ++i) {
    Eigen::VectorXd logits = (out * h.row(i).transpose()).cast<double>() + bias.transpose().cast<double>();
    const double m = logits.maxCoeff();
    direct += logits[targets[i]] - m - std::log((logits.array() - m).exp().sum());
  }
  for (int chunk : {1, 3, 11}) {
    FullSoftmax fs(ConstMatMap(h.data(), n, d), targets);
    Matrix scratch;
    for (int first = v - (v - 1) % chunk - 1; first >= 0; first -= chunk) {  // out of order
      const int c = std::min(chunk, v - first);
      fs.AddChunk(first, ConstMatMap(out.row(first).data(), c, d),
                  ConstVecMap(bias.data() + first, c), &scratch);
    }
    EXPECT_NEAR(fs.LogLikelihood(), direct, 1e-4) << "chunk " << chunk;
  }
}

TEST_F(LayersTest, SigmoidLogLossGradientAndStability) {
  Matrix z = Random(1, 6, 15, 2.0f);
  const std::vector<float> labels = {1, 0, 1, 1, 0, 0};
  std::vector<float> dz(6);
  auto loss = [&] { return SigmoidLogLoss({z.data(), 6}, labels, dz); };
  loss();
  Matrix g = Eigen::Map<Matrix>(dz.data(), 1, 6);
  CheckGradient(&z, g, loss, "logloss");
  // Large logits stay finite.
  const std::vector<float> big = {80.0f, -80.0f};
  std::vector<float> dbig(2);
  EXPECT_NEAR(SigmoidLogLoss(big, std::vector<float>{0, 1}, dbig), 80.0, 1e-3);
}

TEST_F(LayersTest, SoftmaxCrossEntropyGradient) {
  const int n = 4, c = 3;
  Matrix logits = Random(n, c, 16);
  const std::vector<int32_t> labels = {0, 2, 1, 2};
  Matrix d(n, c);
  int64_t correct = -1;
  auto loss = [&] {
    return SoftmaxCrossEntropy(ConstMatMap(logits.data(), n, c), labels, MatMap(d.data(), n, c), &correct);
  };
  loss();
  const Matrix g = d;
  int64_t expect_correct = 0;
  for (int i = 0; i < n; ++i) {
    Eigen::Index arg;
    logits.row(i).maxCoeff(&arg);
    expect_correct += arg == labels[i];
  }
  EXPECT_EQ(correct, expect_correct);
  CheckGradient(&logits, g, loss, "softmax_xent");
}

TEST_F(LayersTest, DotInteractionGradient) {
  const int n = 3, f = 4, d = 5, pairs = f * (f - 1) / 2;
  Matrix x = Random(n, f * d, 17), r = Random(n, pairs, 18), y(n, pairs);
  auto loss = [&] {
    DotInteractionForward(ConstMatMap(x.data(), n, f * d), f, MatMap(y.data(), n, pairs));
    return Dot(y, r);
  };
  loss();
  // Pair order (1,0), (2,0), (2,1), …
  EXPECT_NEAR(y(1, 2), (x.block(1, 2 * d, 1, d).array() * x.block(1, 1 * d, 1, d).array()).sum(), 1e-5);
  Matrix dx(n, f * d);
  DotInteractionBackward(ConstMatMap(x.data(), n, f * d), ConstMatMap(r.data(), n, pairs), f,
                         MatMap(dx.data(), n, f * d));
  CheckGradient(&x, dx, loss, "dot_interaction");
}

TEST_F(LayersTest, AucCountsPairsAndTies) {
  EXPECT_DOUBLE_EQ(Auc(std::vector<float>{0.1f, 0.4f, 0.35f, 0.8f}, std::vector<float>{0, 0, 1, 1}), 0.75);
  EXPECT_DOUBLE_EQ(Auc(std::vector<float>{0.5f, 0.5f}, std::vector<float>{0, 1}), 0.5);
  EXPECT_DOUBLE_EQ(Auc(std::vector<float>{1, 2, 3}, std::vector<float>{0, 1, 1}), 1.0);
  EXPECT_DOUBLE_EQ(Auc(std::vector<float>{1, 2}, std::vector<float>{1, 1}), 0.5);
}

TEST_F(LayersTest, DedupeMapsEveryIdToItsUniqueRow) {
  const std::vector<int64_t> ids = {7, 3, 7, 9, 3, 3};
  std::vector<int64_t> unique;
  std::vector<int32_t> index;
  std::vector<std::pair<int64_t, int32_t>> scratch;
  Dedupe(ids, &unique, &index, &scratch);
  EXPECT_EQ(unique, (std::vector<int64_t>{3, 7, 9}));
  for (size_t i = 0; i < ids.size(); ++i) EXPECT_EQ(unique[static_cast<size_t>(index[i])], ids[i]);
}

TEST_F(LayersTest, AliasTableFollowsWeights) {
  const std::vector<double> w = {1, 0, 3, 6};
  AliasTable t(w);
  std::vector<int> hits(4, 0);
  const int draws = 200'000;
  for (int i = 0; i < draws; ++i) ++hits[t.Sample(Mix64(static_cast<uint64_t>(i)))];
  EXPECT_EQ(hits[1], 0);
  for (int i : {0, 2, 3}) EXPECT_NEAR(hits[static_cast<size_t>(i)] / double(draws), w[static_cast<size_t>(i)] / 10, 0.01);
}

}  // namespace
}  // namespace parallax::models
