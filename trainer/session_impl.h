// SessionImpl: the libparallax Session over core/comm (dense collectives),
// core/ps (the PS client) and core/optim (worker-side optimizers). Private to
// px_trainer: trainer/session.cc holds registration, Start(), the step and
// checkpoints; trainer/session_sparse.cc the sparse-variable paths (PS
// pull/push/prefetch, local aggregation, the all-gather exchange);
// trainer/session_device.cc gradients in device memory.
#ifndef PARALLAX_TRAINER_SESSION_IMPL_H_
#define PARALLAX_TRAINER_SESSION_IMPL_H_

#include <algorithm>
#include <chrono>
#include <cmath>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "core/base/logging.h"
#include "core/comm/communicator.h"
#include "core/comm/gradient_fusion.h"
#include "core/comm/rendezvous_store.h"
#include "core/optim/optimizer.h"
#include "core/ps/client.h"
#include "core/rpc/coordinator_client.h"
#include "trainer/checkpoint.h"
#include "trainer/include/parallax/session.h"
#include "trainer/job_plan.h"
#include "trainer/search_trial.h"
#include "trainer/step_metrics.h"
#include "trainer/timeline.h"

namespace parallax::trainer {

// Output of a PS pull: written by the PS client's I/O thread until its
// ticket completes, so it lives behind a pointer that never moves, and a
// pull whose wait timed out keeps its buffer alive until the client is gone.
using PullBuffer = std::unique_ptr<std::vector<float>>;

// A pull started by Prefetch(). The step it is for looks rows up in it once
// it arrived, as often as it likes (a model may call a table several times).
struct Prefetched {
  int64_t clock = 0;
  std::vector<int64_t> ids;
  PullBuffer rows = std::make_unique<std::vector<float>>();
  ps::Ticket ticket = 0;
  bool arrived = false;  // rows holds ids.size() × dim values
  std::unordered_map<int64_t, uint32_t> row_of;  // id → its first position in ids, once arrived
};

struct Var {
  Registration reg;
  std::vector<float> initial_values;
  // After Start().
  PlannedVariable plan;
  std::vector<float> values;         // dense values, or the replica of a sparse table
  std::vector<float> grad;           // dense gradient / whole-table gradient (allreduce)
  bool grad_given = false;           // this step
  std::vector<int64_t> pending_ids;  // sparse rows of this step (allgather, ps)
  std::vector<float> pending_grads;
  std::unique_ptr<optim::DenseOptimizer> dense_opt;
  std::unique_ptr<optim::SparseOptimizer> sparse_opt;
  std::unique_ptr<Prefetched> prefetch;    // Prefetch() of this step, for the next one
  std::unique_ptr<Prefetched> prefetched;  // the one for this step (moved at Step())
  std::vector<float> pulled;  // dense on PS: PushPull output
  // Sparsity samples.
  double density_sum = 0;
  int density_samples = 0;
};

class SessionImpl final : public Session {
 public:
  explicit SessionImpl(SessionOptions options)
      : options_(std::move(options)),
        timeline_(trainer::TimelineOptions::ForRank(options_.timeline_dir, options_.rank,
                                                    options_.timeline_max_events)) {}
  ~SessionImpl() override {
    // The PS client's thread writes into our pull buffers: stop it first.
    ps_.reset();
    fusion_.reset();
    if (started_ && timeline_.enabled()) {
      Status st = timeline_.Write();
      if (!st.ok()) PX_LOG(WARNING) << "rank " << options_.rank << ": " << st.ToString();
    }
  }

  Status Connect() {
    if (options_.coordinator.empty()) return Status::Ok();
    CoordinatorClientOptions copts = CoordinatorOptions();
    PX_ASSIGN_OR_RETURN(coord_, CoordinatorClient::Connect(copts));
    PX_RETURN_IF_ERROR(trainer::ApplySearchSpec(coord_.get(), &options_));
    trial_ = trainer::TrialTimer(options_.trial_warmup_steps, options_.trial_steps);
    return Status::Ok();
  }

