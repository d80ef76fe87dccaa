// Self-calibration through the coordinator: an agent probes its host when it
// starts (core/comm/host_probe.h) and leaves the figures in the
// coordinator's key-value store under its hostname (core/plan/host_figures.h
// HostFiguresKey; SQLite, so they outlive a coordinator restart); the
// planner (the trainer's rank 0, `parallax plan --coordinator`) reads those
// of the registered agents' hosts. No schema change: the key-value store is
// the coordinator's generic one.
#ifndef PARALLAX_CORE_CALIBRATION_HOST_CALIBRATION_H_
#define PARALLAX_CORE_CALIBRATION_HOST_CALIBRATION_H_

#include <optional>
#include <string>
#include <vector>

#include "core/comm/host_probe.h"
#include "core/plan/host_figures.h"
#include "core/plan/straggler.h"
#include "core/rpc/coordinator_client.h"

namespace parallax::calibration {

// Probes this host and stores its figures under kv_keys::HostFigures(hostname).
// Returns what it stored; the probe's or the coordinator's error otherwise.
StatusOr<plan::HostFigures> CalibrateHost(CoordinatorClient* coord, const std::string& hostname,
                                          const comm::HostProbeOptions& probe);

// The stored figures of every registered agent's host (one per hostname and
// bind address; hosts that stored none are left out): the agent's probe and
// what the newest job's trainers measured there (MeasuredCalls).
StatusOr<std::vector<plan::HostFigures>> FetchHostFigures(CoordinatorClient* coord);

// What the newest sync job of `workers` workers measured of its ranks'
// wait for the slowest one (plan::StragglerKey, stored by the coordinator);
// nullopt when none did or the stored value does not parse (logged).
StatusOr<std::optional<plan::MeasuredStraggler>> FetchStraggler(CoordinatorClient* coord,
                                                                 int workers);

// Stores what a job's trainers measured on the host that binds `address`
// (plan::MeasuredCallsKey), each kind it measured replacing an older job's;
// kinds it did not measure (0) keep theirs.
Status StoreMeasuredCalls(CoordinatorClient* coord, const std::string& address,
                          const plan::MeasuredCalls& calls);

}  // namespace parallax::calibration

#endif  // PARALLAX_CORE_CALIBRATION_HOST_CALIBRATION_H_
