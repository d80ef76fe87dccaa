// The sparse-variable paths of SessionImpl (trainer/session_impl.h): PS
// pulls, prefetches and pushes (with local aggregation), the all-gather
// exchange, and sparse gradients and reads.
#include <algorithm>
#include <cstring>
#include <numeric>

#include "core/ps/aggregate.h"
#include "trainer/session_impl.h"
#include "trainer/sparse_allgather.h"

namespace parallax::trainer {

Status SessionImpl::AwaitPull(ps::Ticket ticket, PullBuffer buf, std::vector<float>* out) {
  trainer::WaitTimer timer(&metrics_, /*dense=*/false, &timeline_);
  Status st = ps_->Wait(ticket, StepDeadline());
  if (st.ok()) {
    *out = std::move(*buf);
  } else if (st.code() == StatusCode::kDeadlineExceeded) {
    abandoned_.push_back(std::move(buf));  // still owned by the pending ticket
  }
  return st;
}

std::string SessionImpl::ShardsOf(const Var& v) const {
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
  bool served = false;
  PX_RETURN_IF_ERROR(LookupPrefetched(v, ids, rows, &served));
  if (served) return Status::Ok();
  auto buf = std::make_unique<std::vector<float>>();
  PX_ASSIGN_OR_RETURN(ps::Ticket t, ps_->Pull(v.plan.id, ids, step_, buf.get()));
  Status st = AwaitPull(t, std::move(buf), rows);
  if (!st.ok())
    return Fail(st.WithContext(StepName() + ": pulling \"" + v.plan.name + "\"" + ShardsOf(v)));
  return Status::Ok();
}

Status SessionImpl::LookupPrefetched(Var& v, std::span<const int64_t> ids,
                                     std::vector<float>* rows, bool* served) {
  *served = false;
  Prefetched* pf = v.prefetched.get();
  if (pf == nullptr || pf->clock != step_) return Status::Ok();
  if (!pf->arrived) {
    auto buf = std::make_unique<std::vector<float>>();
    std::swap(buf, pf->rows);
    Status st = AwaitPull(pf->ticket, std::move(buf), pf->rows.get());
    if (!st.ok()) {
      v.prefetched.reset();
      return Fail(st.WithContext(StepName() + ": pulling \"" + v.plan.name + "\"" + ShardsOf(v)));
    }
    pf->arrived = true;
    pf->row_of.reserve(pf->ids.size());
    for (size_t i = 0; i < pf->ids.size(); ++i)
      pf->row_of.try_emplace(pf->ids[i], static_cast<uint32_t>(i));
  }
  const size_t dim = v.plan.dim;
  std::vector<float> out(ids.size() * dim);
  for (size_t i = 0; i < ids.size(); ++i) {
    auto it = pf->row_of.find(ids[i]);
    if (it == pf->row_of.end()) return Status::Ok();  // not all there: pull instead
    std::memcpy(out.data() + i * dim, pf->rows->data() + size_t{it->second} * dim,
                dim * sizeof(float));
  }
  *rows = std::move(out);
  *served = true;
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

}  // namespace parallax::trainer
