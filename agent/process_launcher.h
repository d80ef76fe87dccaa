// ProcessLauncher: the seam between the agent and the operating system's
// processes. The real one forks and execs; tests use a FakeLauncher.
#ifndef PARALLAX_AGENT_PROCESS_LAUNCHER_H_
#define PARALLAX_AGENT_PROCESS_LAUNCHER_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "parallax/status.h"

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
  // When set, how the process ended is written to this file (atomically,
  // see ReadExitStatus) by a small supervisor process that stays its parent,
  // so it is known even when the agent that launched it is gone (a
  // restarted agent adopts the task but cannot wait for it).
  std::string exit_status_path;
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
//
// Each process runs under a supervisor: Launch() forks a process that leads
// the new process group, ignores SIGTERM/SIGINT/SIGHUP, closes every
// descriptor of the agent, forks and execs the task, waits for it, writes
// spec.exit_status_path (when set) and then ends the same way the task did
// (its exit code, or the task's signal). The pid returned, Reap(), StartTime()
// and SignalGroup() are the supervisor's: signals to the group reach the
// task, SIGKILL both.
std::unique_ptr<ProcessLauncher> NewProcessLauncher();

// What a supervisor wrote to `path` ("exited CODE" or "signal SIG"), or
// nullopt when the file is missing or malformed.
std::optional<ProcessExit> ReadExitStatus(const std::string& path);

}  // namespace parallax::agent

#endif  // PARALLAX_AGENT_PROCESS_LAUNCHER_H_
