#include "agent/agent_service.h"

#include <algorithm>

#include "core/rpc/request_header.h"
#include "schemas/coordinator_constants.h"

namespace parallax::agent {

AgentService::AgentService(LogSource* logs, Clock* clock, AgentServiceOptions options)
    : logs_(logs), clock_(clock), options_(std::move(options)) {}

void AgentService::CheckHeader(const rpc::RequestHeader& header) const {
  if (auto error = CheckRequestHeader(header, options_.auth_token, "agent")) throw *error;
}

void AgentService::Hello(rpc::HelloResponse& out, const rpc::RequestHeader& header) {
  CheckHeader(header);
  out.protocol_version = options_.protocol_version != 0
                             ? options_.protocol_version
                             : rpc::g_coordinator_constants.PROTOCOL_VERSION;
  out.server_version = options_.version;
  out.server_time = clock_->NowMillis();
}

void AgentService::ReadLog(rpc::LogChunk& out, const rpc::RequestHeader& header,
                           const rpc::TaskKey& task, int64_t offset, int32_t max_bytes) {
  CheckHeader(header);
  StatusOr<rpc::LogChunk> chunk = logs_->ReadLog(task, offset, max_bytes);
  if (!chunk.ok()) throw ToCoordinatorError(chunk.status());
  out = std::move(chunk).value();
}

StatusOr<std::unique_ptr<AgentServer>> StartAgentServer(const AgentServerOptions& options,
                                                        std::shared_ptr<AgentService> service) {
  AgentServerOptions named = options;
  named.what = "agent log service";
  named.auth_token = service->auth_token();
  // Requests are small: a log read. Bound the frame as well.
  named.max_frame_bytes = std::min<uint32_t>(named.max_frame_bytes, 1 << 20);
  // Requests are small; bound what a garbage frame can make us allocate.
  named.max_string_bytes = 1 << 20;
  return StartThriftServer(named, std::make_shared<rpc::AgentProcessor>(std::move(service)));
}

}  // namespace parallax::agent
