// SessionImpl: the libparallax Session over core/comm (dense collectives),
// core/ps (the PS client) and core/optim (worker-side optimizers).
#include "trainer/include/parallax/session.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>

#include "core/base/logging.h"
#include "core/comm/communicator.h"
#include "core/comm/coordinator_store.h"
#include "core/comm/gradient_fusion.h"
#include "core/comm/rendezvous_store.h"
#include "core/optim/optimizer.h"
#include "core/ps/aggregate.h"
#include "core/ps/client.h"
#include "core/ps/discovery.h"
#include "core/rpc/coordinator_client.h"
#include "trainer/checkpoint.h"
#include "trainer/job_plan.h"
#include "trainer/search_trial.h"
#include "trainer/sparse_allgather.h"
#include "trainer/step_metrics.h"
#include "trainer/timeline.h"

namespace parallax {

namespace {

using trainer::PlannedVariable;
using trainer::Registration;

// Output of a PS pull: written by the PS client's I/O thread until its
// ticket completes, so it lives behind a pointer that never moves, and a
// pull whose wait timed out keeps its buffer alive until the client is gone.
using PullBuffer = std::unique_ptr<std::vector<float>>;

// A pull started by Prefetch().
struct Prefetched {
  int64_t clock = 0;
  std::vector<int64_t> ids;
  PullBuffer rows = std::make_unique<std::vector<float>>();
  ps::Ticket ticket = 0;
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
  std::unique_ptr<Prefetched> prefetch;
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
  Status AwaitPull(ps::Ticket ticket, PullBuffer buf, std::vector<float>* out) {
    trainer::WaitTimer timer(&metrics_, /*dense=*/false, &timeline_);
    Status st = ps_->Wait(ticket, StepDeadline());
    if (st.ok()) {
      *out = std::move(*buf);
    } else if (st.code() == StatusCode::kDeadlineExceeded) {
      abandoned_.push_back(std::move(buf));  // still owned by the pending ticket
    }
    return st;
  }
  // Names the shards of a PS variable, for errors.
  std::string ShardsOf(const Var& v) const {
    const ps::VariableSpec* spec = plan_.ps.FindVariable(v.plan.id);
    if (!spec) return "";
    std::vector<uint32_t> shards(spec->partition_shards);
    std::sort(shards.begin(), shards.end());
    shards.erase(std::unique(shards.begin(), shards.end()), shards.end());
    std::string out = " (on PS shard";
    for (size_t i = 0; i < shards.size(); ++i) {
      out += (i ? ", " : " ") + std::to_string(shards[i]);
      if (shards[i] < shard_endpoints_.size()) out += " at " + shard_endpoints_[shards[i]];
    }
    return out + ")";
  }

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

StatusOr<trainer::JobPlan> SessionImpl::ObtainPlan() {
  std::vector<Registration> regs;
  for (const Var& v : vars_) {
    Registration r = v.reg;
    if (v.density_samples > 0) r.var.density = v.density_sum / v.density_samples;
    regs.push_back(std::move(r));
  }
  std::string json;
  if (options_.rank == 0) {
    PX_ASSIGN_OR_RETURN(trainer::JobPlan plan, trainer::BuildRulePlan(options_, regs));
    json = trainer::JobPlanToJson(plan);
    if (coord_) {
      PX_RETURN_IF_ERROR(
          coord_->PutPlan(options_.job_id, options_.attempt, json)
              .WithContext("putting the plan of job " + std::to_string(options_.job_id)));
    }
  }
  if (coord_) {
    StatusOr<std::string> got =
        coord_->GetPlan(options_.job_id, options_.attempt, options_.plan_timeout.count());
    if (got.ok()) json = std::move(got).value();
    if (!got.ok()) {
      return got.status().WithContext(
          "rank " + std::to_string(options_.rank) + " waiting for the plan of job " +
          std::to_string(options_.job_id) + " attempt " + std::to_string(options_.attempt));
    }
  }
  plan_json_ = json;
  PX_ASSIGN_OR_RETURN(trainer::JobPlan plan, trainer::ParseJobPlan(json));
  Status match = trainer::CheckRegistrationsMatch(plan, regs, options_.rank);
  PX_RETURN_IF_ERROR(AgreeOnRegistrations(match));
  return plan;
}

// Every rank publishes whether its registrations match the plan and reads
// every other rank's verdict, so that all ranks stop with the same message
// instead of the others waiting for a peer that already gave up.
Status SessionImpl::AgreeOnRegistrations(const Status& mine) {
  if (!coord_ || options_.world_size == 1) return mine;
  auto key = [&](int rank) {
    return "job/" + std::to_string(options_.job_id) + "/" + std::to_string(options_.attempt) +
           "/trainer/" + std::to_string(rank) + "/registrations";
  };
  PX_RETURN_IF_ERROR(coord_->KvSet(key(options_.rank), mine.ok() ? "ok" : mine.ToString()));
  if (!mine.ok()) return mine;
  std::vector<std::string> keys;
  for (int r = 0; r < options_.world_size; ++r) keys.push_back(key(r));
  auto verdicts = coord_->KvGet(keys, options_.rendezvous_timeout.count());
  if (!verdicts.ok()) {
    return verdicts.status().WithContext("rank " + std::to_string(options_.rank) +
                                         " waiting for every rank to register its variables");
  }
  for (int r = 0; r < options_.world_size; ++r) {
    const std::string& v = (*verdicts)[static_cast<size_t>(r)];
    if (v != "ok") return FailedPrecondition("rank " + std::to_string(r) + " cannot train: " + v);
  }
  return Status::Ok();
}

Status SessionImpl::InitVariables() {
  for (Var& v : vars_) {
    const PlannedVariable& p = v.plan;
    const size_t table = static_cast<size_t>(p.rows) * p.dim;
    if (!p.sparse) {
      v.values =
          v.initial_values.empty() ? InitialDenseValues(p.init, p.id, p.size) : v.initial_values;
      v.grad.assign(p.path == VariablePath::kPs ? table : p.size, 0.0f);
      if (p.path != VariablePath::kPs)
        v.dense_opt = std::make_unique<optim::DenseOptimizer>(p.optimizer, p.size);
      continue;
    }
    if (p.path == VariablePath::kPs) continue;  // lives on the shards only
    v.values.resize(table);
    for (int64_t r = 0; r < p.rows; ++r) {
      InitialSparseRow(p.init, p.id, r, p.dim, v.values.data() + static_cast<size_t>(r) * p.dim);
    }
    if (p.path == VariablePath::kAllReduce) {
      v.grad.assign(table, 0.0f);
      v.dense_opt = std::make_unique<optim::DenseOptimizer>(p.optimizer, table);
    } else {
      v.sparse_opt = std::make_unique<optim::SparseOptimizer>(p.optimizer, p.rows, p.dim);
    }
  }
  return Status::Ok();
}

Status SessionImpl::Start() {
  if (started_) return FailedPrecondition("Start() called twice");
  PX_ASSIGN_OR_RETURN(plan_, ObtainPlan());
  for (size_t i = 0; i < vars_.size(); ++i) vars_[i].plan = plan_.variables[i];
  if (timeline_.enabled()) {
    std::vector<std::string> names;
    for (const Var& v : vars_) names.push_back(v.plan.name);
    PX_RETURN_IF_ERROR(
        timeline_.Open(std::move(names)).WithContext("rank " + std::to_string(options_.rank)));
  }
  PX_RETURN_IF_ERROR(InitVariables());
  checkpointer_ = std::make_unique<trainer::Checkpointer>(CheckpointOptions(), coord_.get());
  {
    auto rp = checkpointer_->FindResumePoint();
    if (!rp.ok()) {
      return rp.status().WithContext("rank " + std::to_string(options_.rank) + " resuming");
    }
    if (*rp) PX_RETURN_IF_ERROR(RestoreCheckpoint(**rp));
  }
  const int64_t rdv_ms = options_.rendezvous_timeout.count();
  if (options_.world_size > 1) {
    PX_ASSIGN_OR_RETURN(store_, comm::ConnectCoordinatorRendezvousStore(CoordinatorOptions()));
    comm::CommunicatorOptions co;
    co.rank = options_.rank;
    co.world_size = options_.world_size;
    co.key_prefix = comm::CommKeyPrefix(options_.job_id, options_.attempt);
    co.bind_address = options_.bind_address;
    co.rendezvous_timeout = options_.rendezvous_timeout;
    auto comm = comm::Communicator::Create(co, store_.get());
    if (!comm.ok())
      return comm.status().WithContext("rank " + std::to_string(options_.rank) +
                                       " joining the collectives");
    comm_ = std::move(comm).value();
    comm::FusionOptions fo;
    fo.bucket_bytes = options_.fusion_bucket_bytes;
    fo.op = comm::ReduceOp::kMean;
    fo.bucket_timeout = options_.step_timeout;
    fo.observer = timeline_.FusionObserver();
    fusion_ = std::make_unique<comm::GradientFusion>(comm_.get(), fo);
    // Rank 0's dense values win (explicit initial values may be random per rank).
    for (Var& v : vars_) {
      if (v.plan.sparse || v.plan.path == VariablePath::kPs) continue;
      Status st = comm_->Broadcast(v.values, 0, StepDeadline());
      if (!st.ok())
        return st.WithContext("broadcasting the initial values of \"" + v.plan.name + "\"");
    }
  }
  if (plan_.local_aggregation && options_.local_world_size > 1) {
    comm::CommunicatorOptions co;
    co.rank = options_.local_rank;
    co.world_size = options_.local_world_size;
    co.key_prefix = comm::CommKeyPrefix(options_.job_id, options_.attempt) + "/host-" +
                    std::to_string(options_.host_index);
    co.bind_address = options_.bind_address;
    co.rendezvous_timeout = options_.rendezvous_timeout;
    auto comm = comm::Communicator::Create(co, store_.get());
    if (!comm.ok()) {
      return comm.status().WithContext("rank " + std::to_string(options_.rank) +
                                       " joining its host's ranks for local aggregation");
    }
    host_comm_ = std::move(comm).value();
  }
  if (plan_.has_ps()) {
    auto endpoints = ps::ResolveShardEndpoints(coord_.get(), options_.job_id, options_.attempt,
                                               plan_.ps.num_shards, rdv_ms);
    if (!endpoints.ok()) return endpoints.status().WithContext("finding the PS shards");
    ps::PsClientOptions po;
    po.plan = plan_.ps;
    shard_endpoints_ = std::move(endpoints).value();
    po.shard_endpoints = shard_endpoints_;
    // With local aggregation a host is one contributor (schemas/ps_wire.md).
    po.worker = static_cast<uint32_t>(plan_.local_aggregation ? options_.host_index : options_.rank);
    po.attempt = static_cast<uint32_t>(options_.attempt);
    po.on_complete = timeline_.PsObserver();
    if (!options_.token.empty() && options_.ps_curve) {
      // A secured control plane means CURVE on PS sockets (core/ps/curve.h),
      // unless the job says `[ps] curve = false`:
      // publish our key, then learn the shards' keys.
      PX_ASSIGN_OR_RETURN(po.curve_keys, ps::NewCurveKeyPair());
      PX_RETURN_IF_ERROR(ps::PublishClientCurveKey(coord_.get(), options_.job_id, options_.attempt,
                                                   po.curve_keys.public_key,
                                                   "trainer rank " + std::to_string(options_.rank))
                             .WithContext("publishing this rank's PS key"));
      PX_ASSIGN_OR_RETURN(po.shard_curve_keys,
                          ps::ResolveShardCurveKeys(coord_.get(), options_.job_id,
                                                    options_.attempt, plan_.ps.num_shards, rdv_ms));
    }
    PX_ASSIGN_OR_RETURN(ps_, ps::PsClient::Create(po));
    if (resumed_from_) {
      // Rank 0 makes every shard LOAD the checkpoint; no rank pushes or
      // pulls before that is done (a LOAD drops pending pushes).
      if (options_.rank == 0) {
        PX_ASSIGN_OR_RETURN(ps::Ticket t, ps_->Load(resume_dir_));
        Status st = ps_->Wait(t, StepDeadline());
        if (!st.ok()) {
          return st.WithContext("PS shards loading the checkpoint \"" + resume_dir_ + "\"");
        }
      }
      if (comm_) {
        Status st = comm_->Barrier(StepDeadline());
        if (!st.ok()) return st.WithContext("waiting for the PS shards to load the checkpoint");
      }
      if (plan_.ps.consistency == ps::Consistency::kSsp && step_ > 0) {
        // The shards' ssp clocks start at 0 after a LOAD: tell them where this rank is.
        PX_ASSIGN_OR_RETURN(ps::Ticket t, ps_->Clock(step_ - 1));
        PX_RETURN_IF_ERROR(ps_->Wait(t, StepDeadline()).WithContext("PS clock after resuming"));
      }
    }
    for (Var& v : vars_) {
      if (v.plan.sparse || v.plan.path != VariablePath::kPs) continue;
      std::vector<int64_t> ids(static_cast<size_t>(v.plan.rows));
      std::iota(ids.begin(), ids.end(), 0);
      PX_ASSIGN_OR_RETURN(ps::Ticket t, ps_->Pull(v.plan.id, ids, 0, &v.pulled));
      Status st = ps_->Wait(t, StepDeadline());
      if (!st.ok())
        return st.WithContext("pulling the initial values of \"" + v.plan.name + "\" from PS");
      std::copy(v.pulled.begin(), v.pulled.begin() + static_cast<std::ptrdiff_t>(v.plan.size),
                v.values.begin());
    }
  }
  started_ = true;
  metrics_since_ = std::chrono::steady_clock::now();
  step_started_ = metrics_since_;
  timeline_.SetStep(step_);
  timeline_.OpenCompute(metrics_since_);
  std::string paths;
  for (const Var& v : vars_) paths += " \"" + v.plan.name + "\"=" + VariablePathName(v.plan.path);
  PX_LOG(INFO) << "rank " << options_.rank << " started with plan:" << paths;
  return Status::Ok();
}

std::vector<trainer::HeldVariable> SessionImpl::Held() {
  std::vector<trainer::HeldVariable> held;
  for (Var& v : vars_) {
    if (v.plan.path == VariablePath::kPs) continue;
    held.push_back({v.plan.id, v.plan.name, &v.values, v.dense_opt.get(), v.sparse_opt.get()});
  }
  return held;
}

// Worker-held variables (every path but PS) and their optimizer state come
// back from dense.pxck on every rank; then the rank's own state blobs.
Status SessionImpl::RestoreCheckpoint(const trainer::Checkpointer::ResumePoint& rp) {
  const std::string where = "rank " + std::to_string(options_.rank) +
                            " resuming from the checkpoint in \"" + rp.dir + "\"";
  PX_RETURN_IF_ERROR(trainer::RestoreHeld(rp.dense, Held()).WithContext(where));
  PX_RETURN_IF_ERROR(states_.RestoreAll(rp.rank_state).WithContext(where));
  step_ = rp.step;
  resumed_from_ = rp.step;
  resume_dir_ = rp.dir;
  PX_LOG(INFO) << "rank " << options_.rank << " resumes job " << options_.job_id << " from step "
               << rp.step << " (" << rp.dir << ")";
  return Status::Ok();
}

Status SessionImpl::WriteCheckpoint() {
  std::vector<trainer::DenseEntry> dense;
  if (options_.rank == 0) dense = trainer::SnapshotHeld(Held());
  return checkpointer_->Write(step_, plan_json_, dense, states_.SaveAll(), ps_.get());
}

Status SessionImpl::Prefetch(int var, std::span<const int64_t> next_ids) {
  PX_RETURN_IF_ERROR(Usable("Prefetch"));
  PX_RETURN_IF_ERROR(CheckVar(var, true, "Prefetch"));
  Var& v = vars_[static_cast<size_t>(var)];
  PX_RETURN_IF_ERROR(CheckIds(v, next_ids));
  if (v.plan.path != VariablePath::kPs) return Status::Ok();  // local replica: nothing to fetch
  if (v.prefetch) {                                           // an unused earlier prefetch
    std::unique_ptr<Prefetched> old = std::move(v.prefetch);
    std::vector<float> unused;
    Status st = AwaitPull(old->ticket, std::move(old->rows), &unused);
    if (!st.ok())
      return Fail(st.WithContext(StepName() + ": earlier prefetch of \"" + v.plan.name + "\"" +
                                 ShardsOf(v)));
  }
  auto pf = std::make_unique<Prefetched>();
  pf->clock = step_ + 1;
  pf->ids.assign(next_ids.begin(), next_ids.end());
  PX_ASSIGN_OR_RETURN(pf->ticket, ps_->Pull(v.plan.id, pf->ids, pf->clock, pf->rows.get()));
  v.prefetch = std::move(pf);
  return Status::Ok();
}

Status SessionImpl::Lookup(int var, std::span<const int64_t> ids, std::vector<float>* rows) {
  trainer::TimelineScope in_session(&timeline_);
  PX_RETURN_IF_ERROR(Usable("Lookup"));
  PX_RETURN_IF_ERROR(CheckVar(var, true, "Lookup"));
  Var& v = vars_[static_cast<size_t>(var)];
  PX_RETURN_IF_ERROR(CheckIds(v, ids));
  const uint32_t dim = v.plan.dim;
  if (v.plan.path != VariablePath::kPs) {
    rows->resize(ids.size() * dim);
    for (size_t i = 0; i < ids.size(); ++i) {
      std::memcpy(rows->data() + i * dim, v.values.data() + static_cast<size_t>(ids[i]) * dim,
                  dim * sizeof(float));
    }
    return Status::Ok();
  }
  if (v.prefetch) {
    std::unique_ptr<Prefetched> pf = std::move(v.prefetch);
    const bool usable =
        pf->clock == step_ && std::equal(ids.begin(), ids.end(), pf->ids.begin(), pf->ids.end());
    std::vector<float> pulled;
    Status st = AwaitPull(pf->ticket, std::move(pf->rows), &pulled);
    if (!st.ok())
      return Fail(st.WithContext(StepName() + ": pulling \"" + v.plan.name + "\"" + ShardsOf(v)));
    if (usable) {
      *rows = std::move(pulled);
      return Status::Ok();
    }
  }
  auto buf = std::make_unique<std::vector<float>>();
  PX_ASSIGN_OR_RETURN(ps::Ticket t, ps_->Pull(v.plan.id, ids, step_, buf.get()));
  Status st = AwaitPull(t, std::move(buf), rows);
  if (!st.ok())
    return Fail(st.WithContext(StepName() + ": pulling \"" + v.plan.name + "\"" + ShardsOf(v)));
  return Status::Ok();
}

Status SessionImpl::Gradient(int var, std::span<const float> grad) {
  PX_RETURN_IF_ERROR(Usable("Gradient"));
  PX_RETURN_IF_ERROR(CheckVar(var, false, "Gradient"));
  Var& v = vars_[static_cast<size_t>(var)];
  if (grad.size() != v.plan.size) {
    return InvalidArgument(StepName() + ": gradient of \"" + v.plan.name + "\" has " +
                           std::to_string(grad.size()) + " values, expected " +
                           std::to_string(v.plan.size));
  }
  if (v.grad_given) {
    return InvalidArgument(StepName() + ": gradient of \"" + v.plan.name + "\" given twice");
  }
  PX_RETURN_IF_ERROR(CheckFinite(v, grad));
  v.grad_given = true;
  std::copy(grad.begin(), grad.end(), v.grad.begin());
  if (v.plan.path != VariablePath::kPs && fusion_) {
    Status st = fusion_->Register(v.grad.data(), v.plan.size);
    if (!st.ok()) return Fail(st.WithContext(StepName() + ": all-reduce"));
  }
  return Status::Ok();
}

Status SessionImpl::Gradient(int var, std::span<const int64_t> ids,
                             std::span<const float> row_grads) {
  PX_RETURN_IF_ERROR(Usable("Gradient"));
  PX_RETURN_IF_ERROR(CheckVar(var, true, "Gradient"));
  Var& v = vars_[static_cast<size_t>(var)];
  const uint32_t dim = v.plan.dim;
  if (row_grads.size() != ids.size() * dim) {
    return InvalidArgument(StepName() + ": gradient of \"" + v.plan.name + "\" has " +
                           std::to_string(row_grads.size()) + " values for " +
                           std::to_string(ids.size()) + " ids of dim " + std::to_string(dim));
  }
  PX_RETURN_IF_ERROR(CheckIds(v, ids));
  PX_RETURN_IF_ERROR(CheckFinite(v, row_grads));
  if (v.plan.path == VariablePath::kAllReduce) {
    for (size_t i = 0; i < ids.size(); ++i) {
      float* row = v.grad.data() + static_cast<size_t>(ids[i]) * dim;
      for (uint32_t j = 0; j < dim; ++j) row[j] += row_grads[i * dim + j];
    }
  } else {
    v.pending_ids.insert(v.pending_ids.end(), ids.begin(), ids.end());
    v.pending_grads.insert(v.pending_grads.end(), row_grads.begin(), row_grads.end());
  }
  v.grad_given = true;
  return Status::Ok();
}

// Sums every rank's (ids, rows) of each variable on the all-gather path in
// rank order, averages over ranks and applies them to the local replicas:
// all such variables in two collectives (trainer/sparse_allgather.h).
Status SessionImpl::ExchangeAllGather() {
  std::vector<Var*> vars;
  std::vector<ps::SparseRows> mine;
  std::vector<uint32_t> dims;
  for (Var& v : vars_) {
    if (v.plan.path != VariablePath::kAllGather || !v.plan.sparse) continue;
    vars.push_back(&v);
    dims.push_back(v.plan.dim);
    mine.push_back(ps::DedupeSum(v.pending_ids, v.pending_grads, v.plan.dim));
  }
  if (vars.empty()) return Status::Ok();
  std::vector<ps::SparseRows> merged;
  if (comm_) {
    PX_ASSIGN_OR_RETURN(merged, trainer::AllGatherSparse(comm_.get(), mine, dims,
                                                         comm::ReduceOp::kMean, StepDeadline()));
  } else {
    merged = std::move(mine);
  }
  for (size_t t = 0; t < vars.size(); ++t) {
    Status st = vars[t]->sparse_opt->Apply(merged[t].ids, merged[t].values, vars[t]->values);
    if (!st.ok()) return st.WithContext("applying \"" + vars[t]->plan.name + "\"");
  }
  return Status::Ok();
}

// Local aggregation: the ranks of this host sum their rows of every PS
// variable (all sparse: the plan turns aggregation off otherwise) in
// local-rank order, and the host's first rank pushes the sums as the host's
// contribution. The others push nothing: in sync mode their next pull waits
// on the shard until the step has been applied.
Status SessionImpl::PushHostAggregated(std::vector<std::pair<ps::Ticket, const Var*>>* tickets) {
  std::vector<Var*> vars;
  std::vector<ps::SparseRows> rows;
  std::vector<uint32_t> dims;
  for (Var& v : vars_) {
    if (v.plan.path != VariablePath::kPs) continue;
    PX_CHECK(v.plan.sparse) << "local aggregation with dense \"" << v.plan.name << "\" on PS";
    vars.push_back(&v);
    dims.push_back(v.plan.dim);
    rows.push_back(ps::DedupeSum(v.pending_ids, v.pending_grads, v.plan.dim));
  }
  if (host_comm_) {
    trainer::WaitTimer timer(&metrics_, /*dense=*/false, &timeline_);
    PX_ASSIGN_OR_RETURN(rows, trainer::AllGatherSparse(host_comm_.get(), rows, dims,
                                                       comm::ReduceOp::kSum, StepDeadline()));
  }
  if (options_.local_rank != 0) return Status::Ok();
  for (size_t t = 0; t < vars.size(); ++t) {
    StatusOr<ps::Ticket> ticket = ps_->Push(vars[t]->plan.id, rows[t].ids, rows[t].values, step_);
    if (!ticket.ok()) {
      return ticket.status().WithContext("pushing \"" + vars[t]->plan.name + "\"" +
                                         ShardsOf(*vars[t]));
    }
    tickets->emplace_back(*ticket, vars[t]);
  }
  return Status::Ok();
}

Status SessionImpl::Step() {
  trainer::TimelineScope in_session(&timeline_);
  PX_RETURN_IF_ERROR(Usable("Step"));
  const std::string where = StepName();
  // 1. PS pushes leave first (asynchronous); in sync mode every PS variable
  //    gets exactly one push per step, empty when there was no gradient.
  std::vector<std::pair<ps::Ticket, const Var*>> tickets;
  if (plan_.local_aggregation) {
    Status st = PushHostAggregated(&tickets);
    if (!st.ok()) return Fail(st.WithContext(where + ": local aggregation of PS gradients"));
  }
  for (Var& v : vars_) {
    if (v.plan.path != VariablePath::kPs || plan_.local_aggregation) continue;
    auto submit = [&]() -> StatusOr<ps::Ticket> {
      if (v.plan.sparse) return ps_->Push(v.plan.id, v.pending_ids, v.pending_grads, step_);
      // A dense variable on PS: push every row, get the updated values back.
      std::vector<int64_t> ids(static_cast<size_t>(v.plan.rows));
      std::iota(ids.begin(), ids.end(), 0);
      return ps_->PushPull(v.plan.id, ids, v.grad, step_, &v.pulled);
    };
    StatusOr<ps::Ticket> t = submit();
    if (!t.ok())
      return Fail(
          t.status().WithContext(where + ": pushing \"" + v.plan.name + "\"" + ShardsOf(v)));
    tickets.emplace_back(*t, &v);
  }
  // 2. Dense all-reduce: variables with no gradient this step count as zero,
  //    then whole-table gradients of sparse variables on the all-reduce path.
  if (fusion_) {
    for (Var& v : vars_) {
      if (v.plan.path != VariablePath::kAllReduce || v.plan.sparse || v.grad_given) continue;
      std::fill(v.grad.begin(), v.grad.end(), 0.0f);
      Status st = fusion_->Register(v.grad.data(), v.grad.size());
      if (!st.ok()) return Fail(st.WithContext(where + ": all-reduce"));
    }
    for (Var& v : vars_) {
      if (v.plan.path != VariablePath::kAllReduce || !v.plan.sparse) continue;
      Status st = fusion_->Register(v.grad.data(), v.grad.size());
      if (!st.ok()) return Fail(st.WithContext(where + ": all-reduce"));
    }
    Status st;
    {
      trainer::WaitTimer timer(&metrics_, /*dense=*/true, &timeline_);
      st = fusion_->Synchronize(StepDeadline());
    }
    if (!st.ok()) return Fail(st.WithContext(where + ": all-reduce of dense gradients"));
  } else {
    for (Var& v : vars_) {
      if (v.plan.path == VariablePath::kAllReduce && !v.plan.sparse && !v.grad_given) {
        std::fill(v.grad.begin(), v.grad.end(), 0.0f);
      }
    }
  }
  // 3. All-gather of sparse rows, applied locally.
  if (std::any_of(vars_.begin(), vars_.end(), [](const Var& v) {
        return v.plan.path == VariablePath::kAllGather && v.plan.sparse;
      })) {
    trainer::WaitTimer timer(&metrics_, /*dense=*/false, &timeline_);
    const auto started = std::chrono::steady_clock::now();
    Status st = ExchangeAllGather();
    timeline_.Record(trainer::Lane::kAllGather, started, std::chrono::steady_clock::now());
    if (!st.ok()) return Fail(st.WithContext(where + ": all-gather of sparse rows"));
  }
  // 4. Worker-held optimizers.
  for (Var& v : vars_) {
    if (v.plan.path == VariablePath::kAllReduce) v.dense_opt->Apply(v.grad, v.values);
  }
  // 5. PS results (sync: the step applied on every shard; async/ssp: the
  //    pushes were applied on arrival). Under ssp every shard also learns
  //    that this rank finished the step, whether or not it pushed there.
  if (ps_ && plan_.ps.consistency == ps::Consistency::kSsp) {
    StatusOr<ps::Ticket> t = ps_->Clock(step_);
    if (!t.ok()) return Fail(t.status().WithContext(where + ": PS clock"));
    tickets.emplace_back(*t, nullptr);
  }
  for (auto& [ticket, v] : tickets) {
    trainer::WaitTimer timer(&metrics_, /*dense=*/false, &timeline_);
    Status st = ps_->Wait(ticket, StepDeadline());
    if (!st.ok()) {
      return Fail(
          st.WithContext(where + (v ? ": PS update of \"" + v->plan.name + "\"" + ShardsOf(*v)
                                    : std::string(": PS clock"))));
    }
  }
  for (Var& v : vars_) {
    if (v.plan.path == VariablePath::kPs && !v.plan.sparse) {
      std::copy(v.pulled.begin(), v.pulled.begin() + static_cast<std::ptrdiff_t>(v.plan.size),
                v.values.begin());
    }
    if (v.plan.path == VariablePath::kAllReduce && v.plan.sparse)
      std::fill(v.grad.begin(), v.grad.end(), 0.0f);
    if (v.plan.path == VariablePath::kPs && !v.plan.sparse)
      std::fill(v.grad.begin(), v.grad.end(), 0.0f);
    v.pending_ids.clear();
    v.pending_grads.clear();
    v.grad_given = false;
  }
  ++step_;
  timeline_.SetStep(step_);
  const auto now = std::chrono::steady_clock::now();
  metrics_.EndStep(step_started_, now);
  if (trial_.Add(std::chrono::duration<double>(now - step_started_).count()) &&
      options_.rank == 0) {
    Status st = trainer::PublishTrial(coord_.get(), options_, trial_.Median());
    if (!st.ok()) return Fail(st);
  }
  step_started_ = now;
  if (!options_.checkpoint_dir.empty() && options_.checkpoint_every > 0 &&
      step_ % options_.checkpoint_every == 0) {
    Status st = WriteCheckpoint();
    timeline_.Record(trainer::Lane::kCheckpoint, now, std::chrono::steady_clock::now());
    if (!st.ok()) return Fail(st);
    step_started_ = std::chrono::steady_clock::now();  // the checkpoint is no step's compute
  }
  return Status::Ok();
}

Status SessionImpl::ReadSparse(int var, int64_t first_row, int64_t count, std::vector<float>* out) {
  trainer::TimelineScope in_session(&timeline_);
  PX_RETURN_IF_ERROR(Usable("ReadSparse"));
  PX_RETURN_IF_ERROR(CheckVar(var, true, "ReadSparse"));
  Var& v = vars_[static_cast<size_t>(var)];
  if (first_row < 0 || count < 0 || first_row + count > v.plan.rows) {
    return InvalidArgument("ReadSparse: rows [" + std::to_string(first_row) + ", " +
                           std::to_string(first_row + count) + ") are outside \"" + v.plan.name +
                           "\"");
  }
  const size_t dim = v.plan.dim;
  if (v.plan.path != VariablePath::kPs) {
    out->assign(v.values.begin() + static_cast<std::ptrdiff_t>(first_row * dim),
                v.values.begin() + static_cast<std::ptrdiff_t>((first_row + count) * dim));
    return Status::Ok();
  }
  std::vector<int64_t> ids(static_cast<size_t>(count));
  std::iota(ids.begin(), ids.end(), first_row);
  auto buf = std::make_unique<std::vector<float>>();
  PX_ASSIGN_OR_RETURN(ps::Ticket t, ps_->Pull(v.plan.id, ids, step_, buf.get()));
  Status st = AwaitPull(t, std::move(buf), out);
  if (!st.ok()) return st.WithContext("reading \"" + v.plan.name + "\"" + ShardsOf(v));
  return Status::Ok();
}

Status SessionImpl::ReportMetrics(int64_t step, double loss, int64_t samples) {
  trainer::TimelineScope in_session(&timeline_);
  if (!std::isfinite(loss)) {
    return InvalidArgument("loss is " + std::string(std::isnan(loss) ? "NaN" : "infinite") +
                           " at step " + std::to_string(step) +
                           "; stopping (lower the learning rate?)");
  }
  metrics_samples_ += samples;
  if (!coord_ || step % options_.metrics_every != 0) return Status::Ok();
  const auto now = std::chrono::steady_clock::now();
  const double seconds = std::chrono::duration<double>(now - metrics_since_).count();
  rpc::MetricPoint p;
  p.job_id = options_.job_id;
  p.attempt = options_.attempt;
  p.rank = options_.rank;
  p.step = step;
  p.loss = loss;
  p.throughput = seconds > 0 ? static_cast<double>(metrics_samples_) / seconds : 0.0;
  p.__set_values(metrics_.Take(comm_.get(), ps_.get(), host_comm_.get()));
  metrics_since_ = now;
  metrics_samples_ = 0;
  Status st =
      coord_->Call([&](rpc::CoordinatorClient& c) { c.ReportMetrics(coord_->Header(), {p}); });
  if (st.code() == StatusCode::kUnavailable || st.code() == StatusCode::kAborted ||
      st.code() == StatusCode::kDeadlineExceeded) {
    // A lost metric point must not stop training; the next one retries.
    PX_LOG(WARNING) << "rank " << options_.rank << " could not report metrics of step " << step
                    << ": " << st.ToString();
    return Status::Ok();
  }
  return st.WithContext("reporting metrics of step " + std::to_string(step));
}

}  // namespace

StatusOr<std::unique_ptr<Session>> Session::Create(const SessionOptions& options) {
  if (options.world_size < 1 || options.rank < 0 || options.rank >= options.world_size) {
    return InvalidArgument("session: rank " + std::to_string(options.rank) +
                           " is not in 0..world_size-1 (world_size " +
                           std::to_string(options.world_size) + ")");
  }
  if (options.consistency != "sync" && options.consistency != "async" &&
      options.consistency != "ssp") {
    return InvalidArgument("session: consistency \"" + options.consistency +
                           "\" is not one of sync, async, ssp");
  }
  if (options.staleness < 0) return InvalidArgument("session: staleness must be >= 0");
  if (options.coordinator.empty() && (options.world_size > 1 || options.num_shards > 0)) {
    return InvalidArgument(
        "session: several ranks or PS shards need a coordinator (PARALLAX_COORDINATOR)");
  }
  if (options.metrics_every < 1) return InvalidArgument("session: metrics_every must be >= 1");
  if (options.checkpoint_every < 0 || options.keep_checkpoints < 1) {
    return InvalidArgument("session: checkpoint_every must be >= 0 and keep_checkpoints >= 1");
  }
  auto session = std::make_unique<SessionImpl>(options);
  PX_RETURN_IF_ERROR(session->Connect());
  return std::unique_ptr<Session>(std::move(session));
}

}  // namespace parallax
