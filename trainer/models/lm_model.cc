// The "lm" model: a word-level language model predicting token t from the k
// tokens before it. Input embedding (sparse V×d) → concat or mean of the k
// context rows → Linear + ReLU → Linear to d (h) → negative sampling against
// an output embedding (sparse V×d) with a per-row bias (sparse V×1).
// Evaluation: full-softmax perplexity of held-out tokens, the output table
// read in chunks (Session::ReadSparse), next to the unigram model's.
#include <algorithm>
#include <cmath>

#include "trainer/models/layers.h"
#include "trainer/models/model_config.h"
#include "trainer/models/model_internal.h"
#include "trainer/models/sampling.h"

namespace parallax::models {
namespace {

struct LmConfig {
  std::string data, heldout_path, vocab_path;
  int64_t vocab = 50'000;
  int dim = 128;
  int context = 4;
  int hidden = 512;
  std::string context_mode = "concat";
  int negatives = 16;
  std::string negative_sharing = "example";
  double power = 0.75;
  std::string init = "uniform";
  double init_scale = 0.05;
  int64_t eval_every = 0;
  int64_t eval_tokens = 10'000;
  int threads = 1;
  int64_t seed = 1;
};

Status ParseLmConfig(const std::string& toml, LmConfig* c) {
  PX_ASSIGN_OR_RETURN(ModelConfig m, ModelConfig::Parse(toml, "lm"));
  PX_RETURN_IF_ERROR(m.String("data", &c->data));
  PX_RETURN_IF_ERROR(m.String("heldout_path", &c->heldout_path));
  PX_RETURN_IF_ERROR(m.String("vocab_path", &c->vocab_path));
  PX_RETURN_IF_ERROR(m.Int("vocab", 2, int64_t{1} << 31, &c->vocab));
  PX_RETURN_IF_ERROR(m.Int("dim", 1, 4096, &c->dim));
  PX_RETURN_IF_ERROR(m.Int("context", 1, 64, &c->context));
  PX_RETURN_IF_ERROR(m.Int("hidden", 1, 65536, &c->hidden));
  PX_RETURN_IF_ERROR(m.Choice("context_mode", {"concat", "mean"}, &c->context_mode));
  PX_RETURN_IF_ERROR(m.Int("negatives", 1, 4096, &c->negatives));
  PX_RETURN_IF_ERROR(m.Choice("negative_sharing", {"example", "batch"}, &c->negative_sharing));
  PX_RETURN_IF_ERROR(m.Double("negative_power", 0.0, 2.0, &c->power));
  PX_RETURN_IF_ERROR(m.Choice("init", {"uniform", "normal"}, &c->init));
  PX_RETURN_IF_ERROR(m.Double("init_scale", 0.0, 10.0, &c->init_scale));
  PX_RETURN_IF_ERROR(m.Int("eval_every", 0, INT64_MAX, &c->eval_every));
  PX_RETURN_IF_ERROR(m.Int("eval_tokens", 1, INT64_MAX, &c->eval_tokens));
  PX_RETURN_IF_ERROR(m.Int("threads", 1, 256, &c->threads));
  PX_RETURN_IF_ERROR(m.Int("seed", 0, INT64_MAX, &c->seed));
  return m.Finish();
}

// One batch and everything derived from it before the step runs.
struct LmBatch {
  std::string position;  // the data position before this batch
  TokenBatch tokens;
  std::vector<int64_t> in_ids, in_unique, out_ids, out_unique;
  std::vector<int32_t> in_index, out_index;  // into *_unique
};

class LmModel final : public Model {
 public:
  LmModel(const LmConfig& c, const ModelOptions& o) : c_(c), o_(o) {
    SetComputeThreads(c.threads);
    const int d_in = c.context_mode == "concat" ? c.context * c.dim : c.dim;
    d_in_ = d_in;
    const uint64_t seed = static_cast<uint64_t>(c.seed);
    auto uniform = [&](float scale) {
      VariableOptions v;
      v.init = {Initializer::Type::kUniform, seed, scale};
      return v;
    };
    VariableOptions zeros;
    zeros.init = {Initializer::Type::kZeros, seed, 0.0f};
    // Embeddings N(0, scale²) or U(±scale); Linear layers U(±1/√fan_in)
    // (PyTorch's defaults, so W3 starts where its PyTorch peer does).
    VariableOptions emb;
    emb.init = {c.init == "normal" ? Initializer::Type::kNormal : Initializer::Type::kUniform, seed,
                static_cast<float>(c.init_scale)};
    const float in1 = static_cast<float>(1 / std::sqrt(static_cast<double>(d_in)));
    const float in2 = static_cast<float>(1 / std::sqrt(static_cast<double>(c.hidden)));
    vars_ = {
        Sparse("lm/input_embedding", c.vocab, c.dim, emb),
        Dense("lm/hidden/weights", static_cast<size_t>(d_in) * c.hidden, uniform(in1)),
        Dense("lm/hidden/bias", static_cast<size_t>(c.hidden), uniform(in1)),
        Dense("lm/projection/weights", static_cast<size_t>(c.hidden) * c.dim, uniform(in2)),
        Dense("lm/projection/bias", static_cast<size_t>(c.dim), uniform(in2)),
        Sparse("lm/output_embedding", c.vocab, c.dim, emb),
        Sparse("lm/output_bias", c.vocab, 1, zeros),
    };
  }

