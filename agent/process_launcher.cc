#include "agent/process_launcher.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
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

// Between fork and exec only async-signal-safe calls: the agent has threads.
[[noreturn]] void RunChild(const LaunchSpec& spec, char* const* argv, char* const* envp,
                           int log_fd, int null_fd, int error_fd, pid_t parent) {
  setpgid(0, 0);
  if (spec.die_with_parent) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(127);  // the agent died before prctl
  }
  sigset_t none;
  sigemptyset(&none);
  sigprocmask(SIG_SETMASK, &none, nullptr);  // main() blocks SIGTERM/SIGINT for sigwait
  for (int sig : {SIGPIPE, SIGTERM, SIGINT, SIGHUP, SIGCHLD}) signal(sig, SIG_DFL);
  dup2(null_fd, 0);
  dup2(log_fd, 1);
  dup2(log_fd, 2);
  // Descriptors the agent holds (its listening socket, connections) must not
  // leak into a task that may outlive it; the error pipe is already CLOEXEC.
#ifdef SYS_close_range
  if (syscall(SYS_close_range, 3u, ~0u, 4u /* CLOSE_RANGE_CLOEXEC */) != 0)
#endif
  {
    for (int fd = 3; fd < 4096; ++fd) {
      if (fd != error_fd) fcntl(fd, F_SETFD, FD_CLOEXEC);
    }
  }
  ChildError e{0, 0};
  if (chdir(spec.cwd.c_str()) != 0) {
    e.err = errno;
  } else {
    execvpe(argv[0], argv, envp);
    e = {1, errno};
  }
  ssize_t ignored = write(error_fd, &e, sizeof(e));
  (void)ignored;
  _exit(127);
}

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
    pid_t parent = getpid();
    pid_t pid = fork();
    if (pid == 0) RunChild(spec, argv.data(), envp.data(), log_fd, null_fd, pipe_fds[1], parent);
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
