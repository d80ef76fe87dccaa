#include "agent/process_launcher.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

namespace parallax::agent {
namespace {

// What a child that failed before exec writes to the parent.
struct ChildError {
  int stage;  // 0: chdir, 1: exec
  int err;
};

// Writes the decimal digits of `value` to `out` (async-signal-safe).
size_t FormatInt(int value, char* out) {
  char digits[16];
  size_t n = 0;
  unsigned v = value < 0 ? 0u : static_cast<unsigned>(value);
  do {
    digits[n++] = static_cast<char>('0' + v % 10);
    v /= 10;
  } while (v != 0 && n < sizeof(digits));
  for (size_t i = 0; i < n; ++i) out[i] = digits[n - 1 - i];
  return n;
}

// "exited CODE\n" or "signal SIG\n" to tmp, then renamed to path.
void WriteExitStatus(const char* path, const char* tmp, int status) {
  char text[32];
  size_t n = 0;
  const char* word = WIFSIGNALED(status) ? "signal " : "exited ";
  for (const char* c = word; *c; ++c) text[n++] = *c;
  n += FormatInt(WIFSIGNALED(status) ? WTERMSIG(status) : WEXITSTATUS(status), text + n);
  text[n++] = '\n';
  int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return;
  ssize_t ignored = write(fd, text, n);
  (void)ignored;
  fsync(fd);
  close(fd);
  rename(tmp, path);
}

void CloseFrom(int first) {
#ifdef SYS_close_range
  if (syscall(SYS_close_range, static_cast<unsigned>(first), ~0u, 0u) == 0) return;
#endif
  for (int fd = first; fd < 4096; ++fd) close(fd);
}

// Between fork and exec only async-signal-safe calls: the agent has threads.
// This runs in the supervisor (see NewProcessLauncher), which forks the task.
[[noreturn]] void RunChild(const LaunchSpec& spec, char* const* argv, char* const* envp, int log_fd,
                           int null_fd, int error_fd, pid_t parent, const char* exit_path,
                           const char* exit_tmp) {
  setpgid(0, 0);
  if (spec.die_with_parent) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(127);  // the agent died before prctl
  }
  for (int sig : {SIGPIPE, SIGCHLD}) signal(sig, SIG_DFL);
  // The supervisor outlives a SIGTERM to the group, to record how the task
  // took it; SIGKILL ends both. Ignored before they are unblocked, so that
  // one already pending cannot end the supervisor before the task exists.
  for (int sig : {SIGTERM, SIGINT, SIGHUP}) signal(sig, SIG_IGN);
  sigset_t none;
  sigemptyset(&none);
  sigprocmask(SIG_SETMASK, &none, nullptr);  // main() blocks SIGTERM/SIGINT for sigwait
  dup2(null_fd, 0);
  dup2(log_fd, 1);
  dup2(log_fd, 2);
  ChildError e{0, 0};
  if (chdir(spec.cwd.c_str()) != 0) {
    e.err = errno;
    ssize_t ignored = write(error_fd, &e, sizeof(e));
    (void)ignored;
    _exit(127);
  }
  const pid_t supervisor = getpid();
  const pid_t task = fork();
  if (task == 0) {
    if (spec.die_with_parent) {
      prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (getppid() != supervisor) _exit(127);
    }
    for (int sig : {SIGTERM, SIGINT, SIGHUP}) signal(sig, SIG_DFL);

    // Descriptors the agent holds (its listening socket, connections, the
    // workdir lock) must not leak into a task that may outlive it; the
    // error pipe is already CLOEXEC.
#ifdef SYS_close_range
    if (syscall(SYS_close_range, 3u, ~0u, 4u /* CLOSE_RANGE_CLOEXEC */) != 0)
#endif
    {
      for (int fd = 3; fd < 4096; ++fd) {
        if (fd != error_fd) fcntl(fd, F_SETFD, FD_CLOEXEC);
      }
    }
    execvpe(argv[0], argv, envp);
    e = {1, errno};
    ssize_t ignored = write(error_fd, &e, sizeof(e));
    (void)ignored;
    _exit(127);
  }
  if (task < 0) {
    e = {1, errno};
    ssize_t ignored = write(error_fd, &e, sizeof(e));
    (void)ignored;
    _exit(127);
  }
  // Keep nothing of the agent: a restarted agent must be able to take its
  // port and its workdir lock while this process still runs.
  CloseFrom(3);
  int status = 0;
  while (waitpid(task, &status, 0) < 0) {
    if (errno != EINTR) _exit(127);
  }
  if (exit_path != nullptr) WriteExitStatus(exit_path, exit_tmp, status);
  if (WIFSIGNALED(status)) {
    const int sig = WTERMSIG(status);
    struct rlimit no_core = {0, 0};
    setrlimit(RLIMIT_CORE, &no_core);  // the task's core, if any, is the one that matters
    signal(sig, SIG_DFL);
    kill(getpid(), sig);
    _exit(128 + sig);
  }
  _exit(WIFEXITED(status) ? WEXITSTATUS(status) : 127);
}

}  // namespace

