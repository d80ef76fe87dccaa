// FakeLauncher: a ProcessLauncher whose processes exist only in memory. Tests
// end them (Exit, Kill) and see the signals the agent sent.
#ifndef PARALLAX_TESTS_AGENT_FAKE_LAUNCHER_H_
#define PARALLAX_TESTS_AGENT_FAKE_LAUNCHER_H_

#include <signal.h>

#include <map>
#include <mutex>
#include <optional>
#include <utility>
#include <vector>

#include "agent/process_launcher.h"

namespace parallax::agent::testing {

class FakeLauncher : public ProcessLauncher {
 public:
  StatusOr<int> Launch(const LaunchSpec& spec) override {
    std::lock_guard<std::mutex> lock(mu_);
    launches_.push_back(spec);
    if (!fail_next_.ok()) {
      Status s = fail_next_;
      fail_next_ = Status::Ok();
      return s;
    }
    int pid = next_pid_++;
    procs_[pid] = Proc{1000 + pid, std::nullopt};
    return pid;
  }

  std::optional<ProcessExit> Reap(int pid) override {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = procs_.find(pid);
    if (it == procs_.end() || !it->second.exit) return std::nullopt;
    ProcessExit exit = *it->second.exit;
    procs_.erase(it);
    return exit;
  }

  int64_t StartTime(int pid) override {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = procs_.find(pid);
    return it == procs_.end() || it->second.exit ? -1 : it->second.start_time;
  }

  void SignalGroup(int pgid, int sig) override {
    std::lock_guard<std::mutex> lock(mu_);
    signals_.emplace_back(pgid, sig);
    auto it = procs_.find(pgid);
    if (it == procs_.end() || it->second.exit) return;
    if (sig == SIGKILL || (sig == SIGTERM && !ignore_term_)) it->second.exit = ProcessExit{-1, sig};
  }

  // ---- Test controls ----
  void FailNextLaunch(Status s) {
    std::lock_guard<std::mutex> lock(mu_);
    fail_next_ = std::move(s);
  }
  // Processes ignore SIGTERM (only SIGKILL ends them).
  void IgnoreTerm(bool ignore) {
    std::lock_guard<std::mutex> lock(mu_);
    ignore_term_ = ignore;
  }
  void Exit(int pid, int code) { End(pid, ProcessExit{code, 0}); }
  void Kill(int pid, int sig) { End(pid, ProcessExit{-1, sig}); }
  // A process the launcher did not start (an adopted task).
  void AddForeign(int pid, int64_t start_time) {
    std::lock_guard<std::mutex> lock(mu_);
    procs_[pid] = Proc{start_time, std::nullopt};
  }
  void Vanish(int pid) {
    std::lock_guard<std::mutex> lock(mu_);
    procs_.erase(pid);
  }
  std::vector<LaunchSpec> launches() {
    std::lock_guard<std::mutex> lock(mu_);
    return launches_;
  }
  std::vector<std::pair<int, int>> signals() {
    std::lock_guard<std::mutex> lock(mu_);
    return signals_;
  }
  int last_pid() {
    std::lock_guard<std::mutex> lock(mu_);
    return next_pid_ - 1;
  }

 private:
  struct Proc {
    int64_t start_time;
    std::optional<ProcessExit> exit;
  };
  void End(int pid, ProcessExit exit) {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = procs_.find(pid);
    if (it != procs_.end()) it->second.exit = exit;
  }

  std::mutex mu_;
  int next_pid_ = 100;
  std::map<int, Proc> procs_;
  std::vector<LaunchSpec> launches_;
  std::vector<std::pair<int, int>> signals_;
  Status fail_next_;
  bool ignore_term_ = false;
};

}  // namespace parallax::agent::testing

#endif  // PARALLAX_TESTS_AGENT_FAKE_LAUNCHER_H_