  StatusOr<int> RegisterDense(const std::string& name, size_t size,
                              const VariableOptions& options) override {
    if (size == 0) return InvalidArgument("dense variable \"" + name + "\" has size 0");
    if (!options.initial_values.empty() && options.initial_values.size() != size) {
      return InvalidArgument("dense variable \"" + name +
                             "\": " + std::to_string(options.initial_values.size()) +
                             " initial values for size " + std::to_string(size));
    }
    Registration r;
    r.var.sparse = false;
    r.var.size = size;
    r.var.dim = DenseRowDim(size);
    r.var.rows = static_cast<int64_t>((size + r.var.dim - 1) / r.var.dim);
    r.explicit_values = !options.initial_values.empty();
    PX_ASSIGN_OR_RETURN(int id, Register(name, std::move(r), options, options_.dense_optimizer));
    vars_[static_cast<size_t>(id)].initial_values = options.initial_values;
    return id;
  }

  StatusOr<int> RegisterSparse(const std::string& name, int64_t rows, uint32_t dim,
                               const VariableOptions& options) override {
    if (rows <= 0 || dim == 0) {
      return InvalidArgument("sparse variable \"" + name + "\" needs rows > 0 and dim > 0, got " +
                             std::to_string(rows) + "x" + std::to_string(dim));
    }
    if (!options.initial_values.empty()) {
      return InvalidArgument("sparse variable \"" + name +
                             "\": initial_values are for dense variables; use an Initializer");
    }
    Registration r;
    r.var.sparse = true;
    r.var.rows = rows;
    r.var.dim = dim;
    return Register(name, std::move(r), options, options_.sparse_optimizer);
  }

  Status RegisterState(const std::string& name, std::function<std::string()> save,
                       std::function<Status(std::string_view)> restore) override {
    if (started_) return FailedPrecondition("state \"" + name + "\" registered after Start()");
    return states_.Register(name, std::move(save), std::move(restore));
  }
  std::optional<int64_t> resumed_from() const override { return resumed_from_; }

  Status SampleIds(int var, std::span<const int64_t> ids) override {
    PX_RETURN_IF_ERROR(CheckVar(var, /*sparse=*/true, "SampleIds"));
    Var& v = vars_[static_cast<size_t>(var)];
    std::vector<int64_t> unique(ids.begin(), ids.end());
    std::sort(unique.begin(), unique.end());
    unique.erase(std::unique(unique.begin(), unique.end()), unique.end());
    v.density_sum += static_cast<double>(unique.size()) / static_cast<double>(v.reg.var.rows);
    ++v.density_samples;
    // Row frequencies for partition placement, bounded so sampling a huge
    // table stays small (a few batches' distinct rows in practice).
    constexpr size_t kMaxSampledRows = 1 << 20;
    for (int64_t id : ids) {
      if (id < 0 || id >= v.reg.var.rows) continue;
      if (v.reg.row_samples.size() < kMaxSampledRows || v.reg.row_samples.count(id)) {
        ++v.reg.row_samples[id];
      }
    }
    return Status::Ok();
  }

  Status Start() override;

  StatusOr<VariablePath> PathOf(int var) const override {
    if (!started_) return FailedPrecondition("PathOf before Start()");
    if (var < 0 || static_cast<size_t>(var) >= vars_.size())
      return NotFound("no variable " + std::to_string(var));
    return vars_[static_cast<size_t>(var)].plan.path;
  }

  Status Prefetch(int var, std::span<const int64_t> next_ids) override;
  Status Lookup(int var, std::span<const int64_t> ids, std::vector<float>* rows) override;
  Status Gradient(int var, std::span<const float> grad) override;
  Status Gradient(int var, std::span<const int64_t> ids, std::span<const float> row_grads) override;
  Status GradientDevice(int var, const void* device_grad, size_t count) override;
  Status Step() override;
  int64_t step() const override { return step_; }