  const std::string& name() const override { return name_; }
  const char* unit() const override { return "tokens"; }
  const std::vector<VariableSpec>& Variables() const override { return vars_; }
  int64_t eval_every() const override { return c_.eval_every; }

  DataSpec data_spec() const override {
    DataSpec d;
    d.paths = {{"data", c_.data}, {"heldout_path", c_.heldout_path}, {"vocab_path", c_.vocab_path}};
    d.context = static_cast<uint32_t>(c_.context);
    d.seed = static_cast<uint64_t>(c_.seed);
    return d;
  }

  Status SetData(ModelData data) override {
    if (!data.tokens) return InvalidArgument("model 'lm': no training tokens");
    if (data.counts.size() > static_cast<size_t>(c_.vocab)) {
      return InvalidArgument("model 'lm': the vocabulary has " +
                             std::to_string(data.counts.size()) + " words but [model] vocab = " +
                             std::to_string(c_.vocab) + "; set vocab to at least the vocabulary's size");
    }
    // Rows past the vocabulary (a corpus with fewer words than vocab) are
    // never a target and never drawn as negatives.
    data.counts.resize(static_cast<size_t>(c_.vocab), 0);
    for (uint32_t t : data.heldout_tokens) {
      if (t >= c_.vocab) {
        return InvalidArgument("model 'lm': held-out token id " + std::to_string(t) +
                               " is not below vocab = " + std::to_string(c_.vocab));
      }
    }
    data_ = std::move(data);
    std::vector<double> w(data_.counts.size());
    total_count_ = 0;
    for (size_t i = 0; i < w.size(); ++i) {
      w[i] = std::pow(static_cast<double>(data_.counts[i]), c_.power);
      total_count_ += static_cast<double>(data_.counts[i]);
    }
    if (total_count_ == 0) return InvalidArgument("model 'lm': every vocabulary count is 0");
    negatives_ = AliasTable(w);
    have_cur_ = false;
    return Status::Ok();
  }

  StatusOr<std::map<std::string, std::vector<std::vector<int64_t>>>> SampleIds(
      int n_batches) override {
    PX_RETURN_IF_ERROR(NeedData());
    const std::string saved = data_.tokens->SavePosition();
    std::map<std::string, std::vector<std::vector<int64_t>>> out;
    LmBatch b;
    for (int i = 0; i < n_batches; ++i) {
      PX_RETURN_IF_ERROR(Draw(-1 - i, &b));
      out[vars_[kIn].name].push_back(b.in_unique);
      out[vars_[kOut].name].push_back(b.out_unique);
      out[vars_[kBias].name].push_back(b.out_unique);
    }
    PX_RETURN_IF_ERROR(data_.tokens->RestorePosition(saved));
    return out;
  }

  Status TrainStep(Session* s, StepStats* stats) override;
  Status Evaluate(Session* s, EvalStats* out) override;

