#include "cli/job_watch.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <optional>
#include <sstream>
#include <thread>

#include "core/rpc/coordinator_client.h"

namespace parallax::cli {
namespace {

using SteadyClock = std::chrono::steady_clock;

std::atomic<int> g_signal{0};

void OnSignal(int sig) { g_signal.store(sig); }

std::string Duration(double seconds) {
  int s = static_cast<int>(seconds + 0.5);
  char buf[32];
  if (s >= 3600) {
    std::snprintf(buf, sizeof(buf), "%d:%02d:%02d", s / 3600, s / 60 % 60, s % 60);
  } else {
    std::snprintf(buf, sizeof(buf), "%d:%02d", s / 60, s % 60);
  }
  return buf;
}

std::string StateName(rpc::JobState::type s) {
  auto it = rpc::_JobState_VALUES_TO_NAMES.find(s);
  return it == rpc::_JobState_VALUES_TO_NAMES.end() ? "UNKNOWN" : it->second;
}

bool Terminal(rpc::JobState::type s) {
  return s == rpc::JobState::SUCCEEDED || s == rpc::JobState::FAILED ||
         s == rpc::JobState::CANCELLED;
}

// Tasks of the job that an agent still runs (or was told to start).
int LiveTasks(CoordinatorClient& client, int64_t job_id) {
  std::vector<rpc::TaskInfo> tasks;
  Status s =
      client.Call([&](rpc::CoordinatorClient& c) { c.ListTasks(tasks, client.Header(), job_id); });
  if (!s.ok()) return -1;
  int live = 0;
  for (const auto& t : tasks) {
    live += t.state == rpc::TaskState::ASSIGNED || t.state == rpc::TaskState::RUNNING;
  }
  return live;
}

// What the watch of a job saw.
struct Watched {
  rpc::JobInfo last;
  int64_t last_step = -1;
  double loss = 0;
  double steps_per_s = 0;
  bool cancelled = false;
};

// One line of progress: a bar while the job runs, its state otherwise.
std::string ProgressLine(const Watched& w, int64_t total_steps, double elapsed) {
  std::ostringstream line;
  const rpc::JobInfo& last = w.last;
  if (last.state == rpc::JobState::RUNNING && total_steps > 0) {
    double frac = std::min(1.0, static_cast<double>(last.step) / static_cast<double>(total_steps));
    int filled = static_cast<int>(frac * 30);
    line << "[" << std::string(filled, '#') << std::string(30 - filled, '-') << "] " << last.step
         << "/" << total_steps << " steps";
    if (w.last_step > 0) line << "  loss " << w.loss;
    if (w.steps_per_s > 0) {
      line << "  " << static_cast<int64_t>(w.steps_per_s * 10) / 10.0 << " steps/s  ETA "
           << Duration((total_steps - last.step) / w.steps_per_s);
    }
  } else {
    line << StateName(last.state);
    if (last.__isset.waiting_for) line << ": " << last.waiting_for;
    if (last.attempt > 1) line << " (attempt " << last.attempt << ")";
  }
  line << "  " << Duration(elapsed);
  return line.str();
}

// Reads the newest loss when the job's step moved, and the step rate.
void Sample(CoordinatorClient& client, int64_t id, Watched* w, int64_t* rate_step,
            SteadyClock::time_point* rate_time) {
  if (w->last.step == w->last_step) return;
  std::vector<rpc::MetricPoint> points;
  rpc::GetMetricsRequest req;
  req.job_id = id;
  req.__set_after_step(std::max<int64_t>(w->last_step, 0) - 1);
  if (client.Call([&](rpc::CoordinatorClient& c) { c.GetMetrics(points, client.Header(), req); })
          .ok() &&
      !points.empty()) {
    w->loss = points.back().loss;
  }
  double dt = std::chrono::duration<double>(SteadyClock::now() - *rate_time).count();
  if (dt > 0.5) {
    w->steps_per_s = (w->last.step - *rate_step) / dt;
    *rate_step = w->last.step;
    *rate_time = SteadyClock::now();
  }
  w->last_step = w->last.step;
}

// The first daemon of `daemons` that exited; nullptr while all run.
const WatchedDaemon* FirstExited(const std::vector<WatchedDaemon>& daemons) {
  for (const WatchedDaemon& d : daemons) {
    if (d.daemon->Exited()) return &d;
  }
  return nullptr;
}

// The job's end in one line, and the reason when it did not succeed.
void PrintSummary(int64_t id, const Watched& w, int64_t job_steps, double elapsed,
                  std::ostream& out) {
  const rpc::JobInfo& last = w.last;
  out << RunSummary({.id = id,
                     .state = StateName(last.state),
                     .succeeded = last.state == rpc::JobState::SUCCEEDED,
                     .job_steps = job_steps,
                     .last_reported_step = last.step,
                     .last_loss = w.loss,
                     .attempts = static_cast<int>(last.attempt),
                     .elapsed_s = elapsed});
  if (last.__isset.reason && last.state != rpc::JobState::SUCCEEDED) {
    out << "reason: " << last.reason << "\n";
  }
}

}  // namespace

Daemon::Daemon(const std::vector<std::string>& argv, const std::string& log_path,
               const std::vector<std::string>& env) {
  std::vector<std::string> args = argv;
  std::vector<char*> ptrs;
  for (auto& a : args) ptrs.push_back(a.data());
  ptrs.push_back(nullptr);
  std::vector<std::string> more = env;  // putenv keeps the pointers: alive until exec
  pid_t parent = getpid();
  pid_ = fork();
  if (pid_ == 0) {
    prctl(PR_SET_PDEATHSIG, SIGTERM);
    if (getppid() != parent) _exit(1);  // the parent died before prctl
    int fd = open(log_path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (fd >= 0) {
      dup2(fd, 1);
      dup2(fd, 2);
    }
    int null = open("/dev/null", O_RDONLY);
    if (null >= 0) dup2(null, 0);
    for (std::string& e : more) putenv(e.data());
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, nullptr);
    signal(SIGTERM, SIG_DFL);
    signal(SIGINT, SIG_IGN);  // Ctrl-C is for the command to handle, not its daemons
    execvp(ptrs[0], ptrs.data());
    std::fprintf(stderr, "cannot execute %s: %s\n", ptrs[0], std::strerror(errno));
    _exit(127);
  }
}

bool Daemon::Exited() {
  if (pid_ <= 0) return true;
  int status;
  if (waitpid(pid_, &status, WNOHANG) == pid_) {
    pid_ = -1;
    return true;
  }
  return false;
}

void Daemon::Stop(int grace_ms) {
  if (pid_ <= 0) return;
  kill(pid_, SIGTERM);
  for (int i = 0; i < grace_ms / 25 && !Exited(); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(25));
  }
  if (pid_ > 0) {
    kill(pid_, SIGKILL);
    int status;
    waitpid(pid_, &status, 0);
    pid_ = -1;
  }
}

