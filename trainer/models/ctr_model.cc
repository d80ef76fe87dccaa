// The "ctr" model, DLRM-like: one embedding table per categorical feature
// (sparse, sizes from `tables`; with ids = "hashed" a dynamic table per
// feature whose ids are the raw 64-bit values), a bottom MLP over the dense features (ReLU
// on every layer, last width = dim), pairwise dot interaction of the bottom
// output and the embeddings, a top MLP over [bottom output, dots] to one
// logit, log loss. Evaluation: held-out AUC.
#include <algorithm>
#include <cmath>

#include "core/data/criteo.h"

#include "trainer/models/layers.h"
#include "trainer/models/model_config.h"
#include "trainer/models/model_internal.h"

namespace parallax::models {
namespace {

struct CtrConfig {
  std::string data, heldout_path;
  std::vector<int64_t> tables = std::vector<int64_t>(26, 100'000);
  // "hashed": each feature's table is dynamic (Session::RegisterDynamic) and
  // its ids are the raw values' 64 bits; `dynamic` is what is registered
  // (a [[variable]] entry of the job still wins).
  bool hashed = false;
  std::vector<int64_t> max_rows;  // hashed: per table (one entry: every table); empty: none
  DynamicTableSettings dynamic;
  int dense = 13;
  int dim = 16;
  std::vector<int64_t> bottom = {64};
  std::vector<int64_t> top = {64};
  double init_scale = 0.05;
  int64_t eval_every = 0;
  int64_t eval_examples = 100'000;
  int threads = 1;
  int64_t seed = 1;
};

Status ParseCtrConfig(const std::string& toml, CtrConfig* c) {
  PX_ASSIGN_OR_RETURN(ModelConfig m, ModelConfig::Parse(toml, "ctr"));
  PX_RETURN_IF_ERROR(m.String("data", &c->data));
  PX_RETURN_IF_ERROR(m.String("heldout_path", &c->heldout_path));
  std::string ids = "fixed";
  PX_RETURN_IF_ERROR(m.Choice("ids", {"fixed", "hashed"}, &ids));
  c->hashed = ids == "hashed";
  std::vector<int64_t> tables;
  PX_RETURN_IF_ERROR(m.IntList("tables", 1, int64_t{1} << 40, &tables));
  std::string eviction = EvictionPolicyName(c->dynamic.eviction);
  PX_RETURN_IF_ERROR(m.IntList("max_rows", 1, INT64_MAX, &c->max_rows));
  PX_RETURN_IF_ERROR(m.Int("admit_after", 1, INT64_MAX, &c->dynamic.admit_after));
  PX_RETURN_IF_ERROR(m.Int("ttl_steps", 0, INT64_MAX, &c->dynamic.ttl_steps));
  PX_RETURN_IF_ERROR(m.Choice("eviction", {"lru", "lfu"}, &eviction));
  c->dynamic.eviction = *ParseEvictionPolicy(eviction);
  if (c->hashed) {
    // A hashed value has no table to fit in: the Criteo format's 26
    // features, each a dynamic table.
    if (m.Has("tables")) {
      return InvalidArgument("key 'model.tables' of model 'ctr': ids = \"hashed\" takes no table "
                             "sizes (its tables are dynamic; bound them with max_rows)");
    }
    c->tables.assign(data::kCriteoCategorical, 0);
    if (c->max_rows.size() > 1 && c->max_rows.size() != c->tables.size()) {
      return InvalidArgument("key 'model.max_rows' of model 'ctr': expected one entry or " +
                             std::to_string(c->tables.size()) + " (one per table), got " +
                             std::to_string(c->max_rows.size()));
    }
  } else {
    for (const char* key : {"max_rows", "admit_after", "ttl_steps", "eviction"}) {
      if (m.Has(key)) {
        return InvalidArgument("key 'model." + std::string(key) +
                               "' of model 'ctr': only with ids = \"hashed\" (dynamic tables)");
      }
    }
    if (m.Has("tables")) c->tables = std::move(tables);
    if (c->tables.empty()) return InvalidArgument("key 'model.tables' of model 'ctr': expected at least one table size");
  }
  PX_RETURN_IF_ERROR(m.Int("dense_features", 1, 4096, &c->dense));
  PX_RETURN_IF_ERROR(m.Int("dim", 1, 1024, &c->dim));
  PX_RETURN_IF_ERROR(m.IntList("bottom", 1, 1 << 16, &c->bottom));
  PX_RETURN_IF_ERROR(m.IntList("top", 1, 1 << 16, &c->top));
  PX_RETURN_IF_ERROR(m.Double("init_scale", 0.0, 10.0, &c->init_scale));
  PX_RETURN_IF_ERROR(m.Int("eval_every", 0, INT64_MAX, &c->eval_every));
  PX_RETURN_IF_ERROR(m.Int("eval_examples", 1, INT64_MAX, &c->eval_examples));
  PX_RETURN_IF_ERROR(m.Int("threads", 1, 256, &c->threads));
  PX_RETURN_IF_ERROR(m.Int("seed", 0, INT64_MAX, &c->seed));
  return m.Finish();
}

// A stack of Linear layers with ReLU after each (optionally not the last).
struct MlpStack {
  std::vector<int> widths;  // input, then each layer's output
  int first_var = 0;        // index into the model's variables of layer 0's weights
  bool relu_last = true;
  std::vector<Matrix> acts;  // acts[l] is layer l's input; acts.back() the output
};

class CtrModel final : public Model {
 public:
  CtrModel(const CtrConfig& c, const ModelOptions& o) : c_(c), o_(o) {
    SetComputeThreads(c.threads);
    const uint64_t seed = static_cast<uint64_t>(c.seed);
    features_ = static_cast<int>(c.tables.size()) + 1;
    VariableOptions emb;
    emb.init = {Initializer::Type::kUniform, seed, static_cast<float>(c.init_scale)};
    for (size_t f = 0; f < c.tables.size(); ++f) {
      vars_.push_back(Sparse("ctr/table" + std::to_string(f), c.tables[f], static_cast<uint32_t>(c.dim), emb));
      if (c.hashed) {
        vars_.back().dynamic = true;
        vars_.back().dynamic_settings = c.dynamic;
        // A missing value (an empty field) reads as id 0: never a row, zeros.
        vars_.back().dynamic_settings.never_admit = {0};
        if (!c.max_rows.empty()) vars_.back().dynamic_settings.max_rows = c.max_rows[c.max_rows.size() == 1 ? 0 : f];
      }
    }
    bottom_.widths.push_back(c.dense);
    for (int64_t w : c.bottom) bottom_.widths.push_back(static_cast<int>(w));
    bottom_.widths.push_back(c.dim);
    AddLayers("ctr/bottom", &bottom_);
    top_.widths.push_back(c.dim + features_ * (features_ - 1) / 2);
    for (int64_t w : c.top) top_.widths.push_back(static_cast<int>(w));
    top_.widths.push_back(1);
    top_.relu_last = false;
    AddLayers("ctr/top", &top_);
  }

