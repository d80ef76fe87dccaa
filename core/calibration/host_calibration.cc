#include "core/calibration/host_calibration.h"

#include <ctime>
#include <set>

#include "core/base/logging.h"

namespace parallax::calibration {

StatusOr<plan::HostFigures> CalibrateHost(CoordinatorClient* coord, const std::string& hostname,
                                          const comm::HostProbeOptions& probe) {
  PX_ASSIGN_OR_RETURN(comm::HostProbe measured, comm::ProbeHost(probe));
  plan::HostFigures h;
  h.host = hostname;
  h.measured_unix_s = std::time(nullptr);
  h.loopback_bytes_per_s = measured.loopback_bytes_per_s;
  h.shm_bytes_per_s = measured.shm_bytes_per_s;
  PX_RETURN_IF_ERROR(coord->KvSet(plan::HostFiguresKey(hostname), plan::HostFiguresToJson(h))
                         .WithContext("storing the figures of host " + hostname));
  return h;
}

StatusOr<std::vector<plan::HostFigures>> FetchHostFigures(CoordinatorClient* coord) {
  PX_ASSIGN_OR_RETURN(std::vector<rpc::AgentInfo> agents, coord->ListAgents());
  std::set<std::string> hosts;
  for (const rpc::AgentInfo& a : agents) {
    if (a.__isset.hostname && !a.hostname.empty()) hosts.insert(a.hostname);
  }
  std::vector<plan::HostFigures> out;
  for (const std::string& host : hosts) {
    // A key that does not exist is DEADLINE_EXCEEDED at once (no wait): a
    // host whose agent stored no figures (started with --calibrate=false).
    StatusOr<std::vector<std::string>> got = coord->KvGet({plan::HostFiguresKey(host)}, 0);
    if (!got.ok() && got.status().code() == StatusCode::kDeadlineExceeded) continue;
    if (!got.ok()) return got.status().WithContext("reading the figures of host " + host);
    StatusOr<plan::HostFigures> h = plan::ParseHostFigures(got->at(0));
    if (!h.ok()) {
      PX_LOG(WARNING) << plan::HostFiguresKey(host) << ": " << h.status().ToString()
                      << "; ignored";
      continue;
    }
    out.push_back(*h);
  }
  return out;
}

}  // namespace parallax::calibration
