#include "core/plan/cost_model.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "core/base/format_bytes.h"

namespace parallax::plan {
namespace {

constexpr double kHeaderBytes = 64;  // schemas/ps_wire.h kHeaderSize
constexpr double kIdBytes = 8;

double RowsTouched(const VariableStats& var, double alpha) {
  return std::clamp(alpha, 0.0, 1.0) * static_cast<double>(var.rows);
}

// Messages per PS request: one per partition the batch touches, at most
// the rows touched.
double PsMessages(const VariableStats& var, double rows_touched) {
  return std::max(1.0, std::min<double>(std::max(1, var.partitions), std::ceil(rows_touched)));
}

}  // namespace

const char* PathName(Path path) {
  switch (path) {
    case Path::kAllReduce: return "allreduce";
    case Path::kAllGather: return "allgather";
    case Path::kPs: return "ps";
  }
  return "?";
}

const PathCost& Choice::cost(Path p) const {
  switch (p) {
    case Path::kAllReduce: return allreduce;
    case Path::kAllGather: return allgather;
    case Path::kPs:
      return ps_aggregated.feasible && ps_aggregated.link_bytes < ps.link_bytes ? ps_aggregated : ps;
  }
  return allreduce;
}

double PsPullBytes(double rows_touched, int64_t dim, int value_bytes, int messages) {
  return rows_touched * (kIdBytes + static_cast<double>(value_bytes) * dim) +
         2 * kHeaderBytes * messages;
}

double PsPushBytes(double rows_touched, int64_t dim, int value_bytes, int messages) {
  return rows_touched * (kIdBytes + static_cast<double>(value_bytes) * dim) +
         2 * kHeaderBytes * messages;
}

PathCost AllReduceCost(const VariableStats& var, const ClusterShape& cluster,
                       const CostOptions& options) {
  PathCost cost;
  const double n = std::max(1, cluster.workers);
  if (n <= 1) return cost;
  // Ring: reduce-scatter then all-gather, each (N−1)/N·m sent and received;
  // per direction 2·(N−1)/N·m·4 bytes, 2·(N−1) rounds.
  const double per_direction = 2 * (n - 1) / n * static_cast<double>(var.elements()) * 4;
  cost.bytes = 2 * per_direction;
  cost.link_bytes = cluster.workers_per_host() * per_direction;
  cost.seconds =
      cost.link_bytes / options.bandwidth_bytes_per_s + 2 * (n - 1) * options.latency_s;
  return cost;
}

PathCost AllGatherCost(const VariableStats& var, const ClusterShape& cluster,
                       const CostOptions& options) {
  PathCost cost;
  if (!var.sparse) {
    cost.feasible = false;
    cost.why_not = "dense";
    return cost;
  }
  const double replica =
      static_cast<double>(var.elements()) * 4 * (1 + std::max(0, options.optimizer_state_copies));
  if (options.worker_memory_bytes > 0 && replica > options.worker_memory_bytes) {
    cost.feasible = false;
    cost.why_not = "a replica (" + FormatBytes(replica) + " with optimizer state) exceeds the worker memory budget (" +
                   FormatBytes(options.worker_memory_bytes) + ")";
    return cost;
  }
  const double n = std::max(1, cluster.workers);
  if (n <= 1) return cost;
  // Every worker's (ids, rows) reach every other worker: (N−1)·k rows sent
  // (ring) and (N−1)·k received.
  const double row_bytes = kIdBytes + 4.0 * static_cast<double>(var.dim);
  const double per_direction = (n - 1) * RowsTouched(var, var.alpha) * row_bytes;
  cost.bytes = 2 * per_direction;
  cost.link_bytes = cluster.workers_per_host() * per_direction;
  cost.seconds = cost.link_bytes / options.bandwidth_bytes_per_s + (n - 1) * options.latency_s;
  return cost;
}

PathCost PsCost(const VariableStats& var, const ClusterShape& cluster, const CostOptions& options,
                bool local_aggregation) {
  PathCost cost;
  if (cluster.shards <= 0) {
    cost.feasible = false;
    cost.why_not = "the job has no PS shards";
    return cost;
  }
  const double k = RowsTouched(var, var.alpha);
  double k_push = k;
  if (local_aggregation) {
    const int l = cluster.workers_per_host();
    // A host's workers push their union once; each worker's share. Without a
    // measured host density, assume no overlap (the worst case).
    const double k_host = var.alpha_host >= 0 ? RowsTouched(var, var.alpha_host)
                                              : std::min<double>(var.rows, k * l);
    k_push = k_host / std::max(1, l);
  }
  const double pull = PsPullBytes(k, var.dim, options.value_bytes, PsMessages(var, k));
  const double push =
      PsPushBytes(k_push, var.dim, options.value_bytes, PsMessages(var, std::max(1.0, k_push)));
  cost.bytes = pull + push;
  // A host's workers send what its shards receive from others and the
  // reverse, so each direction of its link carries L times a worker's total.
  cost.link_bytes = cluster.workers_per_host() * cost.bytes;
  cost.seconds = cost.link_bytes / options.bandwidth_bytes_per_s + 2 * options.latency_s;
  return cost;
}

Choice ChoosePath(const VariableStats& var, const ClusterShape& cluster,
                  const CostOptions& options) {
  Choice choice;
  choice.allreduce = AllReduceCost(var, cluster, options);
  choice.allgather = AllGatherCost(var, cluster, options);
  choice.ps = PsCost(var, cluster, options, /*local_aggregation=*/false);
  if (options.local_aggregation) {
    choice.ps_aggregated = PsCost(var, cluster, options, /*local_aggregation=*/true);
  } else {
    choice.ps_aggregated.feasible = false;
    choice.ps_aggregated.why_not = "local aggregation is off";
  }
  char alpha[64];
  std::snprintf(alpha, sizeof(alpha), "α = %.3g", var.alpha);
  if (!var.sparse) {
    choice.path = Path::kAllReduce;
    choice.reason = "dense: every element changes every step; all-reduce puts " +
                    FormatBytes(choice.allreduce.link_bytes) + " a step on a host's link";
    return choice;
  }
  // Tie-break order: a sparse path touches only the batch's rows, which the
  // byte count does not show (with one worker every path moves nothing).
  const Path order[] = {Path::kAllGather, Path::kPs, Path::kAllReduce};
  const PathCost* best = nullptr;
  for (Path p : order) {
    const PathCost& c = choice.cost(p);
    if (!c.feasible) continue;
    if (best == nullptr || c.link_bytes < best->link_bytes) {
      best = &c;
      choice.path = p;
    }
  }
  std::string others;
  for (Path p : order) {
    if (p == choice.path) continue;
    const PathCost& c = choice.cost(p);
    others += std::string(others.empty() ? "" : ", ") + PathName(p) + " " +
              (c.feasible ? FormatBytes(c.link_bytes) : "n/a (" + c.why_not + ")");
  }
  choice.reason = std::string(alpha) + ": " + PathName(choice.path) + " puts " +
                  FormatBytes(best->link_bytes) + " a step on a host's link vs " + others;
  return choice;
}

}  // namespace parallax::plan
