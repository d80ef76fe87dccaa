// The cost model's machine figures and where each came from: measured on a
// host (parallax-agent probes its host when it starts; `parallax plan
// --measure` this machine), the job file's [plan] table, or the default.
// The job file wins over a measurement, a measurement over the default.
#ifndef PARALLAX_CORE_PLAN_HOST_FIGURES_H_
#define PARALLAX_CORE_PLAN_HOST_FIGURES_H_

#include <cstdint>
#include <span>
#include <string_view>
#include <string>
#include <vector>

#include "core/plan/cost_model.h"
#include "parallax/job_config.h"
#include "parallax/status.h"

namespace parallax::plan {

// What a job's trainers measured on one host at rendezvous, under the job's
// own conditions (all its ranks and shards running; core/calibration/
// call_probe.h): the per-call costs of the backends the job uses, as the
// cost model counts them, and the link to another host (0: not measured).
struct MeasuredCalls {
  int64_t measured_unix_s = 0;
  int64_t job_id = 0;
  int workers = 0, hosts = 0;  // the job's shape when measured
  // The cost model's collective_latency_s (c: one all-gather call between 2
  // ranks), from the median all-reduce call of the plan's bucket size at
  // `workers` ranks, less its bytes at the link rate. 0: the job has one
  // rank, or no collective crosses hosts.
  double collective_latency_s = 0;
  double allreduce_call_s = 0;  // that call, whole
  double allreduce_bytes = 0;   // and its size
  // One PS request round trip (the cost model's ps_rtt_s): the median pull
  // of one row with every rank pulling at once.
  double ps_rtt_s = 0;
  double ps_pull_s = 0;     // the median pull of ps_pull_rows rows (the plan's typical)
  double ps_pull_rows = 0;
  // One direction of the link toward `link_peer`: a large and a small PS
  // pull from the shard on the peer host, (bytes difference) / (time
  // difference), the best of a few rounds.
  double link_bytes_per_s = 0;
  std::string link_peer = "";
};

// What was measured on one host (0: not measured).
struct HostFigures {
  std::string host;
  int64_t measured_unix_s = 0;
  double link_bytes_per_s = 0;
  double loopback_bytes_per_s = 0;
  double shm_bytes_per_s = 0;
  // The address its tasks bind (the agent's bind_addr): what tells hosts
  // apart where they share a hostname (network namespaces). Empty: unknown.
  std::string address = "";
  // By the trainers of the newest job that measured each kind there (a job
  // whose plan has no PS variable measures no round trip and no link).
  MeasuredCalls collective_calls = {};  // collective_latency_s, allreduce_*
  MeasuredCalls ps_calls = {};          // ps_rtt_s, ps_pull_*
  MeasuredCalls link_calls = {};        // link_bytes_per_s, link_peer
};

// Where each figure of a plan's CostOptions came from, one line each:
// "default", "job file [plan]", "measured on HOST at 2026-11-25 04:50 UTC".
struct FigureSources {
  std::string link = "default";
  std::string loopback = "default";
  std::string shm = "default";
  std::string collective = "default";
  std::string ps_rtt = "default";
  std::string straggler = "not measured";  // CostOptions::sync_straggler_s
};

// Sets `cost`'s figures from `plan` ([plan] of the job file), else from the
// measurements of `hosts`, and returns their sources. Of several hosts the
// slowest counts (a step waits for the slowest link, the slowest call). On
// one host the link is the loopback: its measured loopback stands for the
// link too. The link: [plan], else a trainer's measurement toward a peer
// host, else an agent's; the PS round trip: [plan], else the trainers',
// else the default; the collective call: [plan], else the default (the
// trainers' is named in its source, not planned with: see the .cc).
FigureSources ApplyFigures(const JobConfig::Plan& plan, std::span<const HostFigures> hosts,
                           int cluster_hosts, CostOptions* cost);

// "measured on HOST at YYYY-MM-DD HH:MM UTC".
std::string MeasuredOn(const HostFigures& h);
// "measured by job J's trainers on HOST (ADDRESS) at YYYY-MM-DD HH:MM UTC,
// W workers on H hosts", for `c`, one of h's MeasuredCalls.
std::string MeasuredByTrainers(const HostFigures& h, const MeasuredCalls& c);

std::string HostFiguresToJson(const HostFigures& h);
// INVALID_ARGUMENT for text that is not such a JSON object.
StatusOr<HostFigures> ParseHostFigures(std::string_view json);

// Where a job's trainers leave what they measured on a host at rendezvous:
// "host/<address>/calls/<collective|ps|link>" (by address, not hostname:
// hosts that share a hostname have their own; a key per kind, so that a
// job that measured one kind leaves the others' older figures), the value
// MeasuredCallsToJson's. A newer job's measurement of a kind replaces an
// older one.
enum class CallKind { kCollective, kPs, kLink };
std::string MeasuredCallsKey(const std::string& address, CallKind kind);
std::string MeasuredCallsToJson(const MeasuredCalls& c);
StatusOr<MeasuredCalls> ParseMeasuredCalls(std::string_view json);

}  // namespace parallax::plan

#endif  // PARALLAX_CORE_PLAN_HOST_FIGURES_H_
