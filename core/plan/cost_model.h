// The planner's cost model: for one variable, the bytes a worker moves per
// step and a predicted communication time on each path (all-reduce,
// all-gather of sparse rows, PS with and without local aggregation), and the
// choice among them with a one-line reason. A pure function of the variable,
// its measured sparsity, the cluster's shape and the link figures: no I/O,
// so `parallax plan` can run it offline and tests can check it by hand.
//
// `bytes` are what crosses one worker's transport per step, sent plus
// received, counted the way the data plane frames them (schemas/ps_wire.md:
// a header per message, int64 ids, float32 or fp16 values):
//   all-reduce (ring):  2·(N−1)/N · m · 4                      sent + received each half
//   all-gather:         2·(N−1) · k · (8 + 4·d)                k = α·rows ids a worker touches
//   PS pull:            k · 8 + k · v·d + 2·H·M                ids out, rows back
//   PS push:            k · (8 + v·d) + 2·H·M                  rows out, ack back
//   PS with local aggregation: the push of a host's L workers is one push of
//   k_host rows, so each worker's share is k_host/L; pulls are unchanged.
// with m elements, d the row width, v bytes per value (4, or 2 for fp16),
// H the wire header size and M the messages (one per partition touched).
#ifndef PARALLAX_CORE_PLAN_COST_MODEL_H_
#define PARALLAX_CORE_PLAN_COST_MODEL_H_

#include <cstdint>
#include <string>
#include <vector>

namespace parallax::plan {

enum class Path { kAllReduce, kAllGather, kPs };
const char* PathName(Path path);

struct ClusterShape {
  int workers = 1;  // N
  int hosts = 1;    // H; workers are spread evenly
  int shards = 0;   // PS shards; 0: no PS path
  int workers_per_host() const { return hosts > 0 ? (workers + hosts - 1) / hosts : workers; }
};

// Link and memory figures (measured by bench/, or these defaults).
struct CostOptions {
  double bandwidth_bytes_per_s = 1.0e9;  // per worker, one direction
  double latency_s = 50e-6;              // per message / collective round
  int value_bytes = 4;                   // 2 with [ps] value_encoding = "fp16"
  bool local_aggregation = false;        // [ps] local_aggregation
  // A worker keeps a full replica of an all-gather variable (plus optimizer
  // state); above this it is not a candidate. 0: no limit.
  double worker_memory_bytes = 8.0e9;
  int optimizer_state_copies = 1;  // extra copies the optimizer keeps (Adagrad 1, Adam 2)
};

struct VariableStats {
  std::string name;
  bool sparse = false;
  int64_t rows = 0;           // sparse: rows; dense: 1
  int64_t dim = 0;            // sparse: row width; dense: elements
  double alpha = 1.0;         // fraction of rows one worker's batch touches
  double alpha_host = -1.0;   // fraction the workers of one host touch together; <0: unknown
  int partitions = 1;         // PS partitions (messages per PS request)
  int64_t elements() const { return rows * dim; }
};

struct PathCost {
  bool feasible = true;
  double bytes = 0;       // per worker per step, sent + received (what its transport counts)
  double link_bytes = 0;  // per host link per step, the busier direction: what decides
  double seconds = 0;     // predicted communication time per step
  std::string why_not;    // when !feasible
};

struct Choice {
  Path path = Path::kAllReduce;
  PathCost allreduce, allgather, ps, ps_aggregated;
  const PathCost& cost(Path p) const;  // ps: aggregated when local aggregation is on
  std::string reason;  // one line: why this path
};

PathCost AllReduceCost(const VariableStats& var, const ClusterShape& cluster,
                       const CostOptions& options);
PathCost AllGatherCost(const VariableStats& var, const ClusterShape& cluster,
                       const CostOptions& options);
PathCost PsCost(const VariableStats& var, const ClusterShape& cluster, const CostOptions& options,
                bool local_aggregation);

// Dense variables go to all-reduce (PS only when forced); a sparse variable
// to the feasible path with the fewest bytes on a host's link (ties:
// all-gather, then PS: a sparse path touches only the batch's rows). A host's link carries its L = N/H workers' traffic
// and, on the PS path, that of the shards it runs too: shards are spread over
// the hosts and serve, in all, what the workers send and receive, so PS costs
// a host L · (worker bytes) per direction, where all-reduce costs
// L · 2(N−1)/N · m · 4 and all-gather L · (N−1) · k · (8 + 4d). PS thus wins
// when α < about (N−1)/N of all-reduce's volume, and beats all-gather from
// N = 3 on.
Choice ChoosePath(const VariableStats& var, const ClusterShape& cluster,
                  const CostOptions& options);

// Bytes a k-row PS request (pull or push) moves, for the transport check.
double PsPullBytes(double rows_touched, int64_t dim, int value_bytes, int messages);
double PsPushBytes(double rows_touched, int64_t dim, int value_bytes, int messages);

}  // namespace parallax::plan

#endif  // PARALLAX_CORE_PLAN_COST_MODEL_H_