  const std::string& name() const override { return name_; }
  const char* unit() const override { return "samples"; }
  const std::vector<VariableSpec>& Variables() const override { return vars_; }
  int64_t eval_every() const override { return c_.eval_every; }
  DataSpec data_spec() const override {
    DataSpec d;
    d.paths = {{"data", c_.data}, {"heldout_path", c_.heldout_path}};
    d.tables = c_.tables;
    d.raw_ids = c_.hashed;
    d.seed = static_cast<uint64_t>(c_.seed);
    return d;
  }

  Status SetData(ModelData data) override {
    if (!data.ctr) return InvalidArgument("model 'ctr': no training data");
    data_ = std::move(data);
    PX_RETURN_IF_ERROR(Check(data_.ctr_heldout, "held-out"));
    have_cur_ = false;
    return Status::Ok();
  }

  StatusOr<std::map<std::string, std::vector<std::vector<int64_t>>>> SampleIds(int n_batches) override {
    PX_RETURN_IF_ERROR(NeedData());
    const std::string saved = data_.ctr->SavePosition();
    std::map<std::string, std::vector<std::vector<int64_t>>> out;
    for (int i = 0; i < n_batches; ++i) {
      PX_RETURN_IF_ERROR(Draw(&next_));
      for (size_t f = 0; f < c_.tables.size(); ++f) out[vars_[f].name].push_back(next_.unique[f]);
    }
    PX_RETURN_IF_ERROR(data_.ctr->RestorePosition(saved));
    return out;
  }

