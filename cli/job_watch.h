// What `parallax run` and `parallax slurm` share: the daemons they start as
// children, the signals that stop them, and the watch of a job to its end
// (the progress line, the summary).
#ifndef PARALLAX_CLI_JOB_WATCH_H_
#define PARALLAX_CLI_JOB_WATCH_H_

#include <sys/types.h>

#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

namespace parallax {
class CoordinatorClient;
}

namespace parallax::cli {

// A child process whose stdout and stderr go to a log file: killed with
// SIGTERM when this process dies for any reason (PR_SET_PDEATHSIG), and by
// Stop() (or the destructor) on the way out. SIGINT is ignored in the child:
// Ctrl-C is for the command that started it. `env` ("NAME=value") is added
// to the inherited environment. argv[0] without a slash is looked up in PATH.
class Daemon {
 public:
  Daemon(const std::vector<std::string>& argv, const std::string& log_path,
         const std::vector<std::string>& env = {});
  ~Daemon() { Stop(); }
  Daemon(const Daemon&) = delete;
  Daemon& operator=(const Daemon&) = delete;

  bool Exited();
  // SIGTERM, then SIGKILL after `grace_ms`.
  void Stop(int grace_ms = 5000);
  pid_t pid() const { return pid_; }

 private:
  pid_t pid_ = -1;
};

// The last `bytes` of a file ("" when it cannot be read).
std::string LogTail(const std::string& path, size_t bytes = 2000);

// From now on SIGINT and SIGTERM set StopSignal() instead of killing this
// process.
void CatchStopSignals();
// The signal caught (SIGINT or SIGTERM), 0 while none was.
int StopSignal();

// A daemon whose exit ends a watch: what it is ("embedded coordinator",
// "agent on node-3") and its log.
struct WatchedDaemon {
  std::string what;
  std::string log;
  Daemon* daemon = nullptr;
};

struct WatchOptions {
  bool progress_bar = false;  // a terminal: redraw one line; else a line per change
  // On a caught signal: cancel the job with this reason and watch it end
  // (true), or return at once with kSignalled (false: the caller decides).
  bool cancel_on_signal = true;
  std::string cancel_reason = "interrupted (parallax run received a signal)";
  std::string command = "parallax";  // starts each message
};

enum class WatchEnd { kEnded, kDaemonExited, kSignalled };

struct WatchResult {
  WatchEnd end = WatchEnd::kEnded;
  std::string state;  // the job's last state, "SUCCEEDED", "CANCELLED", ...
  bool cancelled = false;  // this watch cancelled it (after a signal)
};

// What a watch knows of a job when it ends.
struct RunOutcome {
  int64_t id = 0;
  std::string state;        // "SUCCEEDED", "FAILED", ...
  bool succeeded = false;
  int64_t job_steps = 0;    // [trainer] steps
  int64_t last_reported_step = 0;  // the newest step a rank reported (0-based)
  double last_loss = 0;
  int attempts = 1;
  double elapsed_s = 0;
};

// The summary line: "job 3 SUCCEEDED after 1:02 (3000 steps, last loss
// 4.200000)". A job that succeeded ran all its steps, whatever step its last
// metric point was at; one that did not says the last step reported.
std::string RunSummary(const RunOutcome& o);

// Shows job `id`'s progress (`total_steps`: its [trainer] steps) until it
// ends, a daemon of `daemons` exits (its log's tail is printed) or, without
// cancel_on_signal, a signal is caught. A job that ended: waits (up to 15 s)
// for its tasks to be gone and prints the summary line (RunSummary) and,
// when it did not succeed, its reason.
WatchResult WatchJob(CoordinatorClient& client, int64_t id, int64_t total_steps,
                     const std::vector<WatchedDaemon>& daemons, const WatchOptions& options,
                     std::ostream& out, std::ostream& err);

}  // namespace parallax::cli

#endif  // PARALLAX_CLI_JOB_WATCH_H_
