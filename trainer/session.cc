// SessionImpl: the libparallax Session, a small orchestrator of parts that
// are tested alone:
//   VariableRegistry  what the rank registers and samples before Start()
//   plan              core/plan's BuildPlan on rank 0, agreed on by all ranks
//   DenseSync         the all-reduce path (fused, overlapped with backward)
//   DeviceSync        dense gradients in CUDA memory, averaged there by NCCL
//   SparseSync        the PS and all-gather paths
//   Checkpointer      checkpoints and resume (trainer/checkpoint.h)
//   StepMetrics, MetricsReporter, Timeline   what a step cost, sent and traced
// The session checks every call's arguments, dispatches each variable to
// the part its path belongs to, and orders the parts within a step.
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <iterator>
#include <limits>
#include <map>
#include <memory>
#include <optional>

#include "core/base/finite.h"
#include "core/base/logging.h"
#include "core/calibration/call_probe.h"
#include "core/calibration/host_calibration.h"
#include "core/comm/coordinator_store.h"
#include "core/plan/job_plan.h"
#include "core/ps/partition_file.h"
#include "core/plan/plan_builder.h"
#include "core/rpc/coordinator_client.h"
#include "parallax/session.h"
#include "trainer/checkpoint.h"
#include "trainer/consistency_lease.h"
#include "trainer/dense_sync.h"
#include "trainer/device_sync.h"
#include "trainer/search_trial.h"
#include "trainer/sparse_sync.h"
#include "trainer/step_metrics.h"
#include "trainer/timeline.h"
#include "trainer/variable_registry.h"
#include "schemas/kv_keys.h"

namespace parallax {
namespace trainer {
namespace {

class SessionImpl final : public Session {
 public:
  explicit SessionImpl(SessionOptions options)
      : options_(std::move(options)),
        registry_(options_.config, options_.world_size),
        timeline_(TimelineOptions::ForRank(options_.config.trainer.timeline, options_.rank,
                                           options_.timeline_max_events)) {}
  ~SessionImpl() override {
    // The parts' threads (PS client, fusion) write into their own buffers
    // and record into the timeline: stop them first.
    sparse_.reset();
    dense_.reset();
    if (started_ && timeline_.enabled()) {
      Status st = timeline_.Write();
      if (!st.ok()) PX_LOG(WARNING) << "rank " << options_.rank << ": " << st.ToString();
    }
  }

  Status Connect();

  StatusOr<int> RegisterDense(const std::string& name, size_t size,
                              const VariableOptions& options) override {
    return registry_.RegisterDense(name, size, options);
  }
  StatusOr<int> RegisterSparse(const std::string& name, int64_t rows, uint32_t dim,
                               const VariableOptions& options) override {
    return registry_.RegisterSparse(name, rows, dim, options);
  }
  StatusOr<int> RegisterDynamic(const std::string& name, uint32_t dim,
                                const DynamicTableSettings& settings,
                                const VariableOptions& options) override {
    return registry_.RegisterDynamic(name, dim, settings, options);
  }
  Status SampleIds(int var, std::span<const int64_t> ids) override {
    return registry_.SampleIds(var, ids);
  }
  Status RegisterState(const std::string& name, std::function<std::string()> save,
                       std::function<Status(std::string_view)> restore) override {
    if (started_) return FailedPrecondition("state \"" + name + "\" registered after Start()");
    return states_.Register(name, std::move(save), std::move(restore));
  }

  Status Start() override;
  std::optional<int64_t> resumed_from() const override { return resumed_from_; }
  StatusOr<VariablePath> PathOf(int var) const override {
    if (!started_) return FailedPrecondition("PathOf before Start()");
    if (var < 0 || static_cast<size_t>(var) >= plan_.variables.size())
      return NotFound("no variable " + std::to_string(var));
    return Planned(var).path;
  }

  Status Prefetch(int var, std::span<const int64_t> next_ids) override;
  Status PrefetchMany(std::span<const int> vars,
                      std::span<const std::span<const int64_t>> next_ids) override;
  // Prefetch and PrefetchMany; `what` names the call in errors.
  Status PrefetchVars(const char* what, std::span<const int> vars,
                      std::span<const std::span<const int64_t>> next_ids);
  Status Lookup(int var, std::span<const int64_t> ids, std::vector<float>* rows) override;
  Status Gradient(int var, std::span<const float> grad) override;
  Status Gradient(int var, std::span<const int64_t> ids, std::span<const float> row_grads) override;
  Status GradientDevice(int var, const void* device_grad, size_t count) override;
  Status Step() override;
  int64_t step() const override { return step_; }
  StatusOr<std::span<const float>> Dense(int var) const override;
  Status ReadSparse(int var, int64_t first_row, int64_t count, std::vector<float>* out) override;
  Status SetLearningRate(int var, double lr) override;
  Status ReportMetrics(int64_t step, double loss, int64_t samples) override;
  const SessionOptions& options() const override { return options_; }

 private:
  const plan::PlannedVariable& Planned(int var) const {
    return plan_.variables[static_cast<size_t>(var)];
  }
  std::string StepName() const { return "step " + std::to_string(step_); }
  std::string RankName() const { return "rank " + std::to_string(options_.rank); }
  CoordinatorClientOptions CoordinatorOptions() const;
  // The job's collectives: this rank among all of them.
  comm::CommunicatorOptions WorldOptions() const;
  MetricsReporter::Options ReporterOptions() const;

