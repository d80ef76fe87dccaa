// CoordinatorLink: everything the agent says to the coordinator, behind a
// seam so the agent's logic is tested against a fake.
#ifndef PARALLAX_AGENT_COORDINATOR_LINK_H_
#define PARALLAX_AGENT_COORDINATOR_LINK_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "parallax/status.h"
#include "schemas/coordinator_types.h"

namespace parallax::agent {

// Thread-safe: the agent calls Heartbeat, Poll and Report/Register from
// different threads, and a slow long poll must not delay a heartbeat.
// Errors follow CoordinatorClient: UNAVAILABLE when the coordinator cannot
// be reached (retry later), PERMISSION_DENIED for a version or token
// mismatch, others as the coordinator said.
class CoordinatorLink {
 public:
  virtual ~CoordinatorLink() = default;
  virtual Status Register(const rpc::AgentInfo& agent) = 0;
  // Returns HeartbeatResponse.known.
  virtual StatusOr<bool> Heartbeat(const std::string& agent_name) = 0;
  // Long poll; returns within about request.timeout_ms (plus the RPC timeout).
  virtual StatusOr<rpc::PollResponse> Poll(const rpc::PollRequest& request) = 0;
  virtual Status Report(const std::string& agent_name,
                        const std::vector<rpc::TaskReport>& reports) = 0;
  // Gives up the agent's name on a clean stop (DeregisterAgent).
  virtual Status Deregister(const std::string& agent_name, const std::string& workdir_id) = 0;
  // Makes a Poll in progress return soon (with an error); used on shutdown.
  virtual void CancelPoll() = 0;
};

struct CoordinatorLinkOptions {
  std::string address;     // HOST:PORT
  std::string auth_token;
  std::string tls_ca_file;  // PEM CA: TLS to the coordinator (core/rpc/tls.h); empty: plain TCP
  std::string agent_name;  // shown by the coordinator as "agent:<name>"
  int connect_timeout_ms = 3'000;
  int rpc_timeout_ms = 10'000;
};

// The real link: one CoordinatorClient connection per kind of call
// (heartbeat, poll, the rest), each connected lazily and reconnected after a
// failure.
std::unique_ptr<CoordinatorLink> NewCoordinatorLink(const CoordinatorLinkOptions& options);

}  // namespace parallax::agent

#endif  // PARALLAX_AGENT_COORDINATOR_LINK_H_