  StatusOr<std::span<const float>> Dense(int var) const override {
    if (!started_) return FailedPrecondition("Dense before Start()");
    if (var < 0 || static_cast<size_t>(var) >= vars_.size() ||
        vars_[static_cast<size_t>(var)].plan.sparse) {
      return InvalidArgument("Dense: " + std::to_string(var) + " is not a dense variable");
    }
    const Var& v = vars_[static_cast<size_t>(var)];
    return std::span<const float>(v.values.data(), v.plan.size);
  }

  Status ReadSparse(int var, int64_t first_row, int64_t count, std::vector<float>* out) override;
  Status SetLearningRate(int var, double lr) override;
  Status ReportMetrics(int64_t step, double loss, int64_t samples) override;
  const SessionOptions& options() const override { return options_; }

 private:
  CoordinatorClientOptions CoordinatorOptions() const {
    CoordinatorClientOptions c;
    c.address = options_.coordinator;
    c.auth_token = options_.token;
    c.tls_ca_file = options_.tls_ca_file;
    c.client_name = "trainer:" + std::to_string(options_.rank);
    c.rpc_timeout_ms = options_.rpc_timeout_ms;
    c.retry_deadline_ms = options_.coordinator_retry_ms;
    return c;
  }
  ps::Deadline StepDeadline() const {
    return std::chrono::steady_clock::now() + options_.step_timeout;
  }
  std::string StepName() const { return "step " + std::to_string(step_); }

  StatusOr<int> Register(const std::string& name, Registration r, const VariableOptions& options,
                         const OptimizerConfig& default_optimizer) {
    if (started_) return FailedPrecondition("variable \"" + name + "\" registered after Start()");
    if (name.empty()) return InvalidArgument("a variable needs a name");
    for (const Var& v : vars_) {
      if (v.reg.var.name == name)
        return AlreadyExists("variable \"" + name + "\" is registered twice");
    }
    auto spec = trainer::ToOptimizerSpec(options.optimizer.value_or(default_optimizer));
    if (!spec.ok()) return spec.status().WithContext("variable \"" + name + "\"");
    r.var.name = name;
    r.var.id = static_cast<uint32_t>(vars_.size());
    r.var.optimizer = *spec;
    r.var.init = options.init;
    Var v;
    v.reg = std::move(r);
    vars_.push_back(std::move(v));
    return static_cast<int>(vars_.size() - 1);
  }

  Status CheckVar(int var, bool sparse, const char* what) const {
    if (var < 0 || static_cast<size_t>(var) >= vars_.size()) {
      return NotFound(std::string(what) + ": no variable " + std::to_string(var));
    }
    const Registration& r = vars_[static_cast<size_t>(var)].reg;
    if (r.var.sparse != sparse) {
      return InvalidArgument(std::string(what) + ": variable \"" + r.var.name + "\" is " +
                             (r.var.sparse ? "sparse" : "dense"));
    }
    return Status::Ok();
  }

  Status Usable(const char* what) const {
    if (!started_) return FailedPrecondition(std::string(what) + " before Start()");
    if (!broken_.ok()) {
      return FailedPrecondition(std::string(what) + ": the session failed earlier (" +
                                broken_.ToString() + "); start a new attempt");
    }
    return Status::Ok();
  }

  Status CheckIds(const Var& v, std::span<const int64_t> ids) const {
    for (int64_t id : ids) {
      if (id < 0 || id >= v.plan.rows) {
        return InvalidArgument(StepName() + ": id " + std::to_string(id) +
                               " is outside variable \"" + v.plan.name + "\" (rows 0.." +
                               std::to_string(v.plan.rows - 1) + ")");
      }
    }
    return Status::Ok();
  }

