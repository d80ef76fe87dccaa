// SessionImpl (trainer/session_impl.h): registration, Start(), the step,
// checkpoints and metrics; the sparse-variable paths are in
// trainer/session_sparse.cc.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <numeric>

#include "core/base/logging.h"
#include "core/comm/coordinator_store.h"
#include "core/ps/discovery.h"
#include "trainer/session_impl.h"

namespace parallax {
namespace trainer {

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
    po.shared_memory = options_.ps_shared_memory;
    po.shared_memory_bytes = static_cast<size_t>(options_.ps_shared_memory_mb) << 20;
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
  for (Var& v : vars_) {
    // This step's prefetch is spent (its reply collected if no lookup
    // waited for it); the one made during this step serves the next.
    if (v.prefetched && !v.prefetched->arrived) {
      std::vector<float> unused;
      Status st = AwaitPull(v.prefetched->ticket, std::move(v.prefetched->rows), &unused);
      if (!st.ok()) return Fail(st.WithContext(where + ": unused prefetch of \"" + v.plan.name + "\""));
    }
    v.prefetched = std::move(v.prefetch);
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

Status SessionImpl::SetLearningRate(int var, double lr) {
  PX_RETURN_IF_ERROR(Usable("SetLearningRate"));
  if (var < 0 || static_cast<size_t>(var) >= vars_.size())
    return NotFound("SetLearningRate: no variable " + std::to_string(var));
  Var& v = vars_[static_cast<size_t>(var)];
  if (!std::isfinite(lr) || lr <= 0 || lr > std::numeric_limits<float>::max()) {
    return InvalidArgument(StepName() + ": learning rate " + std::to_string(lr) + " of \"" +
                           v.plan.name + "\" must be a finite number > 0");
  }
  if (v.dense_opt) v.dense_opt->set_lr(static_cast<float>(lr));
  if (v.sparse_opt) v.sparse_opt->set_lr(static_cast<float>(lr));
  if (v.plan.path != VariablePath::kPs) return Status::Ok();
  char text[32];
  std::snprintf(text, sizeof text, "%.9g", lr);
  PX_ASSIGN_OR_RETURN(ps::Ticket t, ps_->Set(v.plan.id, "lr", text, step_));
  Status st = ps_->Wait(t, StepDeadline());
  if (!st.ok()) {
    return Fail(st.WithContext(StepName() + ": setting the learning rate of \"" + v.plan.name +
                               "\"" + ShardsOf(v)));
  }
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

}  // namespace trainer

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
  auto session = std::make_unique<trainer::SessionImpl>(options);
  PX_RETURN_IF_ERROR(session->Connect());
  return std::unique_ptr<Session>(std::move(session));
}

}  // namespace parallax
