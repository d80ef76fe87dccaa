#include "cli/task_log.h"

#include <chrono>
#include <memory>
#include <thread>

#include "core/rpc/agent_client.h"

namespace parallax::cli {
namespace {

using SteadyClock = std::chrono::steady_clock;

// The agent's log service address as the coordinator has it now.
StatusOr<std::string> AgentAddress(CoordinatorClient* coordinator, const std::string& name) {
  PX_ASSIGN_OR_RETURN(std::vector<rpc::AgentInfo> agents, coordinator->ListAgents());
  for (const rpc::AgentInfo& a : agents) {
    if (a.name == name) return a.address;
  }
  return NotFound("agent \"" + name + "\" that ran the task is not registered");
}

StatusOr<std::unique_ptr<AgentClient>> ConnectAgent(CoordinatorClient* coordinator,
                                                    const TaskLogOptions& options) {
  PX_ASSIGN_OR_RETURN(std::string address, AgentAddress(coordinator, options.agent_name));
  return AgentClient::Connect(address, options.secret, 10'000, options.tls_ca);
}

// Whether following may go on after `s`: the agent (or the way to it) is
// away, which a restart or a short cut ends.
bool Retryable(const Status& s) {
  return s.code() == StatusCode::kUnavailable || s.code() == StatusCode::kInternal ||
         s.code() == StatusCode::kDeadlineExceeded;
}

}  // namespace

Status PrintTaskLog(CoordinatorClient* coordinator, const TaskLogOptions& options,
                    std::ostream& out, std::ostream& err) {
  std::unique_ptr<AgentClient> agent;
  int64_t offset = 0;
  bool lost = false;  // the agent cannot be reached since lost_since
  SteadyClock::time_point lost_since;
  while (true) {
    Status s;
    if (!agent) {
      StatusOr<std::unique_ptr<AgentClient>> connected = ConnectAgent(coordinator, options);
      if (connected.ok()) agent = std::move(connected).value();
      s = connected.status();
    }
    if (agent) {
      StatusOr<rpc::LogChunk> chunk = agent->ReadLog(options.key, offset, 1 << 20);
      if (chunk.ok()) {
        if (lost) err << "parallax: reading the log again from agent \"" << options.agent_name << "\"\n";
        lost = false;
        if (chunk->first_offset > offset) {
          out << "[... " << chunk->first_offset - offset << " bytes rotated away ...]\n";
        }
        out << chunk->data << std::flush;
        offset = chunk->next_offset;
        if (!chunk->data.empty()) continue;
        if (!options.follow || chunk->complete) return Status::Ok();
        std::this_thread::sleep_for(std::chrono::milliseconds(options.poll_interval_ms));
        continue;
      }
      s = chunk.status();
      agent.reset();
    }
    if (!options.follow || !Retryable(s)) return s;
    if (!lost) {
      lost = true;
      lost_since = SteadyClock::now();
      err << "parallax: lost agent \"" << options.agent_name << "\" (" << s.message()
          << "); reconnecting for up to " << options.reconnect_for_ms / 1000 << " s\n";
    } else if (SteadyClock::now() - lost_since >
               std::chrono::milliseconds(options.reconnect_for_ms)) {
      return s.WithContext("gave up reconnecting to agent \"" + options.agent_name + "\"");
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(options.poll_interval_ms));
  }
}

}  // namespace parallax::cli