  // Training diverged: stop before a NaN reaches the other ranks or shards.
  Status CheckFinite(const Var& v, std::span<const float> grad) const {
    for (size_t i = 0; i < grad.size(); ++i) {
      if (!std::isfinite(grad[i])) {
        return InvalidArgument(StepName() + ": gradient of \"" + v.plan.name + "\" has " +
                               (std::isnan(grad[i]) ? "NaN" : "an infinity") + " at element " +
                               std::to_string(i) +
                               "; training diverged (lower the learning rate?)");
      }
    }
    return Status::Ok();
  }

  StatusOr<trainer::JobPlan> ObtainPlan();
  trainer::Checkpointer::Options CheckpointOptions() const {
    trainer::Checkpointer::Options o;
    o.job_id = options_.job_id;
    o.attempt = options_.attempt;
    o.rank = options_.rank;
    o.world_size = options_.world_size;
    o.root = options_.checkpoint_dir;
    o.keep = options_.keep_checkpoints;
    o.timeout_ms = options_.step_timeout.count();
    return o;
  }
  std::vector<trainer::HeldVariable> Held();
  Status RestoreCheckpoint(const trainer::Checkpointer::ResumePoint& rp);
  Status WriteCheckpoint();
  Status AgreeOnRegistrations(const Status& mine);
  Status InitVariables();
  Status ExchangeAllGather();
  Status PushHostAggregated(std::vector<std::pair<ps::Ticket, const Var*>>* tickets);
  Status Fail(Status st) {
    broken_ = st;
    return st;
  }
  // Waits for a pull into `buf`; on success moves the rows to *out.
  Status AwaitPull(ps::Ticket ticket, PullBuffer buf, std::vector<float>* out);
  // Serves Lookup() from this step's prefetch when it holds every id of
  // `ids`; *served says whether it did.
  Status LookupPrefetched(Var& v, std::span<const int64_t> ids, std::vector<float>* rows,
                          bool* served);
  // Names the shards of a PS variable, for errors.
  std::string ShardsOf(const Var& v) const;

  // Constant after construction.
  SessionOptions options_;  // constant after Connect()
  trainer::TrialTimer trial_;  // partition-search trial attempts only
  // Thread-safe; outlives ps_ and fusion_, whose threads record into it.
  trainer::Timeline timeline_;

  // The training thread only (the class is thread-compatible). The
  // destructor stops ps_ and fusion_ first: their threads write into
  // vars_ and abandoned_.
  std::unique_ptr<CoordinatorClient> coord_;
  std::vector<Var> vars_;
  bool started_ = false;
  Status broken_;
  int64_t step_ = 0;
  trainer::JobPlan plan_;
  std::unique_ptr<comm::RendezvousStore> store_;
  std::unique_ptr<comm::Communicator> comm_;
  // The ranks of this host, for local aggregation (plan_.local_aggregation
  // with more than one rank here).
  std::unique_ptr<comm::Communicator> host_comm_;
  std::unique_ptr<comm::GradientFusion> fusion_;
  // NCCL, for GradientDevice(); made at its first call (trainer/session_device.cc).
  std::unique_ptr<comm::Communicator> device_comm_;
  std::unique_ptr<ps::PsClient> ps_;
  std::vector<std::string> shard_endpoints_;
  std::vector<PullBuffer> abandoned_;  // pulls whose wait timed out
  // Metrics since the last point sent.
  std::chrono::steady_clock::time_point metrics_since_;
  int64_t metrics_samples_ = 0;
  trainer::StepMetrics metrics_;
  std::chrono::steady_clock::time_point step_started_;
  // Checkpoints.
  trainer::StateRegistry states_;
  std::string plan_json_;
  std::unique_ptr<trainer::Checkpointer> checkpointer_;
  std::optional<int64_t> resumed_from_;
  std::string resume_dir_;
};

}  // namespace parallax::trainer

#endif  // PARALLAX_TRAINER_SESSION_IMPL_H_
