// TaskLogReader: the end of a task's log, read from the agent that ran it
// (the agent's log service, schemas/agent.thrift), for the web pages. A
// seam: the real one is a Thrift client of the agent; tests give a fake.
#ifndef PARALLAX_COORDINATOR_TASK_LOGS_H_
#define PARALLAX_COORDINATOR_TASK_LOGS_H_

#include <cstdint>
#include <memory>
#include <string>

#include "parallax/status.h"
#include "schemas/coordinator_types.h"

namespace parallax::coordinator {

class TaskLogReader {
 public:
  virtual ~TaskLogReader() = default;
  // The last `max_bytes` of the log of `task` from the agent serving at
  // `agent_address` (HOST:PORT), within about `timeout_ms` (each of
  // connecting, saying Hello and reading takes at most that long).
  // Thread-safe. UNAVAILABLE when the agent cannot be reached in time.
  virtual StatusOr<std::string> Tail(const std::string& agent_address, const rpc::TaskKey& task,
                                     int32_t max_bytes, int timeout_ms) = 0;
};

// Reads over a new connection per call, with the cluster secret (agents
// check it) and, when agents serve TLS, the CA that signed their
// certificates ("" for plaintext).
std::unique_ptr<TaskLogReader> NewAgentLogReader(std::string secret, std::string tls_ca_file);

}  // namespace parallax::coordinator

#endif  // PARALLAX_COORDINATOR_TASK_LOGS_H_
