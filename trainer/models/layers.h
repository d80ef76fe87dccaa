// The layers of the built-in models: stateless forward/backward functions
// over caller-owned Eigen maps (row-major float matrices, one example per
// row). Nothing here allocates per call except where a comment says so, so a
// model can keep every buffer across steps.
//
// Conventions: gradients are written (not accumulated) unless a comment says
// "accumulates"; losses return the batch mean and their gradients are of the
// batch mean.
#ifndef PARALLAX_TRAINER_MODELS_LAYERS_H_
#define PARALLAX_TRAINER_MODELS_LAYERS_H_

#include <Eigen/Core>
#include <cstdint>
#include <span>
#include <vector>

namespace parallax::models {

using Matrix = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using MatMap = Eigen::Map<Matrix>;
using ConstMatMap = Eigen::Map<const Matrix>;
using VecMap = Eigen::Map<Eigen::VectorXf>;
using ConstVecMap = Eigen::Map<const Eigen::VectorXf>;

// Linear: Y = X·W + b, X n×in, W in×out, b out, Y n×out.
void LinearForward(const ConstMatMap& x, const ConstMatMap& w, const ConstVecMap& b, MatMap y);
// dW = Xᵀ·dY, db = column sums of dY, and (when dx is not null) dX = dY·Wᵀ.
void LinearBackward(const ConstMatMap& x, const ConstMatMap& w, const ConstMatMap& dy, MatMap dw,
                    VecMap db, MatMap* dx);

// ReLU in place (y = max(z, 0)); backward multiplies dy by [y > 0] in place.
void ReluForward(MatMap z);
void ReluBackward(const ConstMatMap& y, MatMap dy);

// Embedding bags. `rows` holds u distinct rows (u×d); index[i·k + j] is the
// row of slot j of example i. Concat: out row i = rows[index[i·k]] ‖ … ‖
// rows[index[i·k + k−1]] (n × k·d). Mean: out row i = the mean of those k
// rows (n × d).
void GatherConcat(const ConstMatMap& rows, std::span<const int32_t> index, int k, MatMap out);
void GatherMean(const ConstMatMap& rows, std::span<const int32_t> index, int k, MatMap out);
// Backward of the above: accumulates into drows (u×d), which the caller
// zeroes first.
void ScatterConcat(const ConstMatMap& dout, std::span<const int32_t> index, int k, MatMap drows);
void ScatterMean(const ConstMatMap& dout, std::span<const int32_t> index, int k, MatMap drows);

// Negative-sampling loss for n examples with hidden states H (n×d):
//   loss_i = −log σ(h_i·o[t_i] + b[t_i]) − Σ_{m<K} log σ(−(h_i·o[m] + b[m]))
// The output rows and biases are given as u distinct rows `out` (u×d) and
// `bias` (u); pos[i] is the row of example i's target; neg is K rows shared
// by every example (`shared`, neg.size() = K) or K per example
// (neg.size() = n·K, neg[i·K + m]). Returns the mean over examples; writes
// dH (n×d), and accumulates d(mean loss)/d out into dout (u×d) and dbias (u),
// which the caller zeroes first. `scratch` is reused between calls.
struct NegSamplingScratch {
  Matrix scores;  // n × K (shared) or scratch
  Matrix gathered;
};
double NegativeSamplingLoss(const ConstMatMap& h, const ConstMatMap& out, const ConstVecMap& bias,
                            std::span<const int32_t> pos, std::span<const int32_t> neg, int k,
                            bool shared, MatMap dh, MatMap dout, VecMap dbias,
                            NegSamplingScratch* scratch);

// Full-softmax log-likelihood of targets, streamed over chunks of the output
// vocabulary so a V×d table never has to be resident. Add every chunk of
// rows [first, first + c) once (in any order), then LogLikelihood().
class FullSoftmax {
 public:
  // h: n×d hidden states (copied); targets: n ids.
  FullSoftmax(const ConstMatMap& h, std::span<const uint32_t> targets);
  // `logits` is scratch (n × c), shareable between instances.
  void AddChunk(int64_t first, const ConstMatMap& rows, const ConstVecMap& bias, Matrix* logits);
  // Σ_i log p(t_i | h_i) in nats.
  double LogLikelihood() const;
  int64_t examples() const { return h_.rows(); }

 private:
  Matrix h_;
  std::vector<uint32_t> targets_;
  Eigen::VectorXd max_, sum_, target_logit_;  // running log-sum-exp per example
};

// Logistic loss: mean over i of −[y log σ(z) + (1−y) log(1−σ(z))]; dz of the
// mean. Numerically stable for large |z|.
double SigmoidLogLoss(std::span<const float> z, std::span<const float> labels, std::span<float> dz);

// Softmax cross-entropy over C classes: logits n×C, labels in [0, C). Mean
// loss; dlogits (n×C) of the mean; *correct (when not null) = examples whose
// arg-max is the label.
double SoftmaxCrossEntropy(const ConstMatMap& logits, std::span<const int32_t> labels,
                           MatMap dlogits, int64_t* correct);

// Pairwise dot interaction (DLRM): x is n × (f·d), f vectors of d per
// example; y is n × f(f−1)/2, the dots of pairs (a, b) with a > b in the
// order (1,0), (2,0), (2,1), (3,0), …
void DotInteractionForward(const ConstMatMap& x, int f, MatMap y);
// dx (n × f·d) from dy (n × f(f−1)/2); writes dx.
void DotInteractionBackward(const ConstMatMap& x, const ConstMatMap& dy, int f, MatMap dx);

// Area under the ROC curve of scores against 0/1 labels (ties count half).
// 0.5 when one class is absent. Allocates.
double Auc(std::span<const float> scores, std::span<const float> labels);

// Distinct ids of `ids` (sorted) into *unique and, for each entry of ids,
// its position in *unique into *index. Reuses the vectors' storage.
void Dedupe(std::span<const int64_t> ids, std::vector<int64_t>* unique,
            std::vector<int32_t>* index, std::vector<std::pair<int64_t, int32_t>>* scratch);

}  // namespace parallax::models

#endif  // PARALLAX_TRAINER_MODELS_LAYERS_H_
