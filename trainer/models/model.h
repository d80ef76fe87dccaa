// Model: a built-in model of parallax-trainer, written against the Session
// API. A model is created by name from the job's [model] table; it declares
// its variables from that configuration alone (so `parallax plan` can
// describe a job offline), measures the sparsity of its sparse variables
// from its own batches (SampleIds), and runs training steps and evaluations
// against a Session.
//
//   auto model = CreateModel("lm", job.model_toml, options);
//   (*model)->SetData(std::move(data));         // or the model generates its own
//   (*model)->Register(session);                // variables + sparsity samples
//   session->Start();
//   while (session->step() < steps) (*model)->TrainStep(session, &stats);
//   (*model)->Evaluate(session, &eval);         // rank 0
//
// Thread-compatible: one thread drives a model. Compute runs on
// ModelOptions::threads threads (Eigen).
#ifndef PARALLAX_TRAINER_MODELS_MODEL_H_
#define PARALLAX_TRAINER_MODELS_MODEL_H_

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "parallax/session.h"
#include "parallax/status.h"
#include "trainer/models/data_source.h"

namespace parallax::models {

// One variable as the model registers it.
struct VariableSpec {
  std::string name;
  bool sparse = false;
  size_t size = 0;   // dense: elements
  int64_t rows = 0;  // sparse: rows × dim
  uint32_t dim = 0;
  // Sparse with no row count (Session::RegisterDynamic; `rows` unused).
  bool dynamic = false;
  DynamicTableSettings dynamic_settings;
  VariableOptions options;
};

// What a model needs to know about the job beyond its [model] table.
// The batches of its own data a rank samples (SampleIds) for the plan to
// measure each sparse variable's density: parallax-trainer's rank 0 and
// `parallax plan` alike.
inline constexpr int kPlanSampleBatches = 4;
// With [ps] hot_rows on: a hot row's expected share of the steps to come is
// its share of the other sampled batches (core/plan/hot_rows.h), which 4
// batches measure only in thirds.
inline constexpr int kHotRowsSampleBatches = 16;
// The batches a job whose [ps] hot_rows is `hot_rows` samples.
inline int PlanSampleBatches(int64_t hot_rows) {
  return hot_rows != 0 ? kHotRowsSampleBatches : kPlanSampleBatches;
}

struct ModelOptions {
  int rank = 0;
  int world_size = 1;
  int batch_size = 32;  // examples per rank per step
  int64_t steps = 0;    // steps of the job; 0: unknown (the last step prefetches anyway)
};

struct StepStats {
  double loss = 0;       // batch-mean training loss of this rank
  int64_t samples = 0;   // examples of this rank's batch
  int64_t units = 0;     // throughput units (tokens for lm, samples otherwise)
};

struct EvalStats {
  std::string metric;        // "perplexity", "auc", "accuracy"
  double value = 0;
  std::string baseline_metric;  // e.g. "unigram_perplexity", "bayes_auc"; empty: none
  double baseline = 0;
  // Further held-out figures, printed after the baseline (ctr: "log_loss",
  // the mean log loss in nats).
  std::vector<std::pair<std::string, double>> extra;
  int64_t examples = 0;
};

class Model {
 public:
  virtual ~Model() = default;

  virtual const std::string& name() const = 0;
  // "tokens" or "samples": what StepStats::units counts.
  virtual const char* unit() const = 0;
  // The variables in registration order, from the configuration alone.
  virtual const std::vector<VariableSpec>& Variables() const = 0;
  // Steps between evaluations (0: only at the end).
  virtual int64_t eval_every() const = 0;

  // Hands the model its data. INVALID_ARGUMENT naming what is missing or
  // inconsistent with the configuration (e.g. an id >= vocab).
  virtual Status SetData(ModelData data) = 0;
  // What the model's data files are and how to read them (parallax-trainer
  // opens them with core/data; see model_data.h).
  struct DataSpec {
    std::map<std::string, std::string> paths;  // [model] key -> path ("" when not set)
    uint32_t context = 0;                      // lm: tokens of context
    std::vector<int64_t> tables;               // ctr: table sizes
    bool raw_ids = false;                      // ctr: 64-bit ids, no table sizes
    uint64_t seed = 1;                         // shuffling seed
  };
  virtual DataSpec data_spec() const = 0;

  // For each sparse variable (by name), the ids each of the next n batches
  // touches, negatives included. Leaves the data position where it was.
  virtual StatusOr<std::map<std::string, std::vector<std::vector<int64_t>>>> SampleIds(
      int n_batches) = 0;

  // Registers Variables() with `session` in order and reports SampleIds over
  // `sample_batches` batches. Before session->Start().
  Status Register(Session* session, int sample_batches = kPlanSampleBatches) {
    return RegisterWith(session, sample_batches);
  }
  // The same into anything with the Session's RegisterDense, RegisterSparse,
  // RegisterDynamic and SampleIds: `parallax plan` registers into the VariableRegistry the
  // plan is built from, exactly as a rank does.
  template <typename Target>
  Status RegisterWith(Target* target, int sample_batches);

  // One training step: lookups (and the prefetch of the next batch's rows),
  // forward, backward, gradients in backward order, session->Step(),
  // session->ReportMetrics().
  virtual Status TrainStep(Session* session, StepStats* stats) = 0;
  // Held-out evaluation with the session's current values. Does not advance
  // the session; any rank may call it (parallax-trainer uses rank 0).
  virtual Status Evaluate(Session* session, EvalStats* out) = 0;

  // State beyond the session's variables that a checkpoint must keep (the
  // data position); RestoreState takes what SaveState returned.
  virtual std::string SaveState() const = 0;
  virtual Status RestoreState(std::string_view state) = 0;

 protected:
  // Session ids of Variables(), filled by Register().
  std::vector<int> var_ids_;
};

template <typename Target>
Status Model::RegisterWith(Target* target, int sample_batches) {
  var_ids_.clear();
  std::map<std::string, int> by_name;
  for (const VariableSpec& v : Variables()) {
    StatusOr<int> id =
        v.dynamic  ? target->RegisterDynamic(v.name, v.dim, v.dynamic_settings, v.options)
        : v.sparse ? target->RegisterSparse(v.name, v.rows, v.dim, v.options)
                   : target->RegisterDense(v.name, v.size, v.options);
    if (!id.ok()) return id.status().WithContext("model '" + name() + "'");
    var_ids_.push_back(*id);
    by_name[v.name] = *id;
  }
  if (sample_batches <= 0) return Status::Ok();
  PX_ASSIGN_OR_RETURN(auto samples, SampleIds(sample_batches));
  for (const auto& [var, batches] : samples) {
    for (const auto& ids : batches) PX_RETURN_IF_ERROR(target->SampleIds(by_name.at(var), ids));
  }
  return Status::Ok();
}

// The built-in models' names: lm, ctr, mlp.
std::vector<std::string> ModelNames();

// Creates model `name` from the [model] table's TOML text. INVALID_ARGUMENT
// for an unknown model (listing the names) or a bad or unknown key (naming
// it and the model's keys).
StatusOr<std::unique_ptr<Model>> CreateModel(const std::string& name, const std::string& model_toml,
                                             const ModelOptions& options);

}  // namespace parallax::models

#endif  // PARALLAX_TRAINER_MODELS_MODEL_H_
