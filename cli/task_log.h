// Printing a task's log, read from the agent that runs it (`parallax logs`).
// The agent is found through the coordinator's list of agents each time it
// is connected to, so a follower (-f) rides out an agent restart: the agent
// may come back at another port, and the log continues at the same offset
// (a task's log is a file in its workdir; restarting the agent keeps it).
#ifndef PARALLAX_CLI_TASK_LOG_H_
#define PARALLAX_CLI_TASK_LOG_H_

#include <cstdint>
#include <ostream>
#include <string>

#include "core/rpc/coordinator_client.h"
#include "parallax/status.h"
#include "schemas/agent_types.h"

namespace parallax::cli {

struct TaskLogOptions {
  rpc::TaskKey key;
  std::string agent_name;  // the agent that runs (ran) the task
  std::string secret;      // for the agent's log service
  std::string tls_ca;      // PEM CA of the agents' certificates; "" : plaintext
  // Keep printing until the task ended (its log is complete).
  bool follow = false;
  // While following: how long to keep reconnecting to an agent that cannot
  // be reached (restarting, or its host briefly cut off) before giving up.
  int64_t reconnect_for_ms = 120'000;
  int64_t poll_interval_ms = 200;  // between reads that found nothing new
};

// Writes the log to `out` (and a line to `err` each time the agent is lost
// and found again). Returns OK once the log was printed (with follow: the
// task ended); otherwise the error that ended it: NOT_FOUND when the agent
// is not registered, or the last connection error after reconnect_for_ms.
Status PrintTaskLog(CoordinatorClient* coordinator, const TaskLogOptions& options,
                    std::ostream& out, std::ostream& err);

}  // namespace parallax::cli

#endif  // PARALLAX_CLI_TASK_LOG_H_
