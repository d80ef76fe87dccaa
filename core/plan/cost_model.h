// The planner's cost model: for one variable, the bytes a worker moves per
// step and a predicted communication time on each path (all-reduce,
// all-gather of sparse rows, PS with and without local aggregation), and the
// choice among them with a one-line reason. A pure function of the variable,
// its measured sparsity, the cluster's shape and the link figures: no I/O,
// so `parallax plan` can run it offline and tests can check it by hand.
//
// `bytes` are what crosses one worker's transport per step, sent plus
// received, counted the way the data plane frames them (schemas/ps_wire.md:
// a header per message, int64 ids, float32 or fp16 values; Gloo: a 48-byte
// preamble per transport message, see kGlooFramingBytes in the .cc):
//   all-reduce (ring):  2·(N−1)/N · m · 4                      sent + received each half
//   all-reduce with a host's L > 1 ranks in shared memory (shm_allreduce,
//   core/comm's default): nothing on one host; across H hosts only a host's
//   first rank is on the network, in a ring among the hosts:
//                       2·(H−1)/H · m · 4 on the leader,       the mean over a host's L
//                       ranks is that / L
//   all-gather:         2·(N−1) · (k · (8 + 4·d) + F)          k = α·rows ids a worker touches,
//                                                              F = Gloo framing of the step's 2 calls
//   PS pull:            k · 8 + k · v·d + 2·H·M                ids out, rows back
//   PS push:            k · (8 + v·d) + 2·H·M                  rows out, ack back
//   PS with local aggregation: the push of a host's L workers is one push of
//   k_host rows, so each worker's share is k_host/L; pulls are unchanged.
// with m elements, d the row width, v bytes per value (4, or 2 for fp16),
// H the wire header size and M the messages (one per partition touched).
//
// `seconds` is the predicted communication time per step: the bytes on a
// host's link over the link's bandwidth, plus a fixed cost per operation,
// measured on the machine (the [plan] table of the job file, schemas/job.md;
// `bench/e2e/calibrate.sh` measures them):
//   all-reduce:  link_bytes / B + c · 1.5 · (N−1) per fusion-bucket call
//                (core/comm/fusion_buckets.h: a variable alone is one call,
//                however large; a plan's variables share buckets); through
//                shared memory: link_bytes / B + (s + c · 1.5 · (H−1)) per
//                call + m · 4 / S per pass over the buffer (1 on one host; 2
//                across hosts: summed into the leader, copied back; 2 more
//                for a sparse table all-reduced whole: its gradient made
//                whole, every row updated)
//   all-gather:  link_bytes / B + 2 calls · c · (N−1) (row counts, packed rows)
//   PS:          link_bytes / B + loopback_bytes / B_lo + 2 requests (pull,
//                push) · r; on H > 1 hosts a fraction f = ceil(S/H)/S of a
//                worker's rows has its shard on its own host (S shards
//                round-robin over the hosts) and never crosses the link: a
//                host sends L · sent · (1−f) for its workers and
//                L · (H−1) · received · f for its shards, receives the
//                reverse, and moves L · f · (sent + received) over loopback
//                (B_lo, loopback_bytes_per_s). On one host loopback is the
//                link and carries everything. With the shards on P hosts of
//                their own ([ps] hosts = "ps"), nothing is local: a worker
//                host sends L · sent and receives L · received whatever N,
//                and the PS host with the most shards (ceil(S/P) of S)
//                carries N · (sent, received) · ceil(S/P)/S; the busier of
//                the two links counts.
// c = collective_latency_s (one all-gather call between 2 ranks: 2 ring
// rounds; a call at N ranks takes (N−1) times that, an all-reduce's 3(N−1)
// rounds 1.5 times), r = ps_rtt_s (one PS request round trip; the
// partitions of one request travel in parallel), s = shm_call_s and
// S = shm_bytes_per_s (the shared-memory all-reduce's fixed cost per call
// and the rate at which a host's ranks sum and copy through it).
#ifndef PARALLAX_CORE_PLAN_COST_MODEL_H_
#define PARALLAX_CORE_PLAN_COST_MODEL_H_

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "parallax/settings.h"

