// The "mlp" model: dense only. Synthetic classification whose data is a
// pure function of (seed, example index): x ~ N(0, I) of `features`
// dimensions, label = argmax(T·x) for a fixed random teacher T (classes ×
// features), replaced by a uniformly random class with probability
// `label_noise`. The Bayes accuracy is therefore (1 − p) + p / classes,
// which a student MLP can approach but not beat.
#include <algorithm>
#include <cmath>

#include "trainer/models/layers.h"
#include "trainer/models/model_config.h"
#include "trainer/models/model_internal.h"
#include "trainer/models/sampling.h"

namespace parallax::models {
namespace {

constexpr uint64_t kTeacherKey = 0x7eac4e7ull;
constexpr uint64_t kHeldoutBase = uint64_t{1} << 40;

struct MlpConfig {
  int features = 32;
  int classes = 4;
  std::vector<int64_t> hidden = {64};
  double label_noise = 0.1;
  int64_t eval_every = 0;
  int64_t eval_examples = 10'000;
  int threads = 1;
  int64_t seed = 1;
};

Status ParseMlpConfig(const std::string& toml, MlpConfig* c) {
  PX_ASSIGN_OR_RETURN(ModelConfig m, ModelConfig::Parse(toml, "mlp"));
  PX_RETURN_IF_ERROR(m.Int("features", 1, 1 << 16, &c->features));
  PX_RETURN_IF_ERROR(m.Int("classes", 2, 1 << 16, &c->classes));
  PX_RETURN_IF_ERROR(m.IntList("hidden", 1, 1 << 16, &c->hidden));
  PX_RETURN_IF_ERROR(m.Double("label_noise", 0.0, 1.0, &c->label_noise));
  PX_RETURN_IF_ERROR(m.Int("eval_every", 0, INT64_MAX, &c->eval_every));
  PX_RETURN_IF_ERROR(m.Int("eval_examples", 1, INT64_MAX, &c->eval_examples));
  PX_RETURN_IF_ERROR(m.Int("threads", 1, 256, &c->threads));
  PX_RETURN_IF_ERROR(m.Int("seed", 0, INT64_MAX, &c->seed));
  return m.Finish();
}

class MlpModel final : public Model {
 public:
  MlpModel(const MlpConfig& c, const ModelOptions& o) : c_(c), o_(o) {
    SetComputeThreads(c.threads);
    widths_.push_back(c.features);
    for (int64_t h : c.hidden) widths_.push_back(static_cast<int>(h));
    widths_.push_back(c.classes);
    const uint64_t seed = static_cast<uint64_t>(c.seed);
    for (size_t l = 0; l + 1 < widths_.size(); ++l) {
      VariableOptions w, b;
      w.init = {Initializer::Type::kUniform, seed, GlorotScale(widths_[l], widths_[l + 1])};
      b.init = {Initializer::Type::kZeros, seed, 0.0f};
      const std::string layer = "mlp/layer" + std::to_string(l);
      vars_.push_back(Dense(layer + "/weights", static_cast<size_t>(widths_[l]) * widths_[l + 1], w));
      vars_.push_back(Dense(layer + "/bias", static_cast<size_t>(widths_[l + 1]), b));
    }
    HashRng rng(Hash(seed, kTeacherKey));
    teacher_.resize(c.classes, c.features);
    for (Eigen::Index i = 0; i < teacher_.size(); ++i) teacher_.data()[i] = static_cast<float>(rng.Normal());
  }

  const std::string& name() const override { return name_; }
  const char* unit() const override { return "samples"; }
  const std::vector<VariableSpec>& Variables() const override { return vars_; }
  int64_t eval_every() const override { return c_.eval_every; }
  Status SetData(ModelData) override { return Status::Ok(); }
  DataSpec data_spec() const override { return {}; }
  StatusOr<std::map<std::string, std::vector<std::vector<int64_t>>>> SampleIds(int) override {
    return std::map<std::string, std::vector<std::vector<int64_t>>>{};
  }
  std::string SaveState() const override { return ""; }  // data is a function of the step
  Status RestoreState(std::string_view) override { return Status::Ok(); }

  double bayes_accuracy() const { return (1 - c_.label_noise) + c_.label_noise / c_.classes; }

  // Example g into x (features) and *label.
  void Example(uint64_t g, float* x, int32_t* label) const {
    HashRng rng(Hash(static_cast<uint64_t>(c_.seed), g));
    for (int j = 0; j < c_.features; ++j) x[j] = static_cast<float>(rng.Normal());
    const Eigen::Map<const Eigen::RowVectorXf> xv(x, c_.features);
    int32_t arg = 0;
    float best = -INFINITY;
    for (int k = 0; k < c_.classes; ++k) {
      const float score = teacher_.row(k).dot(xv);
      if (score > best) {
        best = score;
        arg = k;
      }
    }
    *label = arg;
    if (rng.Uniform() < c_.label_noise) *label = static_cast<int32_t>(rng.Next() % c_.classes);
  }

