// Per-call costs measured by a job's trainers at rendezvous, under the job's
// own conditions: every rank, every PS shard and the job's real transports
// are up, and the calls are those the plan will issue (an all-reduce of the
// plan's fusion-bucket size, PS pulls of the row count a batch touches).
// What the cost model takes from them (core/plan/host_figures.h
// MeasuredCalls): the collective call's fixed cost, the PS round trip and,
// from one rank toward a shard on another host, the link's rate. Each host's
// first rank stores its host's figures in the coordinator
// (core/calibration/host_calibration.h StoreMeasuredCalls); the next plan
// made on that cluster uses them.
#ifndef PARALLAX_CORE_CALIBRATION_CALL_PROBE_H_
#define PARALLAX_CORE_CALIBRATION_CALL_PROBE_H_

#include <chrono>
#include <string>
#include <vector>

#include "core/comm/communicator.h"
#include "core/plan/host_figures.h"
#include "core/plan/job_plan.h"
#include "core/ps/client.h"
#include "parallax/status.h"

namespace parallax::calibration {

struct CallProbeOptions {
  int rank = 0;
  int64_t job_id = 0;
  int64_t clock = 0;            // the step the ranks start at (PS pulls are of this step)
  std::string bind_address;     // this host's (PARALLAX_BIND_ADDR), to find a remote shard
  int rounds = 5;               // timed calls of each kind; the median counts (the link: the best)
  size_t max_allreduce_bytes = size_t{16} << 20;  // the bucket-size call, at most
  size_t link_probe_bytes = size_t{4} << 20;      // the large pull toward a peer host, at most
  std::chrono::milliseconds timeout{60'000};      // the whole probe
};

// Runs the probe on every rank at once (REQUIRES: every rank of `world`
// calls it, with the same plan; `world` may be null with one rank, `ps`
// null when the plan has no PS variable; `shard_endpoints` the PS client's,
// by shard). The ranks agree through `world` before and after, so each
// rank's calls overlap the others' as a step's would. Rank 0 also measures
// the link toward the first shard not on its host (none on one host).
// Returns what this rank measured; its collective and PS errors otherwise
// (the session is then unusable, as after a failed step).
StatusOr<plan::MeasuredCalls> ProbeCalls(const CallProbeOptions& options,
                                         const plan::JobPlan& plan, comm::Communicator* world,
                                         ps::PsClient* ps,
                                         const std::vector<std::string>& shard_endpoints);

// The cost model's collective_latency_s (c) from one all-reduce call of
// `bytes` that took `call_s` at `cluster`: the call less its bytes and
// shared-memory passes at `cost`'s rates, over the rounds the model counts
// per call (1.5·(N−1) in Gloo's ring; 1.5·(H−1) among the hosts' leaders
// when the all-reduce is hierarchical). 0 when no collective crosses a
// process boundary it models (one rank; one host with the shared-memory
// all-reduce); a call faster than its bytes counts as 1 µs.
double CollectiveLatencyFromCall(double call_s, double bytes, const plan::ClusterShape& cluster,
                                 const plan::CostOptions& cost);

}  // namespace parallax::calibration

#endif  // PARALLAX_CORE_CALIBRATION_CALL_PROBE_H_