  // Argument checks of the per-step calls (the parts trust their input).
  Status Usable(const char* what) const;
  Status CheckIds(const plan::PlannedVariable& v, std::span<const int64_t> ids) const;
  Status CheckFinite(const plan::PlannedVariable& v, std::span<const float> grad) const;
  // A dense gradient's size, and that it is the step's first.
  Status CheckDenseGradient(const plan::PlannedVariable& v, size_t size) const;
  Status Fail(Status st) {
    broken_ = st;
    return st;
  }

  // Start(), in order.
  StatusOr<plan::JobPlan> ObtainPlan();
  Status AgreeOnRegistrations(const Status& mine);
  Status MeasureCalls();
  Status WriteInitialPsValues();
  Status JoinCollectives();
  Status CreateParts();
  Status Resume(Checkpointer::ResumePoint rp);

  std::vector<HeldVariable> Held();
  Status WriteCheckpoint();
  Status AfterStep();
  // Whether a checkpoint is written once `steps` steps have run.
  bool CheckpointAfter(int64_t steps) const;
  // Before running step_: renews the consistency lease and passes the
  // switches it brings to the PS shards (nothing without a PS).
  Status FollowConsistency();

  // Constant after Connect() (the partition search may set the number of
  // partitions and a trial's step budget).
  SessionOptions options_;
  TrialTimer trial_;  // partition-search trial attempts only