namespace parallax::plan {


// Defaults of CostOptions (see there): bench/e2e/calibrate.sh on the
// development machine, 2026-11-22 10:14 UTC, load average 15-18 on 2 cores.
inline constexpr double kDefaultLinkBytesPerS = 3.5e8;
inline constexpr double kDefaultCollectiveLatencyS = 9.0e-3;
inline constexpr double kDefaultPsRttS = 1.44e-3;
// The shared-memory all-reduce, 2 ranks, bench/allreduce_compare.sh on the
// development machine under load (load average 14-20, as the figures above):
// 18 us a 64 KiB call; 100 MiB in 75 ms, the rate of buffers that do not
// stay in cache. On a quieter machine both are about 3x better
// (docs/PERFORMANCE.md, "Dense all-reduce through shared memory").
inline constexpr double kDefaultShmCallS = 2.0e-5;
inline constexpr double kDefaultShmBytesPerS = 1.4e9;

struct ClusterShape {
  int workers = 1;  // N
  int hosts = 1;    // H; workers are spread evenly
  int shards = 0;   // PS shards; 0: no PS path
  // Hosts that run only PS shards ([ps] hosts = "ps"), the shards
  // round-robin over them; 0: the shards run on the workers' hosts.
  int ps_hosts = 0;
  int workers_per_host() const { return hosts > 0 ? (workers + hosts - 1) / hosts : workers; }
};

// Link, latency and memory figures. The defaults are what
// bench/e2e/calibrate.sh measured on the development machine (2 shared
// cores, loopback; docs/PERFORMANCE.md, "Choosing by predicted time"); a job
// names its own machine's figures in its [plan] table.
struct CostOptions {
  double bandwidth_bytes_per_s = kDefaultLinkBytesPerS;  // a host's link, one direction
  // Loopback sockets within a host (a worker and the PS shard on its own
  // host, when there is more than one host); 0: bandwidth_bytes_per_s.
  double loopback_bytes_per_s = 0;
  double collective_latency_s = kDefaultCollectiveLatencyS;  // one all-gather call, 2 ranks
  double ps_rtt_s = kDefaultPsRttS;                          // one PS request round trip
  size_t fusion_bucket_bytes = 64u << 20;  // SessionOptions::fusion_bucket_bytes
  int value_bytes = 4;                   // 2 with [ps] value_encoding = "fp16"
  bool local_aggregation = false;        // [ps] local_aggregation
  // [ps] shared_memory: values to and from a shard on the worker's own
  // machine go through shared memory, not the sockets (schemas/ps_wire.md).
  bool ps_shared_memory = false;
  // core/comm's all-reduce goes through shared memory among a host's ranks
  // and is hierarchical across hosts (CommunicatorOptions::shared_memory, as
  // the trainer's communicator runs: PlanInputs::shm_allreduce); false:
  // Gloo's ring over all ranks.
  bool shm_allreduce = true;
  double shm_call_s = kDefaultShmCallS;           // one call, fixed part
  double shm_bytes_per_s = kDefaultShmBytesPerS;  // one pass over the buffer
  // A worker keeps a full replica of an all-gather variable (plus optimizer
  // state); above this it is not a candidate. 0: no limit.
  double worker_memory_bytes = 8.0e9;
  int optimizer_state_copies = 1;  // extra copies the optimizer keeps (Adagrad 1, Adam 2)
  // Multipliers of the predicted seconds of the collective paths (all-reduce,
  // all-gather) and of the PS path: 1, except in a plan re-planned on
  // evidence (core/plan/plan_correction.h), where they are what an earlier
  // attempt measured over what its plan predicted.
  double collective_time_scale = 1;
  double ps_time_scale = 1;
  // A sync step's wait for the slowest rank's compute, on top of its
  // communication (core/plan/straggler.h): measured by an earlier sync job
  // of as many workers on as many hosts; 0 when none was, or the job is not
  // sync. Added once to a plan's predicted wait (PlanReport), never to a
  // path's time: it does not change a choice.
  double sync_straggler_s = 0;
};

// options.ps_time_scale for the PS path, else options.collective_time_scale.
double TimeScale(VariablePath path, const CostOptions& options);

struct VariableStats {
  std::string name;
  bool sparse = false;
  int64_t rows = 0;           // sparse: rows; dense: 1
  int64_t dim = 0;            // sparse: row width; dense: elements
  double alpha = 1.0;         // fraction of rows one worker's batch touches
  double alpha_host = -1.0;   // fraction the workers of one host touch together; <0: unknown
  int partitions = 1;         // PS partitions (messages per PS request)
  // A dynamic table (no row count, any 64-bit id): only PS shards, which
  // create rows as ids come, can hold it, so all-reduce and all-gather are
  // infeasible for it (its rows of 0 would otherwise price them at nothing).
  bool dynamic = false;
  int64_t elements() const { return rows * dim; }
};

struct PathCost {
  bool feasible = true;
  double bytes = 0;       // per worker per step, sent + received (what its transport counts)
  double link_bytes = 0;  // per host link per step, the busier direction
  // Per host per step through loopback sockets on hosts > 1 (a PS shard on
  // the worker's own host); on one host loopback is the link (link_bytes).
  double loopback_bytes = 0;
  // PS path on PS hosts (ClusterShape::ps_hosts): per step on the link of
  // the PS host with the most shards, the busier direction.
  double ps_host_link_bytes = 0;
  double operations = 0;  // collective calls or PS requests per step
  double seconds = 0;     // predicted communication time per step: what decides
  std::string why_not;    // when !feasible
};

struct Choice {
  VariablePath path = VariablePath::kAllReduce;
  PathCost allreduce, allgather, ps, ps_aggregated;
  const PathCost& cost(VariablePath p) const;  // ps: aggregated when local aggregation is on
  std::string reason;  // one line: why this path
};

PathCost AllReduceCost(const VariableStats& var, const ClusterShape& cluster,
                       const CostOptions& options);
PathCost AllGatherCost(const VariableStats& var, const ClusterShape& cluster,
                       const CostOptions& options);
PathCost PsCost(const VariableStats& var, const ClusterShape& cluster, const CostOptions& options,
                bool local_aggregation);

// A dense variable goes to all-reduce, or to the PS (pushed and pulled whole)
// when that is predicted faster; a sparse variable
// to the feasible path with the lowest predicted time (ties: all-gather, then
// PS: a sparse path touches only the batch's rows). A host's link carries
// its L = N/H workers' traffic and, on the PS path, that of the shards it
// runs too: shards are spread over the hosts and serve, in all, what the
// workers send and receive, so PS costs a host about L · (worker bytes) ·
// (H−1)/H per direction (its own shard's share stays on the host), where all-reduce costs L · 2(N−1)/N · m · 4 and all-gather
// L · (N−1) · (k · (8 + 4d) + F). By bytes alone PS wins when α < about
// (N−1)/N of all-reduce's volume and beats all-gather from N = 3 on; the
// per-operation costs move these points (all-gather's 2 collective calls a
// step against PS's 2 round trips).
Choice ChoosePath(const VariableStats& var, const ClusterShape& cluster,
                  const CostOptions& options);

// options.loopback_bytes_per_s, or the link's rate when unset.
double LoopbackBytesPerS(const CostOptions& options);

// The fraction of a worker's PS rows whose shard runs on its own host, on
// the host with the most shards (shards go round-robin over the hosts:
// ceil(S/H) of S). 1 on one host; 0 when the shards run on PS hosts.
double HostLocalShardFraction(const ClusterShape& cluster);

// True when the all-reduce goes through shared memory among a host's ranks
// (hierarchical across hosts): options.shm_allreduce, and hosts run more
// than one rank.
bool SharedMemoryAllReduce(const ClusterShape& cluster, const CostOptions& options);

// Gloo's framing of a step's 2 all-gather calls, per direction per worker
// (the F above; 436 B at 2 workers, (N−1)·436 at N).
double AllGatherFramingBytes(int workers);

// A plan with `tables` variables on all-gather sends them in the same 2
// calls, where each variable's own cost charged it the calls in full: what
// the plan's total over-counts (bytes per worker and on a host's link, and
// seconds) for those variables together. Zero for 0 or 1 table.
PathCost AllGatherSharedCallsOvercount(int tables, const ClusterShape& cluster,
                                       const CostOptions& options);

// The all-reduce calls of a plan are the trainer's fusion buckets
// (core/comm/fusion_buckets.h): its variables on the all-reduce path share
// them, where each variable's own cost charged it its calls alone. What the
// plan's total over-counts for those variables together (operations and
// seconds; bytes are not affected), given the elements of each, in the order
// the trainer registers their gradients (the session registers dense
// gradients first, then the whole-table gradients of sparse variables).
// Zero for 0 or 1 variable or one worker.
PathCost AllReduceFusionOvercount(std::span<const int64_t> elements, const ClusterShape& cluster,
                                  const CostOptions& options);

// Bytes a k-row PS request (pull or push) moves, for the transport check.
double PsPullBytes(double rows_touched, int64_t dim, int value_bytes, int messages);
double PsPushBytes(double rows_touched, int64_t dim, int value_bytes, int messages);

}  // namespace parallax::plan

#endif  // PARALLAX_CORE_PLAN_COST_MODEL_H_