  Status TrainStep(Session* s, StepStats* stats) override;
  Status Evaluate(Session* s, EvalStats* out) override;

  // The position of the batch the next step trains on. Session::Step()
  // calls it (through RegisterState) before TrainStep has moved to that batch.
  std::string SaveState() const override {
    if (!resume_position_.empty()) return resume_position_;
    return have_cur_ ? cur_.position : data_.ctr ? data_.ctr->SavePosition() : "";
  }
  Status RestoreState(std::string_view state) override {
    PX_RETURN_IF_ERROR(NeedData());
    have_cur_ = false;
    resume_position_.clear();
    return data_.ctr->RestorePosition(state);
  }

 private:
  struct Batch {
    std::string position;
    CtrBatch data;
    std::vector<std::vector<int64_t>> ids, unique;  // per table
    std::vector<std::vector<int32_t>> index;
  };

  void AddLayers(const std::string& prefix, MlpStack* m) {
    const uint64_t seed = static_cast<uint64_t>(c_.seed);
    m->first_var = static_cast<int>(vars_.size());
    for (size_t l = 0; l + 1 < m->widths.size(); ++l) {
      VariableOptions w, b;
      w.init = {Initializer::Type::kUniform, seed, GlorotScale(m->widths[l], m->widths[l + 1])};
      b.init = {Initializer::Type::kZeros, seed, 0.0f};
      const std::string layer = prefix + "/layer" + std::to_string(l);
      vars_.push_back(Dense(layer + "/weights", static_cast<size_t>(m->widths[l]) * m->widths[l + 1], w));
      vars_.push_back(Dense(layer + "/bias", static_cast<size_t>(m->widths[l + 1]), b));
    }
  }
  Status NeedData() const {
    return data_.ctr ? Status::Ok() : FailedPrecondition("model 'ctr': SetData was not called");
  }
  Status Check(const CtrBatch& b, const char* what) const {
    const size_t n = b.labels.size(), t = c_.tables.size();
    if (b.dense.size() != n * static_cast<size_t>(c_.dense) || b.categorical.size() != n * t) {
      return InvalidArgument("model 'ctr': the " + std::string(what) + " data has " +
                             std::to_string(b.dense.size()) + " dense and " +
                             std::to_string(b.categorical.size()) + " categorical values for " +
                             std::to_string(n) + " examples; expected " + std::to_string(c_.dense) +
                             " and " + std::to_string(t) + " per example");
    }
    if (c_.hashed) return Status::Ok();  // any 64-bit value is an id
    for (size_t i = 0; i < b.categorical.size(); ++i) {
      const int64_t id = b.categorical[i];
      if (id < 0 || id >= c_.tables[i % t]) {
        return InvalidArgument("model 'ctr': " + std::string(what) + " id " + std::to_string(id) +
                               " of feature " + std::to_string(i % t) + " is outside its table of " +
                               std::to_string(c_.tables[i % t]) + " rows; check [model] tables");
      }
    }
    return Status::Ok();
  }
  Status Draw(Batch* b);
  void Split(const CtrBatch& data, Batch* b);
  Status MlpForward(Session* s, MlpStack* m, Eigen::Index n);
  // Backward from d(output) in *dy; leaves d(input) in *dy when want_dx.
  Status MlpBackward(Session* s, MlpStack* m, Eigen::Index n, Matrix* dy, bool want_dx);
  // Forward of examples whose table rows are in rows[f] (u_f × dim) with
  // b->index; leaves the logits in top_.acts.back().
  Status Forward(Session* s, const Batch& b, const std::vector<std::vector<float>>& rows);