std::optional<ProcessExit> ReadExitStatus(const std::string& path) {
  std::ifstream in(path);
  std::string word;
  int value = -1;
  if (!(in >> word >> value) || value < 0) return std::nullopt;
  ProcessExit exit;
  if (word == "exited") {
    exit.exit_code = value;
  } else if (word == "signal" && value > 0) {
    exit.signal = value;
  } else {
    return std::nullopt;
  }
  return exit;
}

namespace {

class PosixLauncher : public ProcessLauncher {
 public:
  StatusOr<int> Launch(const LaunchSpec& spec) override {
    if (spec.argv.empty()) return InvalidArgument("empty command");
    std::vector<char*> argv, envp;
    for (const std::string& a : spec.argv) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    for (const std::string& e : spec.env) envp.push_back(const_cast<char*>(e.c_str()));
    envp.push_back(nullptr);

    int log_fd = open(spec.log_path.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
    if (log_fd < 0) {
      return FailedPrecondition("cannot open log '" + spec.log_path + "': " + strerror(errno));
    }
    int null_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
    int pipe_fds[2];
    if (null_fd < 0 || pipe2(pipe_fds, O_CLOEXEC) != 0) {
      int err = errno;
      close(log_fd);
      if (null_fd >= 0) close(null_fd);
      return Internal(std::string("cannot create a pipe: ") + strerror(err));
    }
    const std::string exit_tmp = spec.exit_status_path + ".tmp";
    const char* exit_path = spec.exit_status_path.empty() ? nullptr : spec.exit_status_path.c_str();
    pid_t parent = getpid();
    pid_t pid = fork();
    if (pid == 0) {
      RunChild(spec, argv.data(), envp.data(), log_fd, null_fd, pipe_fds[1], parent, exit_path,
               exit_tmp.c_str());
    }
    int fork_errno = errno;
    close(pipe_fds[1]);
    close(log_fd);
    close(null_fd);
    if (pid < 0) {
      close(pipe_fds[0]);
      return Unavailable(std::string("fork failed: ") + strerror(fork_errno));
    }
    setpgid(pid, pid);  // also here, so a signal sent right after Launch reaches the group
    ChildError e{};
    ssize_t n;
    do {
      n = read(pipe_fds[0], &e, sizeof(e));
    } while (n < 0 && errno == EINTR);
    close(pipe_fds[0]);
    if (n <= 0) return static_cast<int>(pid);  // closed by a successful exec
    int status = 0;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    if (e.stage == 0) {
      return FailedPrecondition("cannot enter task directory '" + spec.cwd + "': " +
                                strerror(e.err));
    }
    return FailedPrecondition("cannot execute '" + spec.argv[0] + "': " + strerror(e.err));
  }

  std::optional<ProcessExit> Reap(int pid) override {
    int status = 0;
    pid_t r;
    do {
      r = waitpid(pid, &status, WNOHANG);
    } while (r < 0 && errno == EINTR);
    if (r == 0) return std::nullopt;
    ProcessExit exit;
    if (r < 0) return exit;  // not our child (or already reaped): fate unknown
    if (WIFEXITED(status)) exit.exit_code = WEXITSTATUS(status);
    if (WIFSIGNALED(status)) exit.signal = WTERMSIG(status);
    return exit;
  }

  int64_t StartTime(int pid) override {
    if (pid <= 0) return -1;
    std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
    std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    // "pid (comm) state ppid ..." where comm may contain spaces and ')'.
    size_t paren = text.rfind(')');
    if (paren == std::string::npos) return -1;
    std::istringstream fields(text.substr(paren + 1));
    std::string field;
    for (int i = 3; i <= 22; ++i) {
      if (!(fields >> field)) return -1;
      if (i == 3 && (field == "Z" || field == "X")) return -1;
    }
    try {
      return std::stoll(field);
    } catch (const std::exception&) {
      return -1;
    }
  }

  void SignalGroup(int pgid, int sig) override {
    if (pgid <= 1) return;
    if (killpg(pgid, sig) != 0 && errno == ESRCH) kill(pgid, sig);
  }
};

}  // namespace

std::unique_ptr<ProcessLauncher> NewProcessLauncher() { return std::make_unique<PosixLauncher>(); }

}  // namespace parallax::agent
