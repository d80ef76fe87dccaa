// The agent's Thrift service (schemas/agent.thrift): Hello and ReadLog,
// served with a thread per connection like the coordinator's.
#ifndef PARALLAX_AGENT_AGENT_SERVICE_H_
#define PARALLAX_AGENT_AGENT_SERVICE_H_

#include <cstdint>
#include <memory>
#include <string>
#include <utility>

#include "core/base/clock.h"
#include "core/rpc/thrift_server.h"
#include "parallax/status.h"
#include "schemas/Agent.h"

namespace parallax::agent {

// Where the service gets logs from (the Agent). Thread-safe.
class LogSource {
 public:
  virtual ~LogSource() = default;
  // NOT_FOUND for a task this agent has no log of; INVALID_ARGUMENT for a bad
  // offset or max_bytes. See schemas/agent.thrift for the rest.
  virtual StatusOr<rpc::LogChunk> ReadLog(const rpc::TaskKey& task, int64_t offset,
                                          int32_t max_bytes) = 0;
};

struct AgentServiceOptions {
  std::string auth_token;  // empty: no check
  std::string version = "0.1.0";
  int32_t protocol_version = 0;  // 0: this build's PROTOCOL_VERSION
};

// The Thrift handler: checks every request's header (VERSION_MISMATCH naming
// both versions, UNAUTHENTICATED for a wrong token) and turns Status into
// CoordinatorError.
class AgentService : public rpc::AgentIf {
 public:
  // `logs` and `clock` must outlive the service.
  AgentService(LogSource* logs, Clock* clock, AgentServiceOptions options);
  void Hello(rpc::HelloResponse& out, const rpc::RequestHeader& header) override;
  void ReadLog(rpc::LogChunk& out, const rpc::RequestHeader& header, const rpc::TaskKey& task,
               int64_t offset, int32_t max_bytes) override;
  const std::string& auth_token() const { return options_.auth_token; }

 private:
  void CheckHeader(const rpc::RequestHeader& header) const;  // throws CoordinatorError

  LogSource* const logs_;
  Clock* const clock_;
  const AgentServiceOptions options_;
};

using AgentServerOptions = ThriftServerOptions;
using AgentServer = ThriftServer;

// Binds and serves in background threads; returns once listening. The
// server tells connections that authenticated by the service's secret
// (options.auth_token is taken from `service`).
StatusOr<std::unique_ptr<AgentServer>> StartAgentServer(const AgentServerOptions& options,
                                                        std::shared_ptr<AgentService> service);

}  // namespace parallax::agent

#endif  // PARALLAX_AGENT_AGENT_SERVICE_H_