  const std::string name_ = "ctr";
  CtrConfig c_;
  ModelOptions o_;
  int features_ = 0;  // tables + 1 (the bottom output)
  std::vector<VariableSpec> vars_;
  ModelData data_;
  MlpStack bottom_, top_;
  bool have_cur_ = false;
  std::string resume_position_;  // set just before each Session::Step()
  Batch cur_, next_;
  std::vector<std::pair<int64_t, int32_t>> dedupe_scratch_;
  std::vector<std::vector<float>> rows_, drows_;
  Matrix z_, dz_, dy_, dtop_, dots_, dbottom_, mlp_dx_;
  std::vector<float> dlogit_, dw_, db_;
};

void CtrModel::Split(const CtrBatch& data, Batch* b) {
  const size_t t = c_.tables.size(), n = data.labels.size();
  b->ids.resize(t);
  b->unique.resize(t);
  b->index.resize(t);
  for (size_t f = 0; f < t; ++f) {
    b->ids[f].resize(n);
    for (size_t i = 0; i < n; ++i) b->ids[f][i] = data.categorical[i * t + f];
    Dedupe(b->ids[f], &b->unique[f], &b->index[f], &dedupe_scratch_);
  }
}

Status CtrModel::Draw(Batch* b) {
  b->position = data_.ctr->SavePosition();
  data_.ctr->Next(static_cast<size_t>(o_.batch_size), &b->data);
  if (b->data.labels.size() != static_cast<size_t>(o_.batch_size)) {
    return Internal("model 'ctr': the reader returned " + std::to_string(b->data.labels.size()) +
                    " examples, expected " + std::to_string(o_.batch_size));
  }
  PX_RETURN_IF_ERROR(Check(b->data, "training"));
  Split(b->data, b);
  return Status::Ok();
}

Status CtrModel::MlpForward(Session* s, MlpStack* m, Eigen::Index n) {
  const size_t layers = m->widths.size() - 1;
  for (size_t l = 0; l < layers; ++l) {
    PX_ASSIGN_OR_RETURN(std::span<const float> w, s->Dense(var_ids_[m->first_var + 2 * l]));
    PX_ASSIGN_OR_RETURN(std::span<const float> b, s->Dense(var_ids_[m->first_var + 2 * l + 1]));
    const int in = m->widths[l], out = m->widths[l + 1];
    m->acts[l + 1].resize(n, out);
    MatMap y(m->acts[l + 1].data(), n, out);
    LinearForward(ConstMatMap(m->acts[l].data(), n, in), ConstMatMap(w.data(), in, out),
                  ConstVecMap(b.data(), out), y);
    if (l + 1 < layers || m->relu_last) ReluForward(y);
  }
  return Status::Ok();
}

Status CtrModel::MlpBackward(Session* s, MlpStack* m, Eigen::Index n, Matrix* dy, bool want_dx) {
  const size_t layers = m->widths.size() - 1;
  Matrix& dx = mlp_dx_;
  for (size_t l = layers; l-- > 0;) {
    const int in = m->widths[l], out = m->widths[l + 1];
    if (l + 1 < layers || m->relu_last) ReluBackward(ConstMatMap(m->acts[l + 1].data(), n, out), MatMap(dy->data(), n, out));
    PX_ASSIGN_OR_RETURN(std::span<const float> w, s->Dense(var_ids_[m->first_var + 2 * l]));
    dw_.resize(static_cast<size_t>(in) * out);
    db_.resize(static_cast<size_t>(out));
    const bool need_dx = l > 0 || want_dx;
    dx.resize(n, in);
    MatMap dxm(dx.data(), n, in);
    LinearBackward(ConstMatMap(m->acts[l].data(), n, in), ConstMatMap(w.data(), in, out),
                   ConstMatMap(dy->data(), n, out), MatMap(dw_.data(), in, out),
                   VecMap(db_.data(), out), need_dx ? &dxm : nullptr);
    PX_RETURN_IF_ERROR(s->Gradient(var_ids_[m->first_var + 2 * l], dw_));
    PX_RETURN_IF_ERROR(s->Gradient(var_ids_[m->first_var + 2 * l + 1], db_));
    if (need_dx) dy->swap(dx);
  }
  return Status::Ok();
}

Status CtrModel::Forward(Session* s, const Batch& b, const std::vector<std::vector<float>>& rows) {
  const Eigen::Index n = static_cast<Eigen::Index>(b.data.labels.size()), d = c_.dim;
  const size_t t = c_.tables.size();
  bottom_.acts.resize(bottom_.widths.size());
  top_.acts.resize(top_.widths.size());
  bottom_.acts[0] = ConstMatMap(b.data.dense.data(), n, c_.dense);
  PX_RETURN_IF_ERROR(MlpForward(s, &bottom_, n));
  // z = [bottom output, e_0, …, e_{t−1}] per example.
  z_.resize(n, features_ * d);
  z_.leftCols(d) = bottom_.acts.back();
  for (size_t f = 0; f < t; ++f) {
    ConstMatMap r(rows[f].data(), static_cast<Eigen::Index>(b.unique[f].size()), d);
    for (Eigen::Index i = 0; i < n; ++i) {
      z_.block(i, static_cast<Eigen::Index>(f + 1) * d, 1, d) = r.row(b.index[f][static_cast<size_t>(i)]);
    }
  }
  const int pairs = features_ * (features_ - 1) / 2;
  top_.acts[0].resize(n, d + pairs);
  top_.acts[0].leftCols(d) = bottom_.acts.back();
  dots_.resize(n, pairs);
  DotInteractionForward(ConstMatMap(z_.data(), n, features_ * d), features_, MatMap(dots_.data(), n, pairs));
  top_.acts[0].rightCols(pairs) = dots_;
  return MlpForward(s, &top_, n);
}

Status CtrModel::TrainStep(Session* s, StepStats* stats) {
  PX_RETURN_IF_ERROR(NeedData());
  const int64_t step = s->step();
  const size_t t = c_.tables.size();
  const Eigen::Index n = o_.batch_size, d = c_.dim;
  if (!have_cur_) {
    PX_RETURN_IF_ERROR(Draw(&cur_));
    have_cur_ = true;
  }
  rows_.resize(t);
  for (size_t f = 0; f < t; ++f) PX_RETURN_IF_ERROR(s->Lookup(var_ids_[f], cur_.unique[f], &rows_[f]));
  const bool prefetch = o_.steps == 0 || step + 1 < o_.steps;
  if (prefetch) {
    PX_RETURN_IF_ERROR(Draw(&next_));
    // Every table's pull in one message per shard ([ps] batch).
    std::vector<std::span<const int64_t>> next_ids(next_.unique.begin(), next_.unique.end());
    PX_RETURN_IF_ERROR(s->PrefetchMany(std::span<const int>(var_ids_).first(t), next_ids));
  }
  PX_RETURN_IF_ERROR(Forward(s, cur_, rows_));
  dlogit_.resize(static_cast<size_t>(n));
  const double loss = SigmoidLogLoss({top_.acts.back().data(), static_cast<size_t>(n)},
                                     cur_.data.labels, dlogit_);
  dtop_ = ConstMatMap(dlogit_.data(), n, 1);
  PX_RETURN_IF_ERROR(MlpBackward(s, &top_, n, &dtop_, true));
  // dtop_ is now d(top input) = [d bottom output, d dots].
  const int pairs = features_ * (features_ - 1) / 2;
  dy_ = dtop_.rightCols(pairs);
  dz_.resize(n, features_ * d);
  DotInteractionBackward(ConstMatMap(z_.data(), n, features_ * d), ConstMatMap(dy_.data(), n, pairs),
                         features_, MatMap(dz_.data(), n, features_ * d));
  drows_.resize(t);
  for (size_t f = 0; f < t; ++f) {
    const Eigen::Index u = static_cast<Eigen::Index>(cur_.unique[f].size());
    drows_[f].assign(static_cast<size_t>(u * d), 0.0f);
    MatMap dr(drows_[f].data(), u, d);
    for (Eigen::Index i = 0; i < n; ++i) {
      dr.row(cur_.index[f][static_cast<size_t>(i)]) += dz_.block(i, static_cast<Eigen::Index>(f + 1) * d, 1, d);
    }
    PX_RETURN_IF_ERROR(s->Gradient(var_ids_[f], cur_.unique[f], drows_[f]));
  }
  dbottom_ = dtop_.leftCols(d) + dz_.leftCols(d);
  PX_RETURN_IF_ERROR(MlpBackward(s, &bottom_, n, &dbottom_, false));
  resume_position_ = prefetch ? next_.position : data_.ctr->SavePosition();
  PX_RETURN_IF_ERROR(s->Step());
  std::swap(cur_, next_);
  have_cur_ = prefetch;
  PX_RETURN_IF_ERROR(s->ReportMetrics(step, loss, n));
  stats->loss = loss;
  stats->samples = n;
  stats->units = n;
  return Status::Ok();
}

Status CtrModel::Evaluate(Session* s, EvalStats* out) {
  PX_RETURN_IF_ERROR(NeedData());
  const CtrBatch& all = data_.ctr_heldout;
  const size_t t = c_.tables.size();
  const int64_t total = std::min<int64_t>(static_cast<int64_t>(all.labels.size()), c_.eval_examples);
  if (total == 0) return InvalidArgument("model 'ctr': the held-out split is empty");
  constexpr int64_t kBlock = 2048;
  std::vector<float> scores, labels;
  double log_loss = 0;
  Batch b;
  std::vector<std::vector<float>> rows(t);
  for (int64_t first = 0; first < total; first += kBlock) {
    const int64_t m = std::min(kBlock, total - first);
    b.data.labels.assign(all.labels.begin() + first, all.labels.begin() + first + m);
    b.data.dense.assign(all.dense.begin() + first * c_.dense, all.dense.begin() + (first + m) * c_.dense);
    b.data.categorical.assign(all.categorical.begin() + first * static_cast<int64_t>(t),
                              all.categorical.begin() + (first + m) * static_cast<int64_t>(t));
    Split(b.data, &b);
    // Lookup of rows outside the step's batch: the rows as of now (a
    // pending prefetch is waited for and pulled again by the next step).
    for (size_t f = 0; f < t; ++f) PX_RETURN_IF_ERROR(s->Lookup(var_ids_[f], b.unique[f], &rows[f]));
    PX_RETURN_IF_ERROR(Forward(s, b, rows));
    const Matrix& logits = top_.acts.back();
    scores.insert(scores.end(), logits.data(), logits.data() + m);
    labels.insert(labels.end(), b.data.labels.begin(), b.data.labels.end());
    for (int64_t i = 0; i < m; ++i) {
      // −log σ(±z) = softplus(∓z), computed without overflow.
      const double z = logits.data()[i], y = b.data.labels[static_cast<size_t>(i)];
      const double signed_z = y > 0.5 ? -z : z;
      log_loss += std::max(signed_z, 0.0) + std::log1p(std::exp(-std::abs(signed_z)));
    }
  }
  out->metric = "auc";
  out->value = Auc(scores, labels);
  out->baseline_metric = data_.ctr_bayes_auc > 0 ? "bayes_auc" : "";
  out->baseline = data_.ctr_bayes_auc;
  out->extra = {{"log_loss", log_loss / static_cast<double>(total)}};
  out->examples = total;
  return Status::Ok();
}

}  // namespace

StatusOr<std::unique_ptr<Model>> CreateCtrModel(const std::string& toml, const ModelOptions& o) {
  CtrConfig c;
  PX_RETURN_IF_ERROR(ParseCtrConfig(toml, &c));
  return std::unique_ptr<Model>(std::make_unique<CtrModel>(c, o));
}

}  // namespace parallax::models
