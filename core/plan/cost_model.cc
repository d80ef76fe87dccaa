#include "core/plan/cost_model.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "core/base/format_bytes.h"
#include "core/comm/fusion_buckets.h"

namespace parallax::plan {
namespace {

constexpr double kHeaderBytes = 64;  // schemas/ps_wire.h kHeaderSize
constexpr double kIdBytes = 8;
constexpr double kShmRefBytes = 16;  // schemas/ps_wire.h kShmRefSize

// What Gloo's TCP transport (gloo/transport/tcp/pair.cc, Debian libgloo
// 0.0~git20220518) sends around the payload. Every transport message starts
// with a 48-byte preamble (struct Op: nbytes, opcode, slot, offset, length,
// roffset, 6 × size_t). One transfer of an unbound buffer from a sender to a
// receiver costs three: the sender's NOTIFY_SEND_READY and
// SEND_UNBOUND_BUFFER (preamble + payload), and the receiver's
// NOTIFY_RECV_READY back. In a ring every rank is the sender of one
// transfer and the receiver of another per round, so a rank sends
// 3 · 48 = 144 bytes of preambles per transfer (and receives as many).
constexpr double kGlooPreambleBytes = 48;
constexpr double kGlooTransferFraming = 3 * kGlooPreambleBytes;
// The passes over a sparse table that all-reducing it whole adds
// (AllReduceCost).
constexpr double kWholeTablePasses = 2;

double RowsTouched(const VariableStats& var, double alpha) {
  return std::clamp(alpha, 0.0, 1.0) * static_cast<double>(var.rows);
}

// Messages per PS request: one per partition the batch touches, at most
// the rows touched.
double PsMessages(const VariableStats& var, double rows_touched) {
  return std::max(1.0, std::min<double>(std::max(1, var.partitions), std::ceil(rows_touched)));
}

// One all-reduce call: at N ranks in a ring 3(N−1) rounds, 1.5 times an
// all-gather call's; through shared memory the fixed cost there plus the
// ring among the H hosts' first ranks.
double AllReduceCallSeconds(const ClusterShape& cluster, const CostOptions& options) {
  if (!SharedMemoryAllReduce(cluster, options)) {
    return 1.5 * std::max(0, cluster.workers - 1) * options.collective_latency_s;
  }
  return options.shm_call_s + 1.5 * std::max(0, cluster.hosts - 1) * options.collective_latency_s;
}

// Fusion buckets (all-reduce calls) of gradients of `elements` each.
double FusionBuckets(std::span<const int64_t> elements, const CostOptions& options) {
  comm::FusionBucketRule rule(options.fusion_bucket_bytes);
  for (int64_t e : elements) rule.Add(static_cast<size_t>(std::max<int64_t>(0, e)));
  return rule.buckets();
}

// "0.42 ms/step (1.2 MB on a host's link, 3 ops)": the time first, what
// it is made of after.
std::string Predicted(const PathCost& c) {
  char buf[160];
  std::snprintf(buf, sizeof(buf), "%.3g ms/step (%s on a host's link, %g op%s)", c.seconds * 1e3,
                FormatBytes(c.link_bytes).c_str(), c.operations, c.operations == 1 ? "" : "s");
  return buf;
}

// All-reduce or all-gather of a dynamic table: a replica of a table with no
// row count cannot exist, so those paths are infeasible, with the reason
// `parallax plan` prints beside its single-path columns.
PathCost OnlyOnThePs() {
  PathCost cost;
  cost.feasible = false;
  cost.why_not = "a dynamic table (no row count, any 64-bit id) lives only on the PS";
  return cost;
}

}  // namespace

double LoopbackBytesPerS(const CostOptions& options) {
  return options.loopback_bytes_per_s > 0 ? options.loopback_bytes_per_s
                                          : options.bandwidth_bytes_per_s;
}

double HostLocalShardFraction(const ClusterShape& cluster) {
  if (cluster.ps_hosts > 0) return 0;
  const int h = std::max(1, cluster.hosts);
  const int s = std::max(1, cluster.shards);
  return static_cast<double>((s + h - 1) / h) / s;
}

bool SharedMemoryAllReduce(const ClusterShape& cluster, const CostOptions& options) {
  return options.shm_allreduce && cluster.workers_per_host() > 1;
}

double AllGatherFramingBytes(int workers) {
  const double rounds = std::max(0, workers - 1);
  // Per direction per worker, for a step's all-gather exchange
  // (trainer/sparse_allgather.h: every all-gathered table of the step
  // together): 2 calls, the row counts (gloo::allgather) and the packed
  // rows (gloo::allgatherv). core/comm checks a call's arguments only the
  // first time its shape is used, so a step makes no check of its own.
  // gloo::allgather sends each rank's block in 2 chunks per ring round:
  // 2·(N−1) transfers; gloo::allgatherv 1 per round: N−1 transfers.
  const double allgather = 2 * rounds * kGlooTransferFraming;
  const double allgatherv = rounds * kGlooTransferFraming;
  // Payload that the row count k·(8 + 4d) leaves out: the int32 row count,
  // forwarded N−1 times.
  const double small_payload = rounds * 4;
  // Charged in full to each all-gathered variable: exact for one, an upper
  // bound when several share the step's two calls.
  return allgather + allgatherv + small_payload;  // 436 B at N = 2
}

PathCost AllGatherSharedCallsOvercount(int tables, const ClusterShape& cluster,
                                       const CostOptions& options) {
  PathCost over;
  const int n = std::max(1, cluster.workers);
  if (tables <= 1 || n <= 1) return over;
  // All of a variable's framing but its own 4-byte row count is the step's.
  const double shared = AllGatherFramingBytes(n) - (n - 1) * 4.0;
  const double per_direction = (tables - 1) * shared;
  over.bytes = 2 * per_direction;
  over.link_bytes = cluster.workers_per_host() * per_direction;
  over.operations = (tables - 1) * 2.0;
  over.seconds = over.link_bytes / options.bandwidth_bytes_per_s +
                 over.operations * (n - 1) * options.collective_latency_s;
  return over;
}

const PathCost& Choice::cost(VariablePath p) const {
  switch (p) {
    case VariablePath::kAllReduce: return allreduce;
    case VariablePath::kAllGather: return allgather;
    case VariablePath::kPs:
      return ps_aggregated.feasible && ps_aggregated.seconds < ps.seconds ? ps_aggregated : ps;
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
  if (var.dynamic) return OnlyOnThePs();
  const double n = std::max(1, cluster.workers);
  if (n <= 1) return cost;
  const double buffer = static_cast<double>(var.elements()) * 4;
  // The calls of its fusion buckets, were it alone (one: a gradient larger
  // than a bucket is reduced in place); a plan's variables share buckets
  // (AllReduceFusionOvercount).
  const int64_t elements = var.elements();
  cost.operations = FusionBuckets(std::span<const int64_t>(&elements, 1), options);
  if (SharedMemoryAllReduce(cluster, options)) {
    // Within a host through shared memory, no socket; among H > 1 hosts a
    // ring of their first ranks, one per host on the link.
    const double h = std::max(1, cluster.hosts);
    const double leader = 2 * (h - 1) / h * buffer;  // per direction
    cost.bytes = 2 * leader / cluster.workers_per_host();
    cost.link_bytes = leader;
    double passes = h > 1 ? 2 : 1;  // summed into the leader, copied back
    // A sparse table all-reduced whole also has its gradient made whole
    // (zeroed, its rows scattered in) and every row updated: 2 passes over
    // it that its rows on the PS or all-gathered do not make. Beside the
    // ring's link bytes they are small and were never counted; beside the
    // shared-memory reduction they are as large as it. W3's output embedding
    // (2 ranks, one host; docs/PERFORMANCE.md, "Dense all-reduce through
    // shared memory"): all-reducing it whole cost 3.2 times the reduction's
    // own time a step.
    if (var.sparse) passes += kWholeTablePasses;
    cost.seconds = cost.link_bytes / options.bandwidth_bytes_per_s +
                   cost.operations * AllReduceCallSeconds(cluster, options) +
                   passes * buffer / options.shm_bytes_per_s;
    return cost;
  }
  // Ring: reduce-scatter then all-gather, each (N−1)/N·m sent and received;
  // per direction 2·(N−1)/N·m·4 bytes, 2·(N−1) rounds.
  const double per_direction = 2 * (n - 1) / n * buffer;
  cost.bytes = 2 * per_direction;
  cost.link_bytes = cluster.workers_per_host() * per_direction;
  cost.seconds = cost.link_bytes / options.bandwidth_bytes_per_s +
                 cost.operations * AllReduceCallSeconds(cluster, options);
  return cost;
}

PathCost AllReduceFusionOvercount(std::span<const int64_t> elements, const ClusterShape& cluster,
                                  const CostOptions& options) {
  PathCost over;
  if (elements.size() <= 1 || cluster.workers <= 1) return over;
  double alone = 0;
  for (const int64_t& e : elements) alone += FusionBuckets(std::span<const int64_t>(&e, 1), options);
  over.operations = alone - FusionBuckets(elements, options);
  over.seconds = over.operations * AllReduceCallSeconds(cluster, options);
  return over;
}

PathCost AllGatherCost(const VariableStats& var, const ClusterShape& cluster,
                       const CostOptions& options) {
  PathCost cost;
  if (var.dynamic) return OnlyOnThePs();
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
  // (ring) and (N−1)·k received, with Gloo's framing of the 2 calls.
  const double row_bytes = kIdBytes + 4.0 * static_cast<double>(var.dim);
  const double per_direction = (n - 1) * RowsTouched(var, var.alpha) * row_bytes +
                               AllGatherFramingBytes(cluster.workers);
  cost.bytes = 2 * per_direction;
  cost.link_bytes = cluster.workers_per_host() * per_direction;
  cost.operations = 2;  // the row counts, the packed rows (shared by all tables)
  cost.seconds = cost.link_bytes / options.bandwidth_bytes_per_s +
                 cost.operations * (n - 1) * options.collective_latency_s;
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
  // What a worker sends (ids, pushed rows, headers) and receives (pulled
  // rows, headers); each message's header goes out and its reply's comes back.
  const double values = static_cast<double>(options.value_bytes) * var.dim;
  const double received = k * values + (pull + push - k * (kIdBytes + values) -
                                        k_push * (kIdBytes + values)) / 2;
  const double sent = pull + push - received;
  cost.bytes = pull + push;
  // The fraction of a worker's rows whose shard runs on its own host, on the
  // host with the most shards (round-robin over the hosts): those bytes go
  // through loopback (or shared memory), never the host's link.
  const double local = HostLocalShardFraction(cluster);
  double shm_saved = 0;
  if (options.ps_shared_memory) {
    // Values to and from a shard on the worker's machine go through shared
    // memory; what stays on the socket for them: ids, headers, and a 16-byte
    // reference (ps_wire::kShmRefSize) in each request.
    shm_saved = local * (k * values - kShmRefBytes * PsMessages(var, k)) +
                local * (k_push * values - kShmRefBytes * PsMessages(var, std::max(1.0, k_push)));
    cost.bytes -= shm_saved;
  }
  const double l = cluster.workers_per_host();
  const double h = std::max(1, cluster.hosts);
  if (cluster.ps_hosts > 0) {
    // Shards on hosts of their own: every request crosses the worker host's
    // link, and the busiest PS host serves its shards' share of every worker.
    cost.link_bytes = l * std::max(sent, received);
    const double s = std::max(1, cluster.shards);
    const double busiest = std::ceil(s / std::min<double>(s, cluster.ps_hosts)) / s;
    cost.ps_host_link_bytes = cluster.workers * std::max(sent, received) * busiest;
  } else if (h <= 1) {
    // One host: loopback is its link, and carries every worker's traffic.
    cost.link_bytes = l * cost.bytes;
  } else {
    // Out of a host: its workers' requests to remote shards, and its shards'
    // replies to the remote workers; into it the reverse. The busier side.
    const double out = l * sent * (1 - local) + l * (h - 1) * received * local;
    const double in = l * received * (1 - local) + l * (h - 1) * sent * local;
    cost.link_bytes = std::max(out, in);
    cost.loopback_bytes = l * (local * (sent + received) - shm_saved);
  }
  // A pull and a push (a dense variable: one push-pull); a request's
  // partitions travel in parallel.
  cost.operations = var.sparse ? 2 : 1;
  cost.seconds =
      std::max(cost.link_bytes, cost.ps_host_link_bytes) / options.bandwidth_bytes_per_s +
      cost.loopback_bytes / LoopbackBytesPerS(options) + cost.operations * options.ps_rtt_s;
  return cost;
}

double TimeScale(VariablePath path, const CostOptions& options) {
  return path == VariablePath::kPs ? options.ps_time_scale : options.collective_time_scale;
}

Choice ChoosePath(const VariableStats& var, const ClusterShape& cluster,
                  const CostOptions& options) {
  Choice choice;
  choice.allreduce = AllReduceCost(var, cluster, options);
  choice.allgather = AllGatherCost(var, cluster, options);
  choice.ps = PsCost(var, cluster, options, /*local_aggregation=*/false);
  choice.allreduce.seconds *= TimeScale(VariablePath::kAllReduce, options);
  choice.allgather.seconds *= TimeScale(VariablePath::kAllGather, options);
  choice.ps.seconds *= TimeScale(VariablePath::kPs, options);
  if (options.local_aggregation && var.sparse) {
    choice.ps_aggregated = PsCost(var, cluster, options, /*local_aggregation=*/true);
    choice.ps_aggregated.seconds *= TimeScale(VariablePath::kPs, options);
  } else {
    choice.ps_aggregated.feasible = false;
    choice.ps_aggregated.why_not = var.sparse ? "local aggregation is off"
                                              : "a dense variable on the PS is not aggregated";
  }
  char alpha[64];
  std::snprintf(alpha, sizeof(alpha), "α = %.3g", var.alpha);
  if (!var.sparse) {
    // Every element changes every step: all-reduced, or pushed and pulled
    // whole through the PS when that is cheaper (fewer, cheaper operations
    // where collective calls cost much; BytePS's observation).
    const bool ps = choice.ps.feasible && choice.ps.seconds < choice.allreduce.seconds;
    choice.path = ps ? VariablePath::kPs : VariablePath::kAllReduce;
    const PathCost& other = ps ? choice.allreduce : choice.ps;
    choice.reason = std::string("dense: ") + VariablePathName(choice.path) + " " +
                    Predicted(ps ? choice.ps : choice.allreduce) + " vs " +
                    VariablePathName(ps ? VariablePath::kAllReduce : VariablePath::kPs) + " " +
                    (other.feasible ? Predicted(other) : "n/a (" + other.why_not + ")");
    return choice;
  }
  // Tie-break order: a sparse path touches only the batch's rows, which the
  // prediction does not show (with one worker every path costs nothing).
  const VariablePath order[] = {VariablePath::kAllGather, VariablePath::kPs, VariablePath::kAllReduce};
  const PathCost* best = nullptr;
  for (VariablePath p : order) {
    const PathCost& c = choice.cost(p);
    if (!c.feasible) continue;
    if (best == nullptr || c.seconds < best->seconds) {
      best = &c;
      choice.path = p;
    }
  }
  if (best == nullptr) {  // a dynamic table in a job without shards (BuildPlan refuses it)
    choice.path = VariablePath::kPs;
    choice.reason = std::string(alpha) + ": no feasible path (" + choice.ps.why_not + "; " +
                    choice.allreduce.why_not + ")";
    return choice;
  }
  std::string others;
  for (VariablePath p : order) {
    if (p == choice.path) continue;
    const PathCost& c = choice.cost(p);
    others += std::string(others.empty() ? "" : ", ") + VariablePathName(p) + " " +
              (c.feasible ? Predicted(c) : "n/a (" + c.why_not + ")");
  }
  choice.reason = std::string(alpha) + ": " + VariablePathName(choice.path) + " " + Predicted(*best) +
                  " vs " + others;
  return choice;
}

}  // namespace parallax::plan
