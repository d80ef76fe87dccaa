// AgentClient: a Thrift client of an agent's log service
// (schemas/agent.thrift) that returns Status instead of throwing. Errors are
// mapped as in CoordinatorClient.
//
// Not thread-safe: one client per thread.
#ifndef PARALLAX_CORE_RPC_AGENT_CLIENT_H_
#define PARALLAX_CORE_RPC_AGENT_CLIENT_H_

#include <cstdint>
#include <memory>
#include <string>

#include "parallax/status.h"
#include "schemas/agent_types.h"

namespace parallax {

class AgentClient {
 public:
  ~AgentClient();
  // Connects to the agent at HOST:PORT and says Hello; with tls_ca_file
  // (PEM), over TLS, trusting only an agent certificate it signed that names
  // HOST (core/rpc/tls.h).
  static StatusOr<std::unique_ptr<AgentClient>> Connect(const std::string& address,
                                                        const std::string& auth_token,
                                                        int timeout_ms = 10'000,
                                                        const std::string& tls_ca_file = "");
  StatusOr<rpc::LogChunk> ReadLog(const rpc::TaskKey& task, int64_t offset, int32_t max_bytes);

 private:
  AgentClient() = default;
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace parallax

#endif  // PARALLAX_CORE_RPC_AGENT_CLIENT_H_
