#include "coordinator/web/task_logs.h"

#include "core/rpc/agent_client.h"

namespace parallax::coordinator {
namespace {

class AgentLogReader final : public TaskLogReader {
 public:
  AgentLogReader(std::string secret, std::string tls_ca_file)
      : secret_(std::move(secret)), tls_ca_file_(std::move(tls_ca_file)) {}

  StatusOr<std::string> Tail(const std::string& agent_address, const rpc::TaskKey& task,
                             int32_t max_bytes, int timeout_ms) override {
    PX_ASSIGN_OR_RETURN(std::unique_ptr<AgentClient> agent,
                        AgentClient::Connect(agent_address, secret_, timeout_ms, tls_ca_file_));
    PX_ASSIGN_OR_RETURN(rpc::LogChunk chunk, agent->ReadLog(task, /*offset=*/-1, max_bytes));
    return std::move(chunk.data);
  }

 private:
  const std::string secret_;
  const std::string tls_ca_file_;
};

}  // namespace

std::unique_ptr<TaskLogReader> NewAgentLogReader(std::string secret, std::string tls_ca_file) {
  return std::make_unique<AgentLogReader>(std::move(secret), std::move(tls_ca_file));
}

}  // namespace parallax::coordinator
