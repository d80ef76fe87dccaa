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

// What was measured on one host (0: not measured).
struct HostFigures {
  std::string host;
  int64_t measured_unix_s = 0;
  double link_bytes_per_s = 0;
  double loopback_bytes_per_s = 0;
  double shm_bytes_per_s = 0;
};

// Where each figure of a plan's CostOptions came from, one line each:
// "default", "job file [plan]", "measured on HOST at 2026-11-25 04:50 UTC".
struct FigureSources {
  std::string link = "default";
  std::string loopback = "default";
  std::string shm = "default";
  std::string collective = "default";
  std::string ps_rtt = "default";
};

// Sets `cost`'s figures from `plan` ([plan] of the job file), else from the
// measurements of `hosts`, and returns their sources. Of several hosts the
// slowest counts (a step waits for the slowest link). On one host the link
// is the loopback: its measured loopback stands for the link too.
FigureSources ApplyFigures(const JobConfig::Plan& plan, std::span<const HostFigures> hosts,
                           int cluster_hosts, CostOptions* cost);

// "measured on HOST at YYYY-MM-DD HH:MM UTC".
std::string MeasuredOn(const HostFigures& h);

// Where an agent leaves its host's figures in the coordinator's key-value
// store (SQLite, kept across coordinator restarts): "host/<hostname>/figures",
// the value HostFiguresToJson's (core/calibration/host_calibration.h).
std::string HostFiguresKey(const std::string& hostname);
std::string HostFiguresToJson(const HostFigures& h);
// INVALID_ARGUMENT for text that is not such a JSON object.
StatusOr<HostFigures> ParseHostFigures(std::string_view json);

}  // namespace parallax::plan

#endif  // PARALLAX_CORE_PLAN_HOST_FIGURES_H_
