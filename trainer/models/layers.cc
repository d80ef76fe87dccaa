#include "trainer/models/layers.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include "core/base/logging.h"
#include "trainer/models/matmul.h"

namespace parallax::models {
namespace {

// −log σ(−x) = log(1 + eˣ), stable for large |x|.
inline double Softplus(double x) { return std::max(x, 0.0) + std::log1p(std::exp(-std::abs(x))); }
inline float Sigmoid(float x) { return 1.0f / (1.0f + std::exp(-x)); }

}  // namespace

void LinearForward(const ConstMatMap& x, const ConstMatMap& w, const ConstVecMap& b, MatMap y) {
  MatMul(x, false, w, false, 0.0f, y);
  y.rowwise() += b.transpose();
}

void LinearBackward(const ConstMatMap& x, const ConstMatMap& w, const ConstMatMap& dy, MatMap dw,
                    VecMap db, MatMap* dx) {
  MatMul(x, true, dy, false, 0.0f, dw);
  db = dy.colwise().sum().transpose();
  if (dx != nullptr) MatMul(dy, false, w, true, 0.0f, *dx);
}

void ReluForward(MatMap z) { z = z.cwiseMax(0.0f); }

void ReluBackward(const ConstMatMap& y, MatMap dy) {
  dy = (y.array() > 0.0f).select(dy, 0.0f);
}

void GatherConcat(const ConstMatMap& rows, std::span<const int32_t> index, int k, MatMap out) {
  const Eigen::Index d = rows.cols();
  for (Eigen::Index i = 0; i < out.rows(); ++i) {
    for (int j = 0; j < k; ++j) {
      out.block(i, j * d, 1, d) = rows.row(index[static_cast<size_t>(i * k + j)]);
    }
  }
}

void GatherMean(const ConstMatMap& rows, std::span<const int32_t> index, int k, MatMap out) {
  const float scale = 1.0f / static_cast<float>(k);
  for (Eigen::Index i = 0; i < out.rows(); ++i) {
    auto o = out.row(i);
    o = rows.row(index[static_cast<size_t>(i * k)]);
    for (int j = 1; j < k; ++j) o += rows.row(index[static_cast<size_t>(i * k + j)]);
    o *= scale;
  }
}

void ScatterConcat(const ConstMatMap& dout, std::span<const int32_t> index, int k, MatMap drows) {
  const Eigen::Index d = drows.cols();
  for (Eigen::Index i = 0; i < dout.rows(); ++i) {
    for (int j = 0; j < k; ++j) {
      drows.row(index[static_cast<size_t>(i * k + j)]) += dout.block(i, j * d, 1, d);
    }
  }
}

void ScatterMean(const ConstMatMap& dout, std::span<const int32_t> index, int k, MatMap drows) {
  const float scale = 1.0f / static_cast<float>(k);
  for (Eigen::Index i = 0; i < dout.rows(); ++i) {
    for (int j = 0; j < k; ++j) {
      drows.row(index[static_cast<size_t>(i * k + j)]) += scale * dout.row(i);
    }
  }
}

double NegativeSamplingLoss(const ConstMatMap& h, const ConstMatMap& out, const ConstVecMap& bias,
                            std::span<const int32_t> pos, std::span<const int32_t> neg, int k,
                            bool shared, MatMap dh, MatMap dout, VecMap dbias,
                            NegSamplingScratch* scratch) {
  const Eigen::Index n = h.rows(), d = h.cols();
  const float inv_n = 1.0f / static_cast<float>(n);
  double loss = 0;
  // Positive targets: one row dot per example.
  for (Eigen::Index i = 0; i < n; ++i) {
    const int32_t t = pos[static_cast<size_t>(i)];
    const float s = h.row(i).dot(out.row(t)) + bias[t];
    loss += Softplus(-s);
    const float ds = (Sigmoid(s) - 1.0f) * inv_n;
    dh.row(i) = ds * out.row(t);
    dout.row(t) += ds * h.row(i);
    dbias[t] += ds;
  }
  if (shared) {
    // K rows for the whole batch: two matrix products.
    Matrix& g = scratch->gathered;
    g.resize(k, d);
    for (int m = 0; m < k; ++m) g.row(m) = out.row(neg[static_cast<size_t>(m)]);
    Matrix& sc = scratch->scores;
    sc.resize(n, k);
    sc.noalias() = h * g.transpose();
    for (int m = 0; m < k; ++m) sc.col(m).array() += bias[neg[static_cast<size_t>(m)]];
    for (Eigen::Index i = 0; i < n; ++i) {
      for (int m = 0; m < k; ++m) {
        const float s = sc(i, m);
        loss += Softplus(s);
        sc(i, m) = Sigmoid(s) * inv_n;  // now d(mean loss)/d score
      }
    }
    dh.noalias() += sc * g;
    g.noalias() = sc.transpose() * h;  // K × d: gradient of each negative row
    for (int m = 0; m < k; ++m) {
      const int32_t r = neg[static_cast<size_t>(m)];
      dout.row(r) += g.row(m);
      dbias[r] += sc.col(m).sum();
    }
  } else {
    for (Eigen::Index i = 0; i < n; ++i) {
      for (int m = 0; m < k; ++m) {
        const int32_t r = neg[static_cast<size_t>(i * k + m)];
        const float s = h.row(i).dot(out.row(r)) + bias[r];
        loss += Softplus(s);
        const float ds = Sigmoid(s) * inv_n;
        dh.row(i) += ds * out.row(r);
        dout.row(r) += ds * h.row(i);
        dbias[r] += ds;
      }
    }
  }
  return loss / static_cast<double>(n);
}

FullSoftmax::FullSoftmax(const ConstMatMap& h, std::span<const uint32_t> targets)
    : h_(h),
      targets_(targets.begin(), targets.end()),
      max_(Eigen::VectorXd::Constant(h.rows(), -std::numeric_limits<double>::infinity())),
      sum_(Eigen::VectorXd::Zero(h.rows())),
      target_logit_(Eigen::VectorXd::Zero(h.rows())) {}

void FullSoftmax::AddChunk(int64_t first, const ConstMatMap& rows, const ConstVecMap& bias,
                           Matrix* logits) {
  const Eigen::Index n = h_.rows(), c = rows.rows();
  Matrix& logits_ = *logits;
  logits_.resize(n, c);
  logits_.noalias() = h_ * rows.transpose();
  logits_.rowwise() += bias.transpose();
  for (Eigen::Index i = 0; i < n; ++i) {
    const double m = std::max(max_[i], static_cast<double>(logits_.row(i).maxCoeff()));
    double s = sum_[i] * std::exp(max_[i] - m);
    for (Eigen::Index j = 0; j < c; ++j) s += std::exp(static_cast<double>(logits_(i, j)) - m);
    max_[i] = m;
    sum_[i] = s;
    const int64_t t = targets_[static_cast<size_t>(i)];
    if (t >= first && t < first + c) target_logit_[i] = logits_(i, t - first);
  }
}

double FullSoftmax::LogLikelihood() const {
  double ll = 0;
  for (Eigen::Index i = 0; i < h_.rows(); ++i) ll += target_logit_[i] - max_[i] - std::log(sum_[i]);
  return ll;
}

double SigmoidLogLoss(std::span<const float> z, std::span<const float> labels, std::span<float> dz) {
  const size_t n = z.size();
  double loss = 0;
  const float inv_n = 1.0f / static_cast<float>(n);
  for (size_t i = 0; i < n; ++i) {
    // −[y log σ(z) + (1−y) log(1−σ(z))] = softplus(z) − y·z
    loss += Softplus(z[i]) - static_cast<double>(labels[i]) * z[i];
    dz[i] = (Sigmoid(z[i]) - labels[i]) * inv_n;
  }
  return loss / static_cast<double>(n);
}

double SoftmaxCrossEntropy(const ConstMatMap& logits, std::span<const int32_t> labels,
                           MatMap dlogits, int64_t* correct) {
  const Eigen::Index n = logits.rows();
  const float inv_n = 1.0f / static_cast<float>(n);
  double loss = 0;
  int64_t right = 0;
  for (Eigen::Index i = 0; i < n; ++i) {
    Eigen::Index arg = 0;
    const float m = logits.row(i).maxCoeff(&arg);
    dlogits.row(i) = (logits.row(i).array() - m).exp();
    const float s = dlogits.row(i).sum();
    const int32_t y = labels[static_cast<size_t>(i)];
    loss += std::log(static_cast<double>(s)) - (logits(i, y) - m);
    dlogits.row(i) *= inv_n / s;
    dlogits(i, y) -= inv_n;
    right += arg == y;
  }
  if (correct != nullptr) *correct = right;
  return loss / static_cast<double>(n);
}

void DotInteractionForward(const ConstMatMap& x, int f, MatMap y) {
  const Eigen::Index d = x.cols() / f;
  Matrix gram(f, f);
  for (Eigen::Index i = 0; i < x.rows(); ++i) {
    Eigen::Map<const Matrix> xi(x.row(i).data(), f, d);
    gram.noalias() = xi * xi.transpose();
    Eigen::Index p = 0;
    for (int a = 1; a < f; ++a)
      for (int b = 0; b < a; ++b) y(i, p++) = gram(a, b);
  }
}

void DotInteractionBackward(const ConstMatMap& x, const ConstMatMap& dy, int f, MatMap dx) {
  const Eigen::Index d = x.cols() / f;
  Matrix sym(f, f);
  for (Eigen::Index i = 0; i < x.rows(); ++i) {
    sym.setZero();
    Eigen::Index p = 0;
    for (int a = 1; a < f; ++a) {
      for (int b = 0; b < a; ++b) {
        sym(a, b) = dy(i, p);
        sym(b, a) = dy(i, p);
        ++p;
      }
    }
    Eigen::Map<const Matrix> xi(x.row(i).data(), f, d);
    Eigen::Map<Matrix> dxi(dx.row(i).data(), f, d);
    dxi.noalias() = sym * xi;
  }
}

double Auc(std::span<const float> scores, std::span<const float> labels) {
  const size_t n = scores.size();
  std::vector<size_t> order(n);
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return scores[a] < scores[b]; });
  // Mann-Whitney U with average ranks for ties.
  double rank_sum_pos = 0;
  double positives = 0;
  for (size_t i = 0; i < n;) {
    size_t j = i;
    while (j < n && scores[order[j]] == scores[order[i]]) ++j;
    const double avg_rank = (static_cast<double>(i) + static_cast<double>(j) + 1) / 2.0;
    for (size_t t = i; t < j; ++t) {
      if (labels[order[t]] > 0.5f) {
        rank_sum_pos += avg_rank;
        positives += 1;
      }
    }
    i = j;
  }
  const double negatives = static_cast<double>(n) - positives;
  if (positives == 0 || negatives == 0) return 0.5;
  return (rank_sum_pos - positives * (positives + 1) / 2) / (positives * negatives);
}

void Dedupe(std::span<const int64_t> ids, std::vector<int64_t>* unique,
            std::vector<int32_t>* index, std::vector<std::pair<int64_t, int32_t>>* scratch) {
  scratch->resize(ids.size());
  for (size_t i = 0; i < ids.size(); ++i) (*scratch)[i] = {ids[i], static_cast<int32_t>(i)};
  std::sort(scratch->begin(), scratch->end());
  unique->clear();
  index->resize(ids.size());
  for (const auto& [id, at] : *scratch) {
    if (unique->empty() || unique->back() != id) unique->push_back(id);
    (*index)[static_cast<size_t>(at)] = static_cast<int32_t>(unique->size() - 1);
  }
}

}  // namespace parallax::models
