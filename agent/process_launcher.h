// ProcessLauncher: the seam between the agent and the operating system's
// processes. The real one forks and execs; tests use a FakeLauncher.
#ifndef PARALLAX_AGENT_PROCESS_LAUNCHER_H_
#define PARALLAX_AGENT_PROCESS_LAUNCHER_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/base/status.h"

namespace parallax::agent {

struct LaunchSpec {
  // argv[0] is a path, or a bare name looked up in PATH. REQUIRES: non-empty.
  std::vector<std::string> argv;
  // The whole environment, "NAME=value".
  std::vector<std::string> env;
  // Working directory; must exist.
  std::string cwd;
  // stdout and stderr are this file opened O_APPEND (created if missing), not
  // a pipe, so the process outlives the agent. stdin is /dev/null.
  std::string log_path;
  // The process gets SIGKILL when the thread that launched it ends
  // (PR_SET_PDEATHSIG). Only for agents whose tasks must not outlive them
  // (`parallax run`); a cluster agent's tasks survive its restarts.
  bool die_with_parent = false;
};

// How a process ended.
struct ProcessExit {
  int exit_code = -1;  // >= 0 when it exited
  int signal = 0;      // > 0 when a signal killed it
};

class ProcessLauncher {
 public:
  virtual ~ProcessLauncher() = default;

  // Starts spec.argv as the leader of a new process group and returns its
  // pid once it has exec'd. When it cannot be started (no such file, not
  // executable, bad cwd) returns FAILED_PRECONDITION with a message such as
  // "cannot execute 'X': No such file or directory". Unless
  // spec.die_with_parent, the process survives the agent.
  virtual StatusOr<int> Launch(const LaunchSpec& spec) = 0;

  // For a process this launcher started: how it ended, or nullopt while it
  // runs. Reaps it (call once it has ended). Never blocks.
  virtual std::optional<ProcessExit> Reap(int pid) = 0;

  // The start time of `pid` (clock ticks since boot, /proc/<pid>/stat field
  // 22), or -1 when no such process runs (gone, or a zombie). Together with
  // the pid it identifies a process across pid reuse.
  virtual int64_t StartTime(int pid) = 0;

  // Sends `sig` to the process group `pgid` (falls back to the process when
  // there is no such group).
  virtual void SignalGroup(int pgid, int sig) = 0;
};

// Fork/exec on this host. Thread-safe.
std::unique_ptr<ProcessLauncher> NewProcessLauncher();

}  // namespace parallax::agent

#endif  // PARALLAX_AGENT_PROCESS_LAUNCHER_H_
