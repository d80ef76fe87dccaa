#include "core/calibration/call_probe.h"

#include <algorithm>
#include <cmath>
#include <ctime>

#include "core/base/host_port.h"
#include "core/base/logging.h"
#include "core/plan/cost_model.h"

namespace parallax::calibration {
namespace {

using Clock = std::chrono::steady_clock;

double Median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

double SecondsSince(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

// The elements of the plan's all-reduce calls: its fusion bucket, or all of
// its all-reduced variables when they fit one. A plan that all-reduces
// nothing: its dense variables, what all-reduce would carry were the next
// plan to put them back there (a one-element call would cost the next plan
// the call's fixed part alone, with none of the buffer's handling).
size_t AllReduceElements(const CallProbeOptions& options, const plan::JobPlan& plan) {
  size_t elements = 0, dense = 0;
  for (const plan::PlannedVariable& v : plan.variables) {
    if (!v.sparse) dense += v.size;
    if (v.path != VariablePath::kAllReduce) continue;
    elements += v.sparse ? static_cast<size_t>(v.rows) * v.dim : v.size;
  }
  if (elements == 0) elements = dense;
  const size_t cap = std::min(plan.cost.fusion_bucket_bytes, options.max_allreduce_bytes) / 4;
  return std::clamp<size_t>(elements, 1, std::max<size_t>(1, cap));
}

// Every rank here before any goes on: a one-element all-reduce.
Status Barrier(comm::Communicator* world, Clock::time_point deadline) {
  if (world == nullptr) return Status::Ok();
  std::vector<float> one(1, 0.0f);
  return world->AllReduce(one, comm::ReduceOp::kSum, deadline);
}

// The median of `rounds` all-reduce calls of `elements` floats.
StatusOr<double> TimeAllReduce(comm::Communicator* world, size_t elements, int rounds,
                               Clock::time_point deadline) {
  std::vector<float> buf(elements, 1.0f);
  // One call first, untimed: a backend's first call of a size may set up
  // what the later ones reuse (buffers, pairs), which no step pays again.
  PX_RETURN_IF_ERROR(world->AllReduce(buf, comm::ReduceOp::kSum, deadline));
  std::vector<double> times;
  for (int i = 0; i < rounds; ++i) {
    const Clock::time_point t = Clock::now();
    PX_RETURN_IF_ERROR(world->AllReduce(buf, comm::ReduceOp::kSum, deadline));
    times.push_back(SecondsSince(t));
  }
  return Median(times);
}

// The PS variable whose pulls move the most rows a step (density × rows).
const plan::PlannedVariable* BusiestPsVariable(const plan::JobPlan& plan, double* rows) {
  const plan::PlannedVariable* best = nullptr;
  *rows = 0;
  for (const plan::PlannedVariable& v : plan.variables) {
    if (v.path != VariablePath::kPs) continue;
    const double k = v.density > 0 ? std::max(1.0, std::round(v.density * v.rows))
                                   : static_cast<double>(v.rows);
    if (best == nullptr || k > *rows) {
      best = &v;
      *rows = k;
    }
  }
  return best;
}

// One pull of `ids` of `var`, waited for; its seconds.
StatusOr<double> TimePull(ps::PsClient* ps, uint32_t var, const std::vector<int64_t>& ids,
                          int64_t clock, Clock::time_point deadline) {
  std::vector<float> out;
  const Clock::time_point t = Clock::now();
  PX_ASSIGN_OR_RETURN(ps::Ticket ticket, ps->Pull(var, ids, clock, &out));
  PX_RETURN_IF_ERROR(ps->Wait(ticket, deadline));
  return SecondsSince(t);
}

// `k` distinct ids of a `rows`-row variable, spread over it, different on
// each rank.
std::vector<int64_t> SpreadIds(int64_t rows, int64_t k, int rank) {
  std::vector<int64_t> ids;
  const int64_t stride = std::max<int64_t>(1, rows / std::max<int64_t>(1, k));
  for (int64_t i = 0; i < k && i < rows; ++i) ids.push_back((i * stride + rank) % rows);
  std::sort(ids.begin(), ids.end());
  ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
  return ids;
}

// The host of a "tcp://HOST:PORT" endpoint.
std::string EndpointHost(const std::string& endpoint) {
  const size_t scheme = endpoint.find("://");
  return HostOf(scheme == std::string::npos ? endpoint : endpoint.substr(scheme + 3));
}

// Rank 0: the link toward the first shard on another host, from a large
// and a one-row pull of rows held there (the best of `rounds` each).
Status ProbeLink(const CallProbeOptions& options, const plan::JobPlan& plan, ps::PsClient* ps,
                 const std::vector<std::string>& endpoints, Clock::time_point deadline,
                 plan::MeasuredCalls* out) {
  int shard = -1;
  for (size_t s = 0; s < endpoints.size(); ++s) {
    if (EndpointHost(endpoints[s]) != options.bind_address) {
      shard = static_cast<int>(s);
      break;
    }
  }
  if (shard < 0) return Status::Ok();
  const ps::VariableSpec* spec = nullptr;
  for (const ps::VariableSpec& v : ps->plan().variables) {
    if (spec == nullptr || v.rows > spec->rows) spec = &v;
  }
  if (spec == nullptr) return Status::Ok();
  const int64_t row_bytes = static_cast<int64_t>(spec->dim) * plan.cost.value_bytes;
  const int64_t probe_bytes = static_cast<int64_t>(options.link_probe_bytes);
  const int64_t want = std::max<int64_t>(2, probe_bytes / std::max<int64_t>(1, row_bytes));
  std::vector<int64_t> large;
  for (int64_t id = 0; id < spec->rows && static_cast<int64_t>(large.size()) < want; ++id) {
    if (ps::ShardOf(*spec, ps::PartitionOf(*spec, id)) == static_cast<uint32_t>(shard)) {
      large.push_back(id);
    }
  }
  if (large.size() < 2) return Status::Ok();
  const std::vector<int64_t> small(large.begin(), large.begin() + 1);
  double t_large = 1e30, t_small = 1e30;
  for (int i = 0; i < options.rounds; ++i) {
    PX_ASSIGN_OR_RETURN(double ts, TimePull(ps, spec->id, small, options.clock, deadline));
    PX_ASSIGN_OR_RETURN(double tl, TimePull(ps, spec->id, large, options.clock, deadline));
    t_small = std::min(t_small, ts);
    t_large = std::min(t_large, tl);
  }
  const double bytes = static_cast<double>(large.size() - 1) * row_bytes;
  if (t_large <= t_small) return Status::Ok();  // too fast to tell apart
  out->link_bytes_per_s = bytes / (t_large - t_small);
  out->link_peer = EndpointHost(endpoints[static_cast<size_t>(shard)]);
  return Status::Ok();
}

}  // namespace

double CollectiveLatencyFromCall(double call_s, double bytes, const plan::ClusterShape& cluster,
                                 const plan::CostOptions& cost) {
  if (cluster.workers <= 1) return 0;
  const bool shm = plan::SharedMemoryAllReduce(cluster, cost);
  if (shm && cluster.hosts <= 1) return 0;
  plan::CostOptions no_latency = cost;
  no_latency.collective_latency_s = 0;
  no_latency.fusion_bucket_bytes = std::max<size_t>(cost.fusion_bucket_bytes,
                                                    static_cast<size_t>(bytes) + 4);
  plan::VariableStats var;
  var.rows = 1;
  var.dim = std::max<int64_t>(1, static_cast<int64_t>(bytes / 4));
  const double rest = plan::AllReduceCost(var, cluster, no_latency).seconds;
  const double rounds = 1.5 * ((shm ? cluster.hosts : cluster.workers) - 1);
  return std::max(1e-6, (call_s - rest) / rounds);
}

StatusOr<plan::MeasuredCalls> ProbeCalls(const CallProbeOptions& options,
                                         const plan::JobPlan& plan, comm::Communicator* world,
                                         ps::PsClient* ps,
                                         const std::vector<std::string>& shard_endpoints) {
  const Clock::time_point deadline = Clock::now() + options.timeout;
  plan::MeasuredCalls out;
  out.measured_unix_s = std::time(nullptr);
  out.job_id = options.job_id;
  out.workers = plan.cluster.workers;
  out.hosts = plan.cluster.hosts;
  if (world != nullptr) {
    const size_t elements = AllReduceElements(options, plan);
    PX_RETURN_IF_ERROR(Barrier(world, deadline).WithContext("the call probe's barrier"));
    PX_ASSIGN_OR_RETURN(out.allreduce_call_s,
                        TimeAllReduce(world, elements, options.rounds, deadline));
    out.allreduce_bytes = static_cast<double>(elements) * 4;
    out.collective_latency_s = CollectiveLatencyFromCall(out.allreduce_call_s,
                                                         out.allreduce_bytes, plan.cluster,
                                                         plan.cost);
  }
  double rows = 0;
  const plan::PlannedVariable* var = ps != nullptr ? BusiestPsVariable(plan, &rows) : nullptr;
  if (var != nullptr) {
    PX_RETURN_IF_ERROR(Barrier(world, deadline).WithContext("the call probe's barrier"));
    const std::vector<int64_t> one = SpreadIds(var->rows, 1, options.rank);
    const std::vector<int64_t> typical =
        SpreadIds(var->rows, static_cast<int64_t>(rows), options.rank);
    std::vector<double> rtt, pull;
    for (int i = 0; i < options.rounds; ++i) {
      PX_ASSIGN_OR_RETURN(double t1, TimePull(ps, var->id, one, options.clock, deadline));
      PX_ASSIGN_OR_RETURN(double tk, TimePull(ps, var->id, typical, options.clock, deadline));
      rtt.push_back(t1);
      pull.push_back(tk);
    }
    out.ps_rtt_s = Median(rtt);
    out.ps_pull_s = Median(pull);
    out.ps_pull_rows = static_cast<double>(typical.size());
    PX_RETURN_IF_ERROR(Barrier(world, deadline).WithContext("the call probe's barrier"));
    if (options.rank == 0 && plan.cluster.hosts > 1) {
      PX_RETURN_IF_ERROR(ProbeLink(options, plan, ps, shard_endpoints, deadline, &out));
    }
  }
  PX_RETURN_IF_ERROR(Barrier(world, deadline).WithContext("the call probe's barrier"));
  return out;
}

}  // namespace parallax::calibration