std::string LogTail(const std::string& path, size_t bytes) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  std::string text = s.str();
  return text.size() > bytes ? text.substr(text.size() - bytes) : text;
}

void CatchStopSignals() {
  struct sigaction sa {};
  sa.sa_handler = OnSignal;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
}

int StopSignal() { return g_signal.load(); }

std::string RunSummary(const RunOutcome& o) {
  std::ostringstream out;
  out << "job " << o.id << " " << o.state << " after " << Duration(o.elapsed_s);
  std::vector<std::string> facts;
  if (o.succeeded && o.job_steps > 0) {
    facts.push_back(std::to_string(o.job_steps) + " steps, last loss " + std::to_string(o.last_loss));
  } else if (o.last_reported_step > 0) {
    facts.push_back("last reported step " + std::to_string(o.last_reported_step) + ", loss " +
                    std::to_string(o.last_loss));
  }
  if (o.attempts > 1) facts.push_back(std::to_string(o.attempts) + " attempts");
  for (size_t i = 0; i < facts.size(); ++i) out << (i == 0 ? " (" : ", ") << facts[i];
  out << (facts.empty() ? "" : ")") << "\n";
  return out.str();
}

WatchResult WatchJob(CoordinatorClient& client, int64_t id, int64_t total_steps,
                     const std::vector<WatchedDaemon>& daemons, const WatchOptions& options,
                     std::ostream& out, std::ostream& err) {
  const auto start = SteadyClock::now();
  Watched w;
  if (StatusOr<rpc::JobInfo> now = client.GetJob(id); now.ok()) w.last = *now;
  std::string last_line;
  auto last_print = SteadyClock::now() - std::chrono::hours(1);
  int64_t rate_step = 0;
  auto rate_time = start;
  auto result = [&](WatchEnd end) {
    return WatchResult{.end = end, .state = StateName(w.last.state), .cancelled = w.cancelled};
  };
  const char* const newline = options.progress_bar ? "\n" : "";
  while (true) {
    if (g_signal.load() != 0 && !options.cancel_on_signal) {
      err << newline;
      return result(WatchEnd::kSignalled);
    }
    // A daemon that dies under us (killed, crashed) ends the watch: without
    // it the job can neither finish nor be cancelled.
    if (const WatchedDaemon* exited = FirstExited(daemons)) {
      err << newline << options.command << ": the " << exited->what << " exited while job " << id
          << " was " << StateName(w.last.state) << "; its log (" << exited->log << ") ends with:\n"
          << LogTail(exited->log) << "\n";
      return result(WatchEnd::kDaemonExited);
    }
    if (g_signal.load() != 0 && !w.cancelled) {
      w.cancelled = true;
      err << newline << options.command << ": cancelling job " << id << "\n";
      (void)client.CancelJob(id, options.cancel_reason);
    }
    StatusOr<rpc::JobInfo> now = client.GetJob(id);
    if (now.ok()) w.last = *now;
    Sample(client, id, &w, &rate_step, &rate_time);
    double elapsed = std::chrono::duration<double>(SteadyClock::now() - start).count();
    const std::string s = ProgressLine(w, total_steps, elapsed);
    if (options.progress_bar) {
      out << "\r" << s
          << std::string(last_line.size() > s.size() ? last_line.size() - s.size() : 0, ' ')
          << std::flush;
      last_line = s;
    } else if (s != last_line && (SteadyClock::now() - last_print > std::chrono::seconds(5) ||
                                  w.last.state != rpc::JobState::RUNNING)) {
      // Not a terminal: a plain line when something changed, at most every 5 s.
      if (s.substr(0, s.rfind("  ")) != last_line.substr(0, last_line.rfind("  "))) {
        out << s << "\n" << std::flush;
        last_print = SteadyClock::now();
      }
      last_line = s;
    }
    if (Terminal(w.last.state)) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  if (options.progress_bar) out << "\n";
  // Wait for every task to be gone before the daemons go.
  for (int i = 0; i < 300 && LiveTasks(client, id) > 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  PrintSummary(id, w, total_steps,
               std::chrono::duration<double>(SteadyClock::now() - start).count(), out);
  return result(WatchEnd::kEnded);
}

}  // namespace parallax::cli