  // Forward through every layer; acts_[l] holds layer l's input.
  Status Forward(Session* s, Eigen::Index n) {
    const size_t layers = widths_.size() - 1;
    acts_.resize(layers + 1);
    for (size_t l = 0; l < layers; ++l) {
      PX_ASSIGN_OR_RETURN(std::span<const float> w, s->Dense(var_ids_[2 * l]));
      PX_ASSIGN_OR_RETURN(std::span<const float> b, s->Dense(var_ids_[2 * l + 1]));
      const int in = widths_[l], out = widths_[l + 1];
      acts_[l + 1].resize(n, out);
      MatMap y(acts_[l + 1].data(), n, out);
      LinearForward(ConstMatMap(acts_[l].data(), n, in), ConstMatMap(w.data(), in, out),
                    ConstVecMap(b.data(), out), y);
      if (l + 1 < layers) ReluForward(y);
    }
    return Status::Ok();
  }

  Status TrainStep(Session* s, StepStats* stats) override {
    const int64_t step = s->step();
    const Eigen::Index n = o_.batch_size;
    acts_.resize(widths_.size());
    acts_[0].resize(n, c_.features);
    labels_.resize(static_cast<size_t>(n));
    for (Eigen::Index j = 0; j < n; ++j) {
      const uint64_t g = (static_cast<uint64_t>(step) * static_cast<uint64_t>(n) + static_cast<uint64_t>(j)) *
                             static_cast<uint64_t>(o_.world_size) +
                         static_cast<uint64_t>(o_.rank);
      Example(g, acts_[0].row(j).data(), &labels_[static_cast<size_t>(j)]);
    }
    PX_RETURN_IF_ERROR(Forward(s, n));
    const size_t layers = widths_.size() - 1;
    Matrix& dy = dy_;
    Matrix& dx = dx_;
    dy.resize(n, c_.classes);
    const double loss = SoftmaxCrossEntropy(ConstMatMap(acts_[layers].data(), n, c_.classes), labels_,
                                            MatMap(dy.data(), n, c_.classes), nullptr);
    for (size_t l = layers; l-- > 0;) {
      PX_ASSIGN_OR_RETURN(std::span<const float> w, s->Dense(var_ids_[2 * l]));
      const int in = widths_[l], out = widths_[l + 1];
      dw_.resize(static_cast<size_t>(in) * out);
      db_.resize(static_cast<size_t>(out));
      dx.resize(n, in);
      MatMap dxm(dx.data(), n, in);
      LinearBackward(ConstMatMap(acts_[l].data(), n, in), ConstMatMap(w.data(), in, out),
                     ConstMatMap(dy.data(), n, out), MatMap(dw_.data(), in, out),
                     VecMap(db_.data(), out), l > 0 ? &dxm : nullptr);
      PX_RETURN_IF_ERROR(s->Gradient(var_ids_[2 * l], dw_));
      PX_RETURN_IF_ERROR(s->Gradient(var_ids_[2 * l + 1], db_));
      if (l > 0) {
        ReluBackward(ConstMatMap(acts_[l].data(), n, in), dxm);
        dy.swap(dx);
      }
    }
    PX_RETURN_IF_ERROR(s->Step());
    PX_RETURN_IF_ERROR(s->ReportMetrics(step, loss, n));
    stats->loss = loss;
    stats->samples = n;
    stats->units = n;
    return Status::Ok();
  }

  Status Evaluate(Session* s, EvalStats* out) override {
    constexpr Eigen::Index kBlock = 1024;
    int64_t correct = 0;
    for (int64_t first = 0; first < c_.eval_examples; first += kBlock) {
      const Eigen::Index n = std::min<int64_t>(kBlock, c_.eval_examples - first);
      acts_.resize(widths_.size());
      acts_[0].resize(n, c_.features);
      labels_.resize(static_cast<size_t>(n));
      for (Eigen::Index j = 0; j < n; ++j) {
        Example(kHeldoutBase + static_cast<uint64_t>(first + j), acts_[0].row(j).data(),
                &labels_[static_cast<size_t>(j)]);
      }
      PX_RETURN_IF_ERROR(Forward(s, n));
      Matrix dy(n, c_.classes);
      int64_t right = 0;
      (void)SoftmaxCrossEntropy(ConstMatMap(acts_.back().data(), n, c_.classes), labels_,
                                MatMap(dy.data(), n, c_.classes), &right);
      correct += right;
    }
    out->metric = "accuracy";
    out->value = static_cast<double>(correct) / static_cast<double>(c_.eval_examples);
    out->baseline_metric = "bayes_accuracy";
    out->baseline = bayes_accuracy();
    out->examples = c_.eval_examples;
    return Status::Ok();
  }

 private:
  const std::string name_ = "mlp";
  MlpConfig c_;
  ModelOptions o_;
  std::vector<int> widths_;
  std::vector<VariableSpec> vars_;
  Matrix teacher_;
  std::vector<Matrix> acts_;
  std::vector<int32_t> labels_;
  std::vector<float> dw_, db_;
  Matrix dy_, dx_;
};

}  // namespace

StatusOr<std::unique_ptr<Model>> CreateMlpModel(const std::string& toml, const ModelOptions& o) {
  MlpConfig c;
  PX_RETURN_IF_ERROR(ParseMlpConfig(toml, &c));
  return std::unique_ptr<Model>(std::make_unique<MlpModel>(c, o));
}

}  // namespace parallax::models
