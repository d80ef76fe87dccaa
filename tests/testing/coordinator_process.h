// CoordinatorProcess: a real parallax-coordinator child for integration
// tests, listening on loopback port 0 (or a given port), with its database
// and log in a test directory. Replaces the "start it with --port-file, wait
// for the port, connect" block every multi-process test used to copy.
//
//   CoordinatorProcess coordinator(BinDir(), dir_.path());
//   ASSERT_TRUE(coordinator.ok()) << coordinator.error();
//   auto client = ConnectToCoordinator(coordinator);
#ifndef PARALLAX_TESTS_TESTING_COORDINATOR_PROCESS_H_
#define PARALLAX_TESTS_TESTING_COORDINATOR_PROCESS_H_

#include <memory>
#include <string>
#include <vector>

#include "tests/testing/subprocess.h"

namespace parallax::testing {

struct CoordinatorProcessOptions {
  std::string name = "coordinator";  // of <dir>/<name>.log and <dir>/<name>.port
  std::string listen_host = "127.0.0.1";
  int port = 0;                         // 0: the coordinator picks one
  std::string db;                       // --db; default <dir>/state.db
  std::vector<std::string> extra_args;  // e.g. {"--secret-file", f, "--agent-timeout-ms", "3000"}
  std::vector<std::string> env;         // added to the child's environment
  // > 0: the coordinator runs under this open-file limit (soft and hard, so
  // it cannot raise it), through /bin/sh's ulimit.
  int open_file_limit = 0;
  int start_timeout_ms = 20'000;
};

class CoordinatorProcess {
 public:
  // Starts <bin_dir>/parallax-coordinator with its files in `dir` and waits
  // until it listens; see ok() / error().
  CoordinatorProcess(std::string bin_dir, std::string dir,
                     CoordinatorProcessOptions options = CoordinatorProcessOptions());
  CoordinatorProcess(const CoordinatorProcess&) = delete;
  CoordinatorProcess& operator=(const CoordinatorProcess&) = delete;
  ~CoordinatorProcess();  // SIGKILLs it if still running

  // Whether the last start succeeded; otherwise error() says why, with the
  // coordinator's log.
  bool ok() const { return error_.empty(); }
  const std::string& error() const { return error_; }

  int port() const { return port_; }
  const std::string& port_text() const { return port_text_; }
  std::string address() const { return options_.listen_host + ":" + port_text_; }
  std::string db() const { return db_; }
  std::string log_path() const { return dir_ + "/" + options_.name + ".log"; }
  std::string Log() const { return ReadWholeFile(log_path()); }
  ChildProcess* process() { return child_.get(); }

  // SIGKILL, then waits for it; returns whether it died of SIGKILL.
  bool Kill();
  // Starts it again on the same port and database (after Kill() or
  // shutdown). Returns ok().
  bool Restart();

 private:
  void Start(int port);

  const std::string bin_dir_;
  const std::string dir_;
  const CoordinatorProcessOptions options_;
  std::string db_;
  std::unique_ptr<ChildProcess> child_;
  int port_ = 0;
  std::string port_text_;
  std::string error_;
};

}  // namespace parallax::testing

#endif  // PARALLAX_TESTS_TESTING_COORDINATOR_PROCESS_H_