  // The position of the batch the next step trains on. Session::Step()
  // calls it (through RegisterState) before TrainStep has moved to that batch.
  std::string SaveState() const override {
    if (!resume_position_.empty()) return resume_position_;
    return have_cur_ ? cur_.position : data_.tokens ? data_.tokens->SavePosition() : "";
  }
  Status RestoreState(std::string_view state) override {
    PX_RETURN_IF_ERROR(NeedData());
    have_cur_ = false;
    resume_position_.clear();
    return data_.tokens->RestorePosition(state);
  }

 private:
  enum { kIn = 0, kW1, kB1, kW2, kB2, kOut, kBias };

  Status NeedData() const {
    return data_.tokens ? Status::Ok() : FailedPrecondition("model 'lm': SetData was not called");
  }
  Status Draw(int64_t step, LmBatch* b);
  // h (n×d) of the examples whose context rows are gathered in `x`.
  void Hidden(const ConstMatMap& x, std::span<const float> w1, std::span<const float> b1,
              std::span<const float> w2, std::span<const float> b2, Matrix* a1, Matrix* h) const;

  const std::string name_ = "lm";
  LmConfig c_;
  ModelOptions o_;
  int d_in_ = 0;
  std::vector<VariableSpec> vars_;
  ModelData data_;
  AliasTable negatives_;
  double total_count_ = 0;

