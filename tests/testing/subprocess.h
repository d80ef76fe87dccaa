// Real child processes for integration tests: run a command to completion
// capturing its output, or start a long-lived one (a daemon) and signal it.
#ifndef PARALLAX_TESTS_TESTING_SUBPROCESS_H_
#define PARALLAX_TESTS_TESTING_SUBPROCESS_H_

#include <string>
#include <vector>

namespace parallax::testing {

struct RunResult {
  int exit_code = -1;  // -1 when killed by a signal
  int signal = 0;
  std::string out;
  std::string err;
};

// Runs argv[0] (a path) with `env` added to this process's environment
// ("NAME=value"), waits at most timeout_ms (then SIGKILLs it).
RunResult RunProcess(const std::vector<std::string>& argv, const std::vector<std::string>& env = {},
                     int timeout_ms = 60'000);

// A started child; killed with SIGKILL in the destructor if still running.
class ChildProcess {
 public:
  // stdout and stderr go to `log_path` (appended).
  ChildProcess(const std::vector<std::string>& argv, const std::string& log_path,
               const std::vector<std::string>& env = {});
  ~ChildProcess();
  ChildProcess(const ChildProcess&) = delete;
  ChildProcess& operator=(const ChildProcess&) = delete;

  int pid() const { return pid_; }
  void Signal(int sig);
  // Sends SIGSTOP and waits until the child is stopped, every thread of it
  // (waitpid reports a stop only then): kill() returns once the signal is
  // sent, and the child may run on for a while, e.g. answer a request that
  // reaches it meanwhile. False after timeout_ms, or when the child exited
  // (running() is false then). A child already stopped and reported is not
  // reported again: send SIGCONT before stopping it a second time.
  bool Stop(int timeout_ms);
  // Waits for exit; returns the wait status, or -1 after timeout_ms.
  int Wait(int timeout_ms);
  bool running() const { return pid_ > 0; }

 private:
  int pid_ = -1;
};

// Waits up to timeout_ms for `path` to hold a word (what a daemon writes to
// its --port-file once it listens) and returns it; "" on timeout, or as soon
// as `child` (when given) has exited.
std::string WaitForFileWord(const std::string& path, int timeout_ms,
                            ChildProcess* child = nullptr);

// The whole file (binary-safe); "" when it cannot be read.
std::string ReadWholeFile(const std::string& path);

// The last non-empty line of `text` (what `parallax submit` prints: the job
// id); "" when there is none.
std::string LastLine(const std::string& text);

// `argv` run under an open-file limit of `limit` (soft and hard) through
// /bin/sh's ulimit; the program keeps the shell's pid (exec).
std::vector<std::string> WithOpenFileLimit(int limit, const std::vector<std::string>& argv);

// Where the project's binaries are: $PARALLAX_BIN_DIR when set, else
// `fallback` (testing::BuildBinDir(), tests/testing/build_paths.h).
std::string BinDirOr(const char* fallback);

}  // namespace parallax::testing

#endif  // PARALLAX_TESTS_TESTING_SUBPROCESS_H_
