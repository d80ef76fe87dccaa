#include "core/calibration/host_calibration.h"

#include <ctime>
#include <optional>
#include <set>
#include <utility>

#include "core/base/host_port.h"
#include "core/base/logging.h"
#include "schemas/kv_keys.h"

namespace parallax::calibration {

StatusOr<plan::HostFigures> CalibrateHost(CoordinatorClient* coord, const std::string& hostname,
                                          const comm::HostProbeOptions& probe) {
  PX_ASSIGN_OR_RETURN(comm::HostProbe measured, comm::ProbeHost(probe));
  plan::HostFigures h;
  h.host = hostname;
  h.measured_unix_s = std::time(nullptr);
  h.loopback_bytes_per_s = measured.loopback_bytes_per_s;
  h.shm_bytes_per_s = measured.shm_bytes_per_s;
  PX_RETURN_IF_ERROR(coord->KvSet(kv_keys::HostFigures(hostname), plan::HostFiguresToJson(h))
                         .WithContext("storing the figures of host " + hostname));
  return h;
}

namespace {

// The value of `key`, or nullopt when nobody stored one.
StatusOr<std::optional<std::string>> ReadIfStored(CoordinatorClient* coord,
                                                  const std::string& key) {
  StatusOr<std::optional<std::string>> got = coord->KvGetIfSet(key);
  if (!got.ok()) return got.status().WithContext("reading " + key);
  return got;
}

// One host's figures: its agent's (hostname key) and its trainers' (address
// key); false when neither stored any.
StatusOr<bool> ReadHost(CoordinatorClient* coord, const std::string& hostname,
                        const std::string& address, plan::HostFigures* out) {
  out->host = hostname;
  out->address = address;
  bool any = false;
  PX_ASSIGN_OR_RETURN(std::optional<std::string> agent,
                      ReadIfStored(coord, kv_keys::HostFigures(hostname)));
  if (agent) {
    StatusOr<plan::HostFigures> h = plan::ParseHostFigures(*agent);
    if (h.ok()) {
      *out = *h;
      out->host = hostname;
      out->address = address;
      any = true;
    } else {
      PX_LOG(WARNING) << kv_keys::HostFigures(hostname) << ": " << h.status().ToString()
                      << "; ignored";
    }
  }
  if (address.empty()) return any;
  const std::pair<plan::CallKind, plan::MeasuredCalls plan::HostFigures::*> kinds[] = {
      {plan::CallKind::kCollective, &plan::HostFigures::collective_calls},
      {plan::CallKind::kPs, &plan::HostFigures::ps_calls},
      {plan::CallKind::kLink, &plan::HostFigures::link_calls}};
  for (const auto& [kind, member] : kinds) {
    const std::string key = plan::MeasuredCallsKey(address, kind);
    PX_ASSIGN_OR_RETURN(std::optional<std::string> calls, ReadIfStored(coord, key));
    if (!calls) continue;
    StatusOr<plan::MeasuredCalls> c = plan::ParseMeasuredCalls(*calls);
    if (c.ok()) {
      out->*member = *c;
      any = true;
    } else {
      PX_LOG(WARNING) << key << ": " << c.status().ToString() << "; ignored";
    }
  }
  return any;
}

}  // namespace

StatusOr<std::vector<plan::HostFigures>> FetchHostFigures(CoordinatorClient* coord) {
  PX_ASSIGN_OR_RETURN(std::vector<rpc::AgentInfo> agents, coord->ListAgents());
  // Hosts that share a hostname (network namespaces) are told apart by the
  // address their tasks bind (the coordinator keeps the agent's advertised
  // address, not its bind_addr, across a restart: that one's host).
  std::set<std::pair<std::string, std::string>> hosts;
  for (const rpc::AgentInfo& a : agents) {
    if (!a.__isset.hostname || a.hostname.empty()) continue;
    const std::string bind = a.__isset.bind_addr && !a.bind_addr.empty()
                                 ? a.bind_addr
                                 : HostOf(a.address);
    hosts.insert({a.hostname, bind});
  }
  std::vector<plan::HostFigures> out;
  for (const auto& [hostname, address] : hosts) {
    plan::HostFigures h;
    PX_ASSIGN_OR_RETURN(bool any, ReadHost(coord, hostname, address, &h));
    if (any) out.push_back(std::move(h));
  }
  return out;
}

StatusOr<std::optional<plan::MeasuredStraggler>> FetchStraggler(CoordinatorClient* coord,
                                                                 int workers) {
  const std::string key = kv_keys::Straggler(workers);
  PX_ASSIGN_OR_RETURN(std::optional<std::string> stored, ReadIfStored(coord, key));
  if (!stored) return std::optional<plan::MeasuredStraggler>();
  StatusOr<plan::MeasuredStraggler> s = plan::ParseStraggler(*stored);
  if (!s.ok()) {
    PX_LOG(WARNING) << key << ": " << s.status().ToString() << "; ignored";
    return std::optional<plan::MeasuredStraggler>();
  }
  return std::optional<plan::MeasuredStraggler>(*std::move(s));
}

Status StoreMeasuredCalls(CoordinatorClient* coord, const std::string& address,
                          const plan::MeasuredCalls& calls) {
  const std::pair<plan::CallKind, bool> kinds[] = {
      {plan::CallKind::kCollective, calls.collective_latency_s > 0},
      {plan::CallKind::kPs, calls.ps_rtt_s > 0},
      {plan::CallKind::kLink, calls.link_bytes_per_s > 0}};
  for (const auto& [kind, measured] : kinds) {
    if (!measured) continue;
    PX_RETURN_IF_ERROR(
        coord->KvSet(plan::MeasuredCallsKey(address, kind), plan::MeasuredCallsToJson(calls))
            .WithContext("storing the figures measured on " + address));
  }
  return Status::Ok();
}

}  // namespace parallax::calibration