  bool have_cur_ = false;
  std::string resume_position_;  // set just before each Session::Step()
  LmBatch cur_, next_;
  std::vector<std::pair<int64_t, int32_t>> dedupe_scratch_;
  // Step buffers, reused.
  std::vector<float> in_rows_, out_rows_, bias_rows_;
  Matrix x_, a1_, h_, dh_, da1_, dx_;
  std::vector<float> dw1_, db1_, dw2_, db2_, din_, dout_, dbias_;
  NegSamplingScratch ns_;
};

Status LmModel::Draw(int64_t step, LmBatch* b) {
  const size_t n = static_cast<size_t>(o_.batch_size), k = static_cast<size_t>(c_.context);
  const size_t negs = static_cast<size_t>(c_.negatives);
  b->position = data_.tokens->SavePosition();
  data_.tokens->Next(n, &b->tokens);
  if (b->tokens.targets.size() != n || b->tokens.context.size() != n * k) {
    return Internal("model 'lm': the reader returned " + std::to_string(b->tokens.targets.size()) +
                    " examples with " + std::to_string(b->tokens.context.size()) +
                    " context ids; expected " + std::to_string(n) + " × " + std::to_string(k));
  }
  b->in_ids.assign(b->tokens.context.begin(), b->tokens.context.end());
  b->out_ids.assign(b->tokens.targets.begin(), b->tokens.targets.end());
  for (int64_t id : b->in_ids) {
    if (id >= c_.vocab) {
      return InvalidArgument("model 'lm': token id " + std::to_string(id) +
                             " in the training data is not below vocab = " +
                             std::to_string(c_.vocab));
    }
  }
  for (int64_t id : b->out_ids) {
    if (id >= c_.vocab) {
      return InvalidArgument("model 'lm': token id " + std::to_string(id) +
                             " in the training data is not below vocab = " +
                             std::to_string(c_.vocab));
    }
  }
  const uint64_t seed = static_cast<uint64_t>(c_.seed);
  if (c_.negative_sharing == "batch") {
    // One set per rank and step.
    HashRng rng(Hash(seed, static_cast<uint64_t>(step), static_cast<uint64_t>(o_.rank)));
    for (size_t m = 0; m < negs; ++m) b->out_ids.push_back(negatives_.Sample(rng.Next()));
  } else {
    // Per example, keyed by the example's index in the global batch (rank-
    // major interleaving, as the readers shard): N ranks × B draw what one
    // rank × N·B draws.
    for (size_t i = 0; i < n; ++i) {
      const uint64_t global = i * static_cast<uint64_t>(o_.world_size) + static_cast<uint64_t>(o_.rank);
      HashRng rng(Hash(seed, static_cast<uint64_t>(step), global));
      for (size_t m = 0; m < negs; ++m) b->out_ids.push_back(negatives_.Sample(rng.Next()));
    }
  }
  Dedupe(b->in_ids, &b->in_unique, &b->in_index, &dedupe_scratch_);
  Dedupe(b->out_ids, &b->out_unique, &b->out_index, &dedupe_scratch_);
  return Status::Ok();
}

void LmModel::Hidden(const ConstMatMap& x, std::span<const float> w1, std::span<const float> b1,
                     std::span<const float> w2, std::span<const float> b2, Matrix* a1,
                     Matrix* h) const {
  const Eigen::Index n = x.rows();
  a1->resize(n, c_.hidden);
  LinearForward(x, ConstMatMap(w1.data(), d_in_, c_.hidden), ConstVecMap(b1.data(), c_.hidden),
                MatMap(a1->data(), n, c_.hidden));
  ReluForward(MatMap(a1->data(), n, c_.hidden));
  h->resize(n, c_.dim);
  LinearForward(ConstMatMap(a1->data(), n, c_.hidden), ConstMatMap(w2.data(), c_.hidden, c_.dim),
                ConstVecMap(b2.data(), c_.dim), MatMap(h->data(), n, c_.dim));
}

Status LmModel::TrainStep(Session* s, StepStats* stats) {
  PX_RETURN_IF_ERROR(NeedData());
  const int64_t step = s->step();
  const Eigen::Index n = o_.batch_size, d = c_.dim, hid = c_.hidden;
  const int k = c_.context;
  if (!have_cur_) {
    PX_RETURN_IF_ERROR(Draw(step, &cur_));
    have_cur_ = true;
  }
  const int in = var_ids_[kIn], out = var_ids_[kOut], bias = var_ids_[kBias];
  PX_RETURN_IF_ERROR(s->Lookup(in, cur_.in_unique, &in_rows_));
  PX_RETURN_IF_ERROR(s->Lookup(out, cur_.out_unique, &out_rows_));
  PX_RETURN_IF_ERROR(s->Lookup(bias, cur_.out_unique, &bias_rows_));
  // The next batch's rows are pulled while this one computes.
  if (o_.steps == 0 || step + 1 < o_.steps) {
    PX_RETURN_IF_ERROR(Draw(step + 1, &next_));
    const int vars[] = {in, out, bias};
    const std::span<const int64_t> ids[] = {next_.in_unique, next_.out_unique, next_.out_unique};
    PX_RETURN_IF_ERROR(s->PrefetchMany(vars, ids));
  }
  PX_ASSIGN_OR_RETURN(std::span<const float> w1, s->Dense(var_ids_[kW1]));
  PX_ASSIGN_OR_RETURN(std::span<const float> b1, s->Dense(var_ids_[kB1]));
  PX_ASSIGN_OR_RETURN(std::span<const float> w2, s->Dense(var_ids_[kW2]));
  PX_ASSIGN_OR_RETURN(std::span<const float> b2, s->Dense(var_ids_[kB2]));

  // Forward.
  const Eigen::Index u_in = static_cast<Eigen::Index>(cur_.in_unique.size());
  const Eigen::Index u_out = static_cast<Eigen::Index>(cur_.out_unique.size());
  ConstMatMap in_rows(in_rows_.data(), u_in, d);
  x_.resize(n, d_in_);
  if (c_.context_mode == "concat") {
    GatherConcat(in_rows, cur_.in_index, k, MatMap(x_.data(), n, d_in_));
  } else {
    GatherMean(in_rows, cur_.in_index, k, MatMap(x_.data(), n, d_in_));
  }
  ConstMatMap x(x_.data(), n, d_in_);
  Hidden(x, w1, b1, w2, b2, &a1_, &h_);

  // Loss and its gradient.
  dh_.resize(n, d);
  dout_.assign(static_cast<size_t>(u_out * d), 0.0f);
  dbias_.assign(static_cast<size_t>(u_out), 0.0f);
  const std::span<const int32_t> pos(cur_.out_index.data(), static_cast<size_t>(n));
  const std::span<const int32_t> neg(cur_.out_index.data() + n, cur_.out_index.size() - static_cast<size_t>(n));
  const double loss = NegativeSamplingLoss(
      ConstMatMap(h_.data(), n, d), ConstMatMap(out_rows_.data(), u_out, d),
      ConstVecMap(bias_rows_.data(), u_out), pos, neg, c_.negatives,
      c_.negative_sharing == "batch", MatMap(dh_.data(), n, d), MatMap(dout_.data(), u_out, d),
      VecMap(dbias_.data(), u_out), &ns_);
  PX_RETURN_IF_ERROR(s->Gradient(out, cur_.out_unique, dout_));
  PX_RETURN_IF_ERROR(s->Gradient(bias, cur_.out_unique, dbias_));

  // Backward through the MLP, dense gradients in backward order.
  dw2_.resize(static_cast<size_t>(hid * d));
  db2_.resize(static_cast<size_t>(d));
  da1_.resize(n, hid);
  MatMap da1(da1_.data(), n, hid);
  LinearBackward(ConstMatMap(a1_.data(), n, hid), ConstMatMap(w2.data(), hid, d),
                 ConstMatMap(dh_.data(), n, d), MatMap(dw2_.data(), hid, d), VecMap(db2_.data(), d),
                 &da1);
  PX_RETURN_IF_ERROR(s->Gradient(var_ids_[kW2], dw2_));
  PX_RETURN_IF_ERROR(s->Gradient(var_ids_[kB2], db2_));
  ReluBackward(ConstMatMap(a1_.data(), n, hid), da1);
  dw1_.resize(static_cast<size_t>(d_in_ * hid));
  db1_.resize(static_cast<size_t>(hid));
  dx_.resize(n, d_in_);
  MatMap dx(dx_.data(), n, d_in_);
  LinearBackward(x, ConstMatMap(w1.data(), d_in_, hid), ConstMatMap(da1_.data(), n, hid),
                 MatMap(dw1_.data(), d_in_, hid), VecMap(db1_.data(), hid), &dx);
  PX_RETURN_IF_ERROR(s->Gradient(var_ids_[kW1], dw1_));
  PX_RETURN_IF_ERROR(s->Gradient(var_ids_[kB1], db1_));
  din_.assign(static_cast<size_t>(u_in * d), 0.0f);
  if (c_.context_mode == "concat") {
    ScatterConcat(ConstMatMap(dx_.data(), n, d_in_), cur_.in_index, k, MatMap(din_.data(), u_in, d));
  } else {
    ScatterMean(ConstMatMap(dx_.data(), n, d_in_), cur_.in_index, k, MatMap(din_.data(), u_in, d));
  }
  PX_RETURN_IF_ERROR(s->Gradient(in, cur_.in_unique, din_));

  const bool prefetched = o_.steps == 0 || step + 1 < o_.steps;
  resume_position_ = prefetched ? next_.position : data_.tokens->SavePosition();
  PX_RETURN_IF_ERROR(s->Step());
  std::swap(cur_, next_);
  have_cur_ = prefetched;
  PX_RETURN_IF_ERROR(s->ReportMetrics(step, loss, n));
  stats->loss = loss;
  stats->samples = n;
  stats->units = n;
  return Status::Ok();
}

Status LmModel::Evaluate(Session* s, EvalStats* out) {
  PX_RETURN_IF_ERROR(NeedData());
  const std::vector<uint32_t>& tokens = data_.heldout_tokens;
  const int64_t k = c_.context, d = c_.dim, vocab = c_.vocab;
  if (static_cast<int64_t>(tokens.size()) <= k) {
    return InvalidArgument("model 'lm': the held-out split has " + std::to_string(tokens.size()) +
                           " tokens; it needs more than context = " + std::to_string(k));
  }
  // Evaluation positions: eval_tokens of them spread evenly.
  const int64_t available = static_cast<int64_t>(tokens.size()) - k;
  const int64_t n = std::min(available, c_.eval_tokens);
  std::vector<int64_t> positions(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) positions[static_cast<size_t>(i)] = k + i * available / n;

  constexpr int64_t kChunk = 4096;
  std::vector<float> chunk, chunk_bias;
  // The input rows the contexts use: the whole input table, read in chunks.
  std::vector<float> input(static_cast<size_t>(vocab * d));
  for (int64_t first = 0; first < vocab; first += kChunk) {
    const int64_t c = std::min(kChunk, vocab - first);
    PX_RETURN_IF_ERROR(s->ReadSparse(var_ids_[kIn], first, c, &chunk));
    std::copy(chunk.begin(), chunk.end(), input.begin() + first * d);
  }
  PX_ASSIGN_OR_RETURN(std::span<const float> w1, s->Dense(var_ids_[kW1]));
  PX_ASSIGN_OR_RETURN(std::span<const float> b1, s->Dense(var_ids_[kB1]));
  PX_ASSIGN_OR_RETURN(std::span<const float> w2, s->Dense(var_ids_[kW2]));
  PX_ASSIGN_OR_RETURN(std::span<const float> b2, s->Dense(var_ids_[kB2]));

  // Hidden states in blocks, each with its own streaming softmax.
  constexpr int64_t kBlock = 1024;
  std::vector<FullSoftmax> blocks;
  std::vector<int32_t> index;
  Matrix x, a1, h;
  double unigram_ll = 0;
  for (int64_t first = 0; first < n; first += kBlock) {
    const int64_t m = std::min(kBlock, n - first);
    std::vector<uint32_t> targets(static_cast<size_t>(m));
    index.resize(static_cast<size_t>(m * k));
    for (int64_t i = 0; i < m; ++i) {
      const int64_t p = positions[static_cast<size_t>(first + i)];
      targets[static_cast<size_t>(i)] = tokens[static_cast<size_t>(p)];
      for (int64_t j = 0; j < k; ++j)
        index[static_cast<size_t>(i * k + j)] = static_cast<int32_t>(tokens[static_cast<size_t>(p - k + j)]);
      // Add-one smoothed unigram model of the training split.
      unigram_ll += std::log((static_cast<double>(data_.counts[targets[static_cast<size_t>(i)]]) + 1) /
                             (total_count_ + static_cast<double>(vocab)));
    }
    x.resize(m, d_in_);
    ConstMatMap table(input.data(), vocab, d);
    if (c_.context_mode == "concat") {
      GatherConcat(table, index, static_cast<int>(k), MatMap(x.data(), m, d_in_));
    } else {
      GatherMean(table, index, static_cast<int>(k), MatMap(x.data(), m, d_in_));
    }
    Hidden(ConstMatMap(x.data(), m, d_in_), w1, b1, w2, b2, &a1, &h);
    blocks.emplace_back(ConstMatMap(h.data(), m, d), targets);
  }
  input = {};
  // Negative sampling's optimum is s(w|c) = log p(w|c) − log(K·q(w)) with q
  // the noise distribution, so the model's distribution is the softmax of
  // s(w|c) + log q(w) (K cancels). q is add-one smoothed here so that words
  // never drawn as negatives (count 0, e.g. <unk>) keep a probability.
  double q_total = 0;
  for (int64_t w = 0; w < vocab; ++w)
    q_total += std::pow(static_cast<double>(data_.counts[static_cast<size_t>(w)]) + 1, c_.power);
  Matrix logits;
  for (int64_t first = 0; first < vocab; first += kChunk) {
    const int64_t c = std::min(kChunk, vocab - first);
    PX_RETURN_IF_ERROR(s->ReadSparse(var_ids_[kOut], first, c, &chunk));
    PX_RETURN_IF_ERROR(s->ReadSparse(var_ids_[kBias], first, c, &chunk_bias));
    for (int64_t j = 0; j < c; ++j) {
      const double q =
          std::pow(static_cast<double>(data_.counts[static_cast<size_t>(first + j)]) + 1, c_.power) /
          q_total;
      chunk_bias[static_cast<size_t>(j)] += static_cast<float>(std::log(q));
    }
    for (FullSoftmax& b : blocks) {
      b.AddChunk(first, ConstMatMap(chunk.data(), c, d), ConstVecMap(chunk_bias.data(), c), &logits);
    }
  }
  double ll = 0;
  for (const FullSoftmax& b : blocks) ll += b.LogLikelihood();
  out->metric = "perplexity";
  out->value = std::exp(-ll / static_cast<double>(n));
  out->baseline_metric = "unigram_perplexity";
  out->baseline = std::exp(-unigram_ll / static_cast<double>(n));
  out->examples = n;
  return Status::Ok();
}

}  // namespace

StatusOr<std::unique_ptr<Model>> CreateLmModel(const std::string& toml, const ModelOptions& o) {
  LmConfig c;
  PX_RETURN_IF_ERROR(ParseLmConfig(toml, &c));
  return std::unique_ptr<Model>(std::make_unique<LmModel>(c, o));
}

}  // namespace parallax::models
