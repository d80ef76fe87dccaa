#include "coordinator/service/agent_registry.h"

#include <arpa/inet.h>

namespace parallax::coordinator {
namespace {

// Whether `host` is a loopback address written out, or "localhost". Names
// are not resolved: a registration must not wait for DNS.
bool IsLoopbackLiteral(const std::string& host) {
  if (host == "localhost") return true;
  in_addr v4{};
  if (inet_pton(AF_INET, host.c_str(), &v4) == 1) return (ntohl(v4.s_addr) >> 24) == 127;
  in6_addr v6{};
  return inet_pton(AF_INET6, host.c_str(), &v6) == 1 && IN6_IS_ADDR_LOOPBACK(&v6);
}

}  // namespace

std::string HostOfAddress(const std::string& address) {
  if (!address.empty() && address.front() == '[') {
    size_t close = address.find(']');
    return close == std::string::npos ? address : address.substr(1, close - 1);
  }
  size_t colon = address.rfind(':');
  return colon == std::string::npos ? address : address.substr(0, colon);
}

bool AgentRegistry::MayTakeOver(const rpc::AgentInfo& agent) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = agents_.find(agent.name);
  if (it == agents_.end()) return false;
  if (it->second.stopped) return true;
  return agent.__isset.workdir_id && !agent.workdir_id.empty() &&
         agent.workdir_id == it->second.workdir_id;
}

std::string AgentRegistry::Registered(const rpc::AgentInfo& agent) {
  std::string warning;
  if (!coordinator_on_loopback_) {
    std::string loopback;
    if (IsLoopbackLiteral(HostOfAddress(agent.address))) {
      loopback = "its log service at " + agent.address;
    }
    if (agent.__isset.bind_addr && IsLoopbackLiteral(agent.bind_addr)) {
      loopback += (loopback.empty() ? "" : " and ") + std::string("its tasks at ") +
                  agent.bind_addr;
    }
    if (!loopback.empty()) {
      warning = "agent \"" + agent.name + "\" registered " + loopback +
                ", a loopback address, but the coordinator is reached from other hosts: ranks "
                "of other hosts and `parallax logs` cannot reach it there. Start it with "
                "--listen 0.0.0.0:7071 (and without a loopback --bind-addr or --advertise)";
    }
  }
  std::lock_guard<std::mutex> lock(mu_);
  Entry& e = agents_[agent.name];
  e.workdir_id = agent.__isset.workdir_id ? agent.workdir_id : "";
  e.stopped = false;
  e.warning = warning;
  return warning;
}

bool AgentRegistry::Deregistered(const std::string& name, const std::string& workdir_id) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = agents_.find(name);
  if (it == agents_.end() || it->second.workdir_id != workdir_id) return false;
  it->second.stopped = true;
  return true;
}

void AgentRegistry::Describe(rpc::AgentInfo* info) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = agents_.find(info->name);
  if (it == agents_.end()) return;
  if (it->second.stopped) {
    info->__set_stopped(true);
    info->__set_alive(false);
  }
  if (!it->second.warning.empty()) info->__set_warning(it->second.warning);
}

}  // namespace parallax::coordinator