  // The training thread only (the class is thread-compatible).
  std::unique_ptr<CoordinatorClient> coord_;
  VariableRegistry registry_;
  StateRegistry states_;
  bool started_ = false;
  Status broken_;
  int64_t step_ = 0;
  plan::JobPlan plan_;
  std::string plan_json_;
  std::unique_ptr<comm::RendezvousStore> store_;
  std::unique_ptr<comm::Communicator> comm_;  // the job's ranks; null with one rank
  std::unique_ptr<comm::Communicator> host_comm_;  // this host's ranks, for local aggregation
  StepMetrics metrics_;
  std::optional<MetricsReporter> reporter_;
  std::chrono::steady_clock::time_point step_started_;
  std::unique_ptr<Checkpointer> checkpointer_;
  std::optional<int64_t> resumed_from_;
  std::optional<ConsistencyLease> lease_;  // with a coordinator and a PS
  // Thread-safe; outlives the parts, whose threads record into it.
  Timeline timeline_;
  std::unique_ptr<DenseSync> dense_;
  std::unique_ptr<SparseSync> sparse_;
  std::unique_ptr<DeviceSync> device_;
  std::vector<std::string> ps_endpoints_;  // by shard; empty without a PS
};

CoordinatorClientOptions SessionImpl::CoordinatorOptions() const {
  CoordinatorClientOptions c;
  c.address = options_.coordinator;
  c.auth_token = options_.token;
  c.tls_ca_file = options_.tls_ca_file;
  c.client_name = "trainer:" + std::to_string(options_.rank);
  c.rpc_timeout_ms = options_.rpc_timeout_ms;
  c.retry_deadline_ms = options_.coordinator_retry_ms;
  return c;
}

Status SessionImpl::Connect() {
  if (options_.coordinator.empty()) return Status::Ok();
  PX_ASSIGN_OR_RETURN(coord_, CoordinatorClient::Connect(CoordinatorOptions()));
  PX_RETURN_IF_ERROR(ApplySearchSpec(coord_.get(), &options_));
  trial_ = TrialTimer(options_.trial_warmup_steps, options_.trial_steps);
  return Status::Ok();
}

MetricsReporter::Options SessionImpl::ReporterOptions() const {
  return {.job_id = options_.job_id,
          .attempt = options_.attempt,
          .rank = options_.rank,
          .every = options_.config.trainer.metrics_every,
          .last_step = options_.config.trainer.steps - 1};
}

Status SessionImpl::Usable(const char* what) const {
  if (!started_) return FailedPrecondition(std::string(what) + " before Start()");
  if (!broken_.ok()) {
    return FailedPrecondition(std::string(what) + ": the session failed earlier (" +
                              broken_.ToString() + "); start a new attempt");
  }
  return Status::Ok();
}

Status SessionImpl::CheckIds(const plan::PlannedVariable& v, std::span<const int64_t> ids) const {
  if (v.dynamic) return Status::Ok();  // any 64-bit value is an id
  for (int64_t id : ids) {
    if (id < 0 || id >= v.rows) {
      return InvalidArgument(StepName() + ": id " + std::to_string(id) +
                             " is outside variable \"" + v.name + "\" (rows 0.." +
                             std::to_string(v.rows - 1) + ")");
    }
  }
  return Status::Ok();
}

// Training diverged: stop before a NaN reaches the other ranks or shards.
Status SessionImpl::CheckFinite(const plan::PlannedVariable& v,
                                std::span<const float> grad) const {
  const size_t i = FirstNonFinite(grad.data(), grad.size());
  if (i == grad.size()) return Status::Ok();
  return InvalidArgument(StepName() + ": gradient of \"" + v.name + "\" has " +
                         (std::isnan(grad[i]) ? "NaN" : "an infinity") + " at element " +
                         std::to_string(i) + "; training diverged (lower the learning rate?)");
}

// ---- Start() ----

// What the agents measured on their hosts (core/calibration/host_calibration.h);
// none when the coordinator cannot say (the planner keeps its defaults).
std::vector<plan::HostFigures> MeasuredHostFigures(CoordinatorClient* coord) {
  StatusOr<std::vector<plan::HostFigures>> figures = calibration::FetchHostFigures(coord);
  if (figures.ok()) return *std::move(figures);
  PX_LOG(WARNING) << "the hosts' measured figures are not available: "
                  << figures.status().ToString() << "; planning with the defaults";
  return {};
}

// What an earlier sync job of `workers` workers measured of its ranks' wait
// for the slowest one (core/plan/straggler.h); none when unavailable.
std::optional<plan::MeasuredStraggler> StragglerFigure(CoordinatorClient* coord, int workers) {
  StatusOr<std::optional<plan::MeasuredStraggler>> s = calibration::FetchStraggler(coord, workers);
  if (s.ok()) return *std::move(s);
  PX_LOG(WARNING) << "the measured wait for the slowest rank is not available: "
                  << s.status().ToString() << "; planning without it";
  return std::nullopt;
}

// The model's correction by an earlier attempt's measurements, when the job
// re-plans on evidence and one was made (core/plan/plan_correction.h).
StatusOr<std::optional<plan::PlanCorrection>> PlanCorrectionOf(CoordinatorClient* coord,
                                                               int64_t job_id) {
  StatusOr<std::optional<std::string>> got = coord->KvGetIfSet(kv_keys::PlanCorrection(job_id));
  if (!got.ok()) return got.status().WithContext("reading the job's re-plan correction");
  if (!*got) return std::optional<plan::PlanCorrection>();
  PX_ASSIGN_OR_RETURN(plan::PlanCorrection c, plan::ParsePlanCorrection(**got));
  return std::optional<plan::PlanCorrection>(std::move(c));
}

// The hot rows an earlier attempt's rank 0 measured (core/plan/hot_presence.h);
// none when there are none, or when they cannot be read (logged: the plan
// then takes the sampled batches, as a first attempt does).
std::optional<plan::MeasuredPresence> HotRowPresenceOf(CoordinatorClient* coord, int64_t job_id) {
  StatusOr<std::optional<std::string>> got = coord->KvGetIfSet(kv_keys::HotRowPresence(job_id));
  if (!got.ok()) {
    PX_LOG(WARNING) << "reading the hot rows measured by an earlier attempt: " << got.status().ToString();
    return std::nullopt;
  }
  if (!*got) return std::nullopt;
  StatusOr<plan::MeasuredPresence> m = plan::ParsePresence(**got);
  if (!m.ok()) {
    PX_LOG(WARNING) << "the hot rows measured by an earlier attempt are unreadable: " << m.status().ToString();
    return std::nullopt;
  }
  return std::move(m).value();
}

StatusOr<plan::JobPlan> SessionImpl::ObtainPlan() {
  std::string json;
  if (options_.rank == 0) {
    plan::PlanInputs inputs;
    inputs.cluster = {.workers = options_.world_size,
                      .hosts = std::max(1, options_.num_hosts),
                      .shards = options_.num_shards,
                      .ps_hosts = plan::PsHostsOf(options_.config, options_.num_shards)};
    inputs.fusion_bucket_bytes = options_.fusion_bucket_bytes;
    inputs.shm_allreduce = WorldOptions().shared_memory;  // what JoinCollectives makes
    inputs.variables = registry_.inputs();
    if (coord_) {
      inputs.host_figures = MeasuredHostFigures(coord_.get());
      inputs.straggler = StragglerFigure(coord_.get(), options_.world_size);
    }
    if (coord_ && options_.config.plan.replan) {
      PX_ASSIGN_OR_RETURN(inputs.correction, PlanCorrectionOf(coord_.get(), options_.job_id));
    }
    if (coord_ && options_.config.ps.hot_rows != 0) inputs.presence = HotRowPresenceOf(coord_.get(), options_.job_id);
    PX_ASSIGN_OR_RETURN(plan::JobPlan plan, plan::BuildPlan(options_.config, inputs));
    json = plan::JobPlanToJson(plan);
    if (coord_) {
      PX_RETURN_IF_ERROR(
          coord_->PutPlan(options_.job_id, options_.attempt, json)
              .WithContext("putting the plan of job " + std::to_string(options_.job_id)));
    }
  }
  if (coord_) {
    StatusOr<std::string> got =
        coord_->GetPlan(options_.job_id, options_.attempt, options_.plan_timeout.count());
    if (!got.ok()) {
      return got.status().WithContext(RankName() + " waiting for the plan of job " +
                                      std::to_string(options_.job_id) + " attempt " +
                                      std::to_string(options_.attempt));
    }
    json = std::move(got).value();
  }
  plan_json_ = json;
  PX_ASSIGN_OR_RETURN(plan::JobPlan plan, plan::ParseJobPlan(json));
  Status match = plan::CheckRegistrationsMatch(plan, registry_.Registered(), options_.rank);
  PX_RETURN_IF_ERROR(AgreeOnRegistrations(match));
  return plan;
}

// Every rank times the calls the plan will issue, all at once, and each
// host's first rank leaves its host's figures with the coordinator for the
// next plan of this cluster (core/calibration/call_probe.h). A figure that
// cannot be stored is only logged: this attempt's plan is made already.
Status SessionImpl::MeasureCalls() {
  if (!coord_ || options_.world_size <= 1) return Status::Ok();
  calibration::CallProbeOptions po;
  po.rank = options_.rank;
  po.job_id = options_.job_id;
  po.clock = step_;
  po.bind_address = options_.bind_address;
  po.timeout = options_.step_timeout;
  ps::PsClient* ps = plan_.has_ps() ? sparse_->ps() : nullptr;
  StatusOr<plan::MeasuredCalls> calls =
      calibration::ProbeCalls(po, plan_, comm_.get(), ps, ps_endpoints_);
  if (!calls.ok()) return calls.status().WithContext(RankName() + " timing the job's calls");
  // The probe's bytes are no step's: the first interval's counters start after them.
  (void)metrics_.Take(comm_.get(), ps, nullptr);
  if (options_.local_rank != 0) return Status::Ok();
  Status stored = calibration::StoreMeasuredCalls(coord_.get(), options_.bind_address, *calls);
  if (!stored.ok()) PX_LOG(WARNING) << stored.ToString() << "; the next plan keeps older figures";
  PX_LOG(INFO) << "rank " << options_.rank << " measured: all-reduce call "
               << calls->allreduce_call_s * 1e3 << " ms (" << calls->allreduce_bytes
               << " B), PS round trip " << calls->ps_rtt_s * 1e3 << " ms, pull of "
               << calls->ps_pull_rows << " rows " << calls->ps_pull_s * 1e3 << " ms, link "
               << calls->link_bytes_per_s << " B/s";
  return Status::Ok();
}

// Every rank publishes whether its registrations match the plan and reads
// every other rank's verdict, so that all ranks stop with the same message
// instead of the others waiting for a peer that already gave up.
Status SessionImpl::AgreeOnRegistrations(const Status& mine) {
  if (!coord_ || options_.world_size == 1) return mine;
  auto key = [&](int rank) {
    return kv_keys::RankRegistrations(options_.job_id, options_.attempt, rank);
  };
  PX_RETURN_IF_ERROR(coord_->KvSet(key(options_.rank), mine.ok() ? "ok" : mine.ToString()));
  if (!mine.ok()) return mine;
  std::vector<std::string> keys;
  for (int r = 0; r < options_.world_size; ++r) keys.push_back(key(r));
  auto verdicts = coord_->KvGet(keys, options_.rendezvous_timeout.count());
  if (!verdicts.ok()) {
    return verdicts.status().WithContext(RankName() +
                                         " waiting for every rank to register its variables");
  }
  for (int r = 0; r < options_.world_size; ++r) {
    const std::string& v = (*verdicts)[static_cast<size_t>(r)];
    if (v != "ok") return FailedPrecondition("rank " + std::to_string(r) + " cannot train: " + v);
  }
  return Status::Ok();
}

comm::CommunicatorOptions SessionImpl::WorldOptions() const {
  comm::CommunicatorOptions co;
  co.rank = options_.rank;
  co.world_size = options_.world_size;
  co.key_prefix = kv_keys::CommPrefix(options_.job_id, options_.attempt);
  co.bind_address = options_.bind_address;
  co.rendezvous_timeout = options_.rendezvous_timeout;
  return co;
}

// The job's communicator (several ranks), and the host's for local
// aggregation (several ranks on this host).
Status SessionImpl::JoinCollectives() {
  if (options_.world_size <= 1) return Status::Ok();
  PX_ASSIGN_OR_RETURN(store_, comm::ConnectCoordinatorRendezvousStore(CoordinatorOptions()));
  comm::CommunicatorOptions co = WorldOptions();
  auto world = comm::Communicator::Create(co, store_.get());
  if (!world.ok()) return world.status().WithContext(RankName() + " joining the collectives");
  comm_ = std::move(world).value();
  if (!plan_.local_aggregation || options_.local_world_size <= 1) return Status::Ok();
  co.rank = options_.local_rank;
  co.world_size = options_.local_world_size;
  co.key_prefix += "/host-" + std::to_string(options_.host_index);
  auto host = comm::Communicator::Create(co, store_.get());
  if (!host.ok()) {
    return host.status().WithContext(RankName() +
                                     " joining its host's ranks for local aggregation");
  }
  host_comm_ = std::move(host).value();
  return Status::Ok();
}

// Every variable goes to the part of its path, with its initial values.
Status SessionImpl::CreateParts() {
  DenseSync::Options dense_options;
  dense_options.fusion_bucket_bytes = options_.fusion_bucket_bytes;
  dense_options.step_timeout = options_.step_timeout;
  dense_ = std::make_unique<DenseSync>(dense_options, comm_.get(), &timeline_, &metrics_);
  PsConnection ps;
  if (plan_.has_ps()) {
    PX_ASSIGN_OR_RETURN(ps, ConnectPs(coord_.get(), options_, plan_, &timeline_));
    ps_endpoints_ = ps.endpoints;
  }
  SparseSync::Options sparse_options;
  sparse_options.rank = options_.rank;
  sparse_options.local_rank = options_.local_rank;
  sparse_options.step_timeout = options_.step_timeout;
  sparse_options.batch = options_.config.ps.batch;
  sparse_options.cache_staleness = options_.config.ps.cache_staleness;
  sparse_options.cache_rows = static_cast<size_t>(options_.config.ps.cache_rows);
  sparse_options.cache_accumulate = options_.config.ps.cache_accumulate;
  sparse_options.cache_check_versions = options_.config.ps.cache_check_versions;
  sparse_options.count_presence = options_.rank == 0 && coord_ && options_.config.ps.hot_rows != 0 &&
                                  plan_.consistency == Consistency::kSync;
  sparse_ = std::make_unique<SparseSync>(sparse_options, &plan_, comm_.get(), std::move(host_comm_),
                                         std::move(ps), &timeline_, &metrics_);
  device_ = std::make_unique<DeviceSync>(
      DeviceSync::Options{.world = WorldOptions(), .step_timeout = options_.step_timeout},
      store_.get());
  for (const plan::PlannedVariable& p : plan_.variables) {
    if (p.path == VariablePath::kPs) {
      sparse_->AddPs(p);
      continue;
    }
    const std::vector<float>& given = registry_.initial_values(static_cast<int>(p.id));
    std::vector<float> values;
    if (!given.empty()) {
      values = given;
      // A dense variable's are broadcast with the rest (BroadcastDenseValues);
      // a table's here: rank 0's values win.
      if (p.sparse && comm_ != nullptr) {
        Status st = comm_->Broadcast(values, 0, std::chrono::steady_clock::now() + options_.step_timeout);
        if (!st.ok()) return st.WithContext("broadcasting the initial values of \"" + p.name + "\"");
      }
    } else if (!p.sparse) {
      values = InitialDenseValues(p.init, p.id, p.size);
    } else {
      values.resize(static_cast<size_t>(p.rows) * p.dim);
      for (int64_t r = 0; r < p.rows; ++r) {
        InitialSparseRow(p.init, p.id, r, p.dim, values.data() + static_cast<size_t>(r) * p.dim);
      }
    }
    if (p.path == VariablePath::kAllReduce) {
      dense_->Add(p, std::move(values));
    } else {
      sparse_->AddAllGather(p, std::move(values));
    }
  }
  return Status::Ok();
}

std::vector<HeldVariable> SessionImpl::Held() {
  std::vector<HeldVariable> held;
  dense_->AppendHeld(&held);
  sparse_->AppendHeld(&held);
  std::sort(held.begin(), held.end(),
            [](const HeldVariable& a, const HeldVariable& b) { return a.id < b.id; });
  return held;
}

// Worker-held variables (every path but PS) and their optimizer state come
// back from dense.pxck on every rank, then the rank's own state blobs; the
// shards load their partitions.
//
// A variable whose path changed since the checkpoint (a re-plan, or a
// restart planned with the hosts' measured figures) carries its state
// across: one now held on workers that the checkpoint's plan kept on the
// PS is read from its partition files; one now on the PS that dense.pxck
// holds is read from there by its shards when they load.
Status SessionImpl::Resume(Checkpointer::ResumePoint rp) {
  const std::string where = RankName() + " resuming from the checkpoint in \"" + rp.dir + "\"";
  std::vector<DenseEntry> from_ps;
  auto entry_of = [&](const plan::PlannedVariable& v) -> const DenseEntry* {
    for (const DenseEntry& e : rp.dense) {
      if (e.id == v.id && e.name == v.name) return &e;
    }
    return nullptr;
  };
  for (const plan::PlannedVariable& v : plan_.variables) {
    const DenseEntry* e = entry_of(v);
    if (v.path == VariablePath::kPs) {
      if (e != nullptr && !v.dynamic && options_.rank == 0) {
        PX_LOG(INFO) << RankName() << ": \"" << v.name << "\" moved from the workers to the PS since "
                     << "the checkpoint of step " << rp.step << ": its shards load its state from "
                     << kDenseFile;
      }
      continue;
    }
    if (e != nullptr ||
        !std::filesystem::exists(rp.dir + "/" + ps::PartitionFileName(v.id, 0))) {
      continue;
    }
    StatusOr<DenseEntry> read = ReadPsVariable(rp.dir, v, rp.step);
    if (!read.ok()) return read.status().WithContext(where);
    PX_LOG(INFO) << RankName() << ": \"" << v.name << "\" moved from the PS to "
                 << VariablePathName(v.path) << " since the checkpoint of step " << rp.step
                 << ": its state read from the PS checkpoint files";
    from_ps.push_back(std::move(read).value());
  }
  std::move(from_ps.begin(), from_ps.end(), std::back_inserter(rp.dense));
  PX_RETURN_IF_ERROR(RestoreHeld(rp.dense, Held()).WithContext(where));
  PX_RETURN_IF_ERROR(states_.RestoreAll(rp.rank_state).WithContext(where));
  step_ = rp.step;
  resumed_from_ = rp.step;
  if (plan_.has_ps()) {
    PX_RETURN_IF_ERROR(
        sparse_->LoadCheckpoint(rp.dir, rp.step, options_.rank == 0).WithContext(where));
  }
  PX_LOG(INFO) << "rank " << options_.rank << " resumes job " << options_.job_id << " from step "
               << rp.step << " (" << rp.dir << ")";
  return Status::Ok();
}

// Rank 0's given initial values of PS variables go to the shards (a job
// that resumes has its checkpoint's instead).
Status SessionImpl::WriteInitialPsValues() {
  std::map<uint32_t, std::span<const float>> given;
  for (const plan::PlannedVariable& p : plan_.variables) {
    const std::vector<float>& values = registry_.initial_values(static_cast<int>(p.id));
    if (p.path == VariablePath::kPs && !values.empty()) given[p.id] = values;
  }
  return sparse_->WriteInitialValues(given, options_.rank == 0).WithContext(RankName());
}

Status SessionImpl::Start() {
  if (started_) return FailedPrecondition("Start() called twice");
  registry_.Close();
  PX_ASSIGN_OR_RETURN(plan_, ObtainPlan());
  if (timeline_.enabled()) {
    std::vector<std::string> names;
    for (const plan::PlannedVariable& v : plan_.variables) names.push_back(v.name);
    PX_RETURN_IF_ERROR(timeline_.Open(std::move(names)).WithContext(RankName()));
  }
  PX_RETURN_IF_ERROR(JoinCollectives());
  PX_RETURN_IF_ERROR(CreateParts());
  PX_RETURN_IF_ERROR(dense_->BroadcastDenseValues());
  Checkpointer::Options co;
  co.job_id = options_.job_id;
  co.attempt = options_.attempt;
  co.rank = options_.rank;
  co.world_size = options_.world_size;
  co.root = options_.config.trainer.checkpoint_dir;
  co.keep = options_.config.trainer.keep_checkpoints;
  co.timeout_ms = options_.step_timeout.count();
  checkpointer_ = std::make_unique<Checkpointer>(co, coord_.get());
  auto rp = checkpointer_->FindResumePoint();
  if (!rp.ok()) return rp.status().WithContext(RankName() + " resuming");
  if (*rp) {
    PX_RETURN_IF_ERROR(Resume(std::move(**rp)));
  } else if (plan_.has_ps()) {
    PX_RETURN_IF_ERROR(WriteInitialPsValues());
  }
  if (plan_.has_ps()) {
    PX_RETURN_IF_ERROR(sparse_->PullDenseValues());
    PX_RETURN_IF_ERROR(sparse_->PullHotRows(step_));
  }
  if (plan_.has_ps() && coord_) {
    lease_.emplace(ConsistencyLease::Options{.job_id = options_.job_id,
                                             .attempt = options_.attempt,
                                             .rank = options_.rank},
                   coord_.get());
    PX_RETURN_IF_ERROR(FollowConsistency());
  }
  // After the consistency mode of a resumed attempt is replayed: the probe's
  // pulls are of this step, as the first step's will be.
  PX_RETURN_IF_ERROR(MeasureCalls());
  reporter_.emplace(ReporterOptions(), coord_.get());
  reporter_->Start();
  started_ = true;
  step_started_ = std::chrono::steady_clock::now();
  timeline_.SetStep(step_);
  timeline_.OpenCompute(step_started_);
  std::string paths;
  for (const plan::PlannedVariable& v : plan_.variables)
    paths += " \"" + v.name + "\"=" + VariablePathName(v.path);
  PX_LOG(INFO) << "rank " << options_.rank << " started with plan:" << paths;
  return Status::Ok();
}

// ---- Per step ----

Status SessionImpl::Prefetch(int var, std::span<const int64_t> next_ids) {
  const int vars[] = {var};
  const std::span<const int64_t> ids[] = {next_ids};
  return PrefetchVars("Prefetch", vars, ids);
}

Status SessionImpl::PrefetchMany(std::span<const int> vars,
                                 std::span<const std::span<const int64_t>> next_ids) {
  return PrefetchVars("PrefetchMany", vars, next_ids);
}

Status SessionImpl::PrefetchVars(const char* what, std::span<const int> vars,
                                 std::span<const std::span<const int64_t>> next_ids) {
  PX_RETURN_IF_ERROR(Usable(what));
  if (vars.size() != next_ids.size()) {
    return InvalidArgument(std::string(what) + ": " + std::to_string(vars.size()) +
                           " variables but " + std::to_string(next_ids.size()) + " id lists");
  }
  std::vector<std::pair<uint32_t, std::span<const int64_t>>> on_ps;
  for (size_t i = 0; i < vars.size(); ++i) {
    PX_RETURN_IF_ERROR(registry_.Check(vars[i], /*sparse=*/true, what));
    const plan::PlannedVariable& v = Planned(vars[i]);
    PX_RETURN_IF_ERROR(CheckIds(v, next_ids[i]));
    if (v.path == VariablePath::kPs) on_ps.emplace_back(v.id, next_ids[i]);  // else: local
  }
  if (on_ps.empty()) return Status::Ok();  // local tables: nothing to fetch
  Status st = sparse_->PrefetchMany(on_ps, step_ + 1);
  return st.ok() ? st : Fail(st.WithContext(StepName()));
}

Status SessionImpl::Lookup(int var, std::span<const int64_t> ids, std::vector<float>* rows) {
  TimelineScope in_session(&timeline_);
  PX_RETURN_IF_ERROR(Usable("Lookup"));
  PX_RETURN_IF_ERROR(registry_.Check(var, /*sparse=*/true, "Lookup"));
  const plan::PlannedVariable& v = Planned(var);
  PX_RETURN_IF_ERROR(CheckIds(v, ids));
  if (v.path == VariablePath::kAllReduce) {
    GatherRows(dense_->Values(v.id), v.dim, ids, rows);
    return Status::Ok();
  }
  Status st = sparse_->Lookup(v.id, ids, step_, rows);
  return st.ok() ? st : Fail(st.WithContext(StepName()));
}

Status SessionImpl::Gradient(int var, std::span<const float> grad) {
  PX_RETURN_IF_ERROR(Usable("Gradient"));
  PX_RETURN_IF_ERROR(registry_.Check(var, /*sparse=*/false, "Gradient"));
  const plan::PlannedVariable& v = Planned(var);
  PX_RETURN_IF_ERROR(CheckDenseGradient(v, grad.size()));
  PX_RETURN_IF_ERROR(CheckFinite(v, grad));
  if (v.path == VariablePath::kPs) {
    sparse_->DenseGradient(v.id, grad);
    return Status::Ok();
  }
  Status st = dense_->Gradient(v.id, grad);
  return st.ok() ? st : Fail(st.WithContext(StepName()));
}

Status SessionImpl::CheckDenseGradient(const plan::PlannedVariable& v, size_t size) const {
  if (size != v.size) {
    return InvalidArgument(StepName() + ": gradient of \"" + v.name + "\" has " +
                           std::to_string(size) + " values, expected " + std::to_string(v.size));
  }
  const bool on_ps = v.path == VariablePath::kPs;
  if (on_ps ? sparse_->HasGradient(v.id) : dense_->HasGradient(v.id)) {
    return InvalidArgument(StepName() + ": gradient of \"" + v.name + "\" given twice");
  }
  return Status::Ok();
}

// The mean over the ranks (or, on the PS path, this rank's gradient for the
// shards to average) goes where a host gradient would.
Status SessionImpl::GradientDevice(int var, const void* device_grad, size_t count) {
  PX_RETURN_IF_ERROR(Usable("GradientDevice"));
  PX_RETURN_IF_ERROR(registry_.Check(var, /*sparse=*/false, "GradientDevice"));
  const plan::PlannedVariable& v = Planned(var);
  PX_RETURN_IF_ERROR(CheckDenseGradient(v, count));
  const std::string what = StepName() + ": gradient of \"" + v.name + "\"";
  // Memory that is not the device's is refused and changes nothing; a
  // failed collective breaks the session.
  StatusOr<int> device = DeviceSync::DeviceOf(device_grad);
  if (!device.ok()) return device.status().WithContext(what);
  const bool on_ps = v.path == VariablePath::kPs;
  std::vector<float> host;
  Status st = device_->ToHost(*device, device_grad, count, /*reduce=*/!on_ps, &host);
  if (!st.ok()) return Fail(st.WithContext(what));
  PX_RETURN_IF_ERROR(CheckFinite(v, host));
  if (on_ps) {
    sparse_->DenseGradient(v.id, host);
  } else {
    dense_->ReducedGradient(v.id, host);
  }
  return Status::Ok();
}

Status SessionImpl::Gradient(int var, std::span<const int64_t> ids,
                             std::span<const float> row_grads) {
  PX_RETURN_IF_ERROR(Usable("Gradient"));
  PX_RETURN_IF_ERROR(registry_.Check(var, /*sparse=*/true, "Gradient"));
  const plan::PlannedVariable& v = Planned(var);
  if (row_grads.size() != ids.size() * v.dim) {
    return InvalidArgument(StepName() + ": gradient of \"" + v.name + "\" has " +
                           std::to_string(row_grads.size()) + " values for " +
                           std::to_string(ids.size()) + " ids of dim " + std::to_string(v.dim));
  }
  PX_RETURN_IF_ERROR(CheckIds(v, ids));
  PX_RETURN_IF_ERROR(CheckFinite(v, row_grads));
  if (v.path == VariablePath::kAllReduce) {
    dense_->AddRows(v.id, ids, row_grads);
  } else {
    sparse_->AddRows(v.id, ids, row_grads);
  }
  return Status::Ok();
}

Status SessionImpl::Step() {
  TimelineScope in_session(&timeline_);
  PX_RETURN_IF_ERROR(Usable("Step"));
  const std::string where = StepName();
  // PS pushes leave first (asynchronous), the dense all-reduce runs while
  // they travel, then the all-gather exchange; last, the PS results (sync:
  // the step applied on every shard).
  // Row caches hold gradients back: a checkpoint and the last step get all.
  const int64_t next = step_ + 1;
  const bool flush = next >= options_.config.trainer.steps || CheckpointAfter(next);
  Status st = sparse_->StartPushes(step_, flush);
  if (st.ok()) st = dense_->Finish(sparse_->HotBlocks());
  if (st.ok()) st = sparse_->ApplyHotRows();
  if (st.ok()) st = sparse_->ExchangeAllGather();
  if (st.ok()) st = sparse_->FinishPushes(step_);
  if (st.ok()) st = sparse_->AdvancePrefetches();
  if (!st.ok()) return Fail(st.WithContext(where));
  ++step_;
  timeline_.SetStep(step_);
  return AfterStep();
}

bool SessionImpl::CheckpointAfter(int64_t steps) const {
  const JobConfig::Trainer& trainer = options_.config.trainer;
  // The job's last step too, so what it ends with is what export finds.
  return !trainer.checkpoint_dir.empty() && trainer.checkpoint_every > 0 &&
         (steps % trainer.checkpoint_every == 0 || steps == trainer.steps);
}

// The step's time, a partition-search trial's timing, and the checkpoint.
Status SessionImpl::AfterStep() {
  const auto now = std::chrono::steady_clock::now();
  metrics_.EndStep(step_started_, now);
  if (trial_.Add(std::chrono::duration<double>(now - step_started_).count()) &&
      options_.rank == 0) {
    Status st = PublishTrial(coord_.get(), options_, trial_.Median());
    if (!st.ok()) return Fail(st);
  }
  step_started_ = now;
  if (CheckpointAfter(step_)) {
    Status st = WriteCheckpoint();
    timeline_.Record(Lane::kCheckpoint, now, std::chrono::steady_clock::now());
    if (!st.ok()) return Fail(st);
    step_started_ = std::chrono::steady_clock::now();  // the checkpoint is no step's compute
  }
  Status st = FollowConsistency();
  return st.ok() ? st : Fail(st);
}

// The coordinator places a switch past every rank's lease, so this rank
// learns it before it runs the step before the switch: in time for its
// shards' SET and for the clock the new mode needs at the end of that step.
Status SessionImpl::FollowConsistency() {
  if (!lease_) return Status::Ok();
  PX_ASSIGN_OR_RETURN(std::vector<ConsistencyLease::Switch> fresh, lease_->Renew(step_));
  for (const auto& [from, mode] : fresh) {
    PX_RETURN_IF_ERROR(sparse_->SetConsistency(from, mode, step_));
  }
  return Status::Ok();
}

Status SessionImpl::WriteCheckpoint() {
  std::vector<DenseEntry> dense;
  if (options_.rank == 0) {
    dense = SnapshotHeld(Held());
    // The shards save the hot rows, state and all, as this rank has them.
    PX_RETURN_IF_ERROR(sparse_->WriteHotRows().WithContext("checkpoint of step " + std::to_string(step_)));
    // What the steps since the last checkpoint say is hot, for the next
    // attempt's plan: a measurement, so a failure to store it is logged.
    if (std::optional<plan::MeasuredPresence> p = sparse_->TakePresence(options_.attempt, step_)) {
      if (Status st = coord_->KvSet(kv_keys::HotRowPresence(options_.job_id), plan::FormatPresence(*p));
          !st.ok()) {
        PX_LOG(WARNING) << RankName() << ": storing the hot rows measured through step " << step_
                        << ": " << st.ToString();
      }
    }
  }
  std::map<std::string, std::string> state = states_.SaveAll();
  return checkpointer_->Write(step_, plan_json_, dense, state, sparse_->ps());
}

StatusOr<std::span<const float>> SessionImpl::Dense(int var) const {
  if (!started_) return FailedPrecondition("Dense before Start()");
  if (var < 0 || static_cast<size_t>(var) >= plan_.variables.size() || Planned(var).sparse) {
    return InvalidArgument("Dense: " + std::to_string(var) + " is not a dense variable");
  }
  const plan::PlannedVariable& v = Planned(var);
  return v.path == VariablePath::kPs ? sparse_->DenseValues(v.id) : dense_->Values(v.id);
}

Status SessionImpl::ReadSparse(int var, int64_t first_row, int64_t count,
                               std::vector<float>* out) {
  TimelineScope in_session(&timeline_);
  PX_RETURN_IF_ERROR(Usable("ReadSparse"));
  PX_RETURN_IF_ERROR(registry_.Check(var, /*sparse=*/true, "ReadSparse"));
  const plan::PlannedVariable& v = Planned(var);
  // A dynamic table's ids are any 64-bit values: a range of them reads
  // their rows, or the initializer's values for ids that are not rows.
  if (count < 0 || (!v.dynamic && (first_row < 0 || first_row + count > v.rows))) {
    return InvalidArgument("ReadSparse: rows [" + std::to_string(first_row) + ", " +
                           std::to_string(first_row + count) + ") are outside \"" + v.name + "\"");
  }
  if (v.path == VariablePath::kAllReduce) {
    const std::span<const float> table = dense_->Values(v.id);
    out->assign(table.begin() + first_row * v.dim, table.begin() + (first_row + count) * v.dim);
    return Status::Ok();
  }
  return sparse_->ReadSparse(v.id, first_row, count, step_, out);
}

Status SessionImpl::SetLearningRate(int var, double lr) {
  PX_RETURN_IF_ERROR(Usable("SetLearningRate"));
  if (var < 0 || static_cast<size_t>(var) >= plan_.variables.size())
    return NotFound("SetLearningRate: no variable " + std::to_string(var));
  const plan::PlannedVariable& v = Planned(var);
  if (!std::isfinite(lr) || lr <= 0 || lr > std::numeric_limits<float>::max()) {
    return InvalidArgument(StepName() + ": learning rate " + std::to_string(lr) + " of \"" +
                           v.name + "\" must be a finite number > 0");
  }
  if (v.path == VariablePath::kAllReduce) {
    dense_->SetLearningRate(v.id, static_cast<float>(lr));
    return Status::Ok();
  }
  Status st = sparse_->SetLearningRate(v.id, lr, step_);
  return st.ok() ? st : Fail(st.WithContext(StepName()));
}

Status SessionImpl::ReportMetrics(int64_t step, double loss, int64_t samples) {
  TimelineScope in_session(&timeline_);
  // Before Start() nothing has moved yet, but a NaN loss is still refused.
  if (!reporter_) reporter_.emplace(ReporterOptions(), coord_.get());
  if (std::isfinite(loss)) metrics_.AddLoss(loss);
  return reporter_->Report(step, loss, samples, [this] {
    return metrics_.Take(comm_.get(), sparse_ ? sparse_->ps() : nullptr,
                         sparse_ ? sparse_->host_comm() : nullptr);
  });
}

}  // namespace
}  // namespace trainer

StatusOr<std::unique_ptr<Session>> Session::Create(const SessionOptions& options) {
  if (options.world_size < 1 || options.rank < 0 || options.rank >= options.world_size) {
    return InvalidArgument("session: rank " + std::to_string(options.rank) +
                           " is not in 0..world_size-1 (world_size " +
                           std::to_string(options.world_size) + ")");
  }
  const JobConfig& config = options.config;
  if (config.job.staleness < 0) return InvalidArgument("session: staleness must be >= 0");
  if (options.coordinator.empty() && (options.world_size > 1 || options.num_shards > 0)) {
    return InvalidArgument(
        "session: several ranks or PS shards need a coordinator (PARALLAX_COORDINATOR)");
  }
  if (config.trainer.metrics_every < 1) {
    return InvalidArgument("session: metrics_every must be >= 1");
  }
  if (config.trainer.checkpoint_every < 0 || config.trainer.keep_checkpoints < 1) {
    return InvalidArgument("session: checkpoint_every must be >= 0 and keep_checkpoints >= 1");
  }
  auto session = std::make_unique<trainer::SessionImpl>(options);
  PX_RETURN_IF_ERROR(session->Connect());
  return std::unique_ptr<Session>(std::move(session));
}

}  // namespace parallax
