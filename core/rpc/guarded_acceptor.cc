#include "core/rpc/guarded_acceptor.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <map>
#include <mutex>
#include <system_error>
#include <thread>
#include <vector>

#include "core/base/daemon.h"
#include "core/base/log_limiter.h"
#include "core/base/logging.h"

namespace parallax {
namespace {

// How often deadlines are checked and finished connection threads joined.
constexpr int kReapPeriodMs = 200;

class Acceptor final : public GuardedAcceptor {
 public:
  Acceptor(int listen_fd, const ConnectionLimits& limits, std::string what, ServeFn serve)
      : listen_fd_(listen_fd),
        what_(std::move(what)),
        serve_(std::move(serve)),
        guard_(limits, RealClock(), what_),
        emfile_log_(RealClock(), 10'000),
        accept_log_(RealClock(), 10'000),
        thread_log_(RealClock(), 10'000) {}
  ~Acceptor() override { Stop(); }

  Status Start() override {
    fcntl(listen_fd_, F_SETFL, fcntl(listen_fd_, F_GETFL) | O_NONBLOCK);
    stop_fd_ = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    reserve_fd_ = open("/dev/null", O_RDONLY | O_CLOEXEC);
    if (stop_fd_ < 0 || reserve_fd_ < 0) {
      return Unavailable("cannot start the " + what_ + ": " + std::strerror(errno));
    }
    accept_thread_ = std::thread([this] { AcceptLoop(); });
    reaper_thread_ = std::thread([this] { ReaperLoop(); });
    return Status::Ok();
  }

  ConnectionGuard* guard() override { return &guard_; }
  int64_t shed() const override { return shed_.load(); }

  void Stop() override {
    std::lock_guard<std::mutex> stop_lock(stop_mu_);
    if (stopped_) return;
    stopped_ = true;
    if (stop_fd_ >= 0) {
      uint64_t one = 1;
      if (write(stop_fd_, &one, sizeof(one)) < 0) PX_LOG(WARNING) << "stop: " << strerror(errno);
    }
    if (accept_thread_.joinable()) accept_thread_.join();
    if (reaper_thread_.joinable()) reaper_thread_.join();
    guard_.CloseAll();
    std::map<ConnectionGuard::Id, std::thread> threads;
    {
      std::lock_guard<std::mutex> lock(threads_mu_);
      threads.swap(threads_);
      finished_.clear();
    }
    for (auto& [id, thread] : threads) thread.join();
    for (int* fd : {&stop_fd_, &reserve_fd_}) {
      if (*fd >= 0) close(*fd);
      *fd = -1;
    }
  }

 private:
  void AcceptLoop();
  // Accepts what is pending; returns false when the loop should back off.
  bool AcceptPending();
  // Out of descriptors: takes the oldest pending connection off the queue
  // with the reserve descriptor and closes it at once, so the loop does not
  // spin on a connection it cannot accept.
  void ShedPending(int error);
  void Admit(int fd);
  void Serve(int fd, ConnectionGuard::Id id, const std::string& peer);
  void ReaperLoop();
  void JoinFinished();
  // Waits up to `ms` for Stop(); true when stopping.
  bool StopRequested(int ms) const {
    pollfd p = {stop_fd_, POLLIN, 0};
    return poll(&p, 1, ms) > 0;
  }

  // Constant after construction (fds after Start).
  const int listen_fd_;
  const std::string what_;
  const ServeFn serve_;
  ConnectionGuard guard_;
  int stop_fd_ = -1;
  int reserve_fd_ = -1;  // accept loop only (and Stop, after it ended)
  std::atomic<int64_t> shed_{0};

  LogLimiter emfile_log_;
  LogLimiter accept_log_;
  LogLimiter thread_log_;

  std::mutex stop_mu_;
  bool stopped_ = false;  // GUARDED_BY(stop_mu_)
  std::mutex threads_mu_;
  std::map<ConnectionGuard::Id, std::thread> threads_;  // GUARDED_BY(threads_mu_)
  std::vector<ConnectionGuard::Id> finished_;          // GUARDED_BY(threads_mu_)
  std::thread accept_thread_;
  std::thread reaper_thread_;
};

void Acceptor::AcceptLoop() {
  while (true) {
    pollfd fds[2] = {{listen_fd_, POLLIN, 0}, {stop_fd_, POLLIN, 0}};
    if (poll(fds, 2, -1) < 0 && errno != EINTR) {
      if (StopRequested(50)) return;
      continue;
    }
    if (fds[1].revents != 0) return;
    if (fds[0].revents != 0 && !AcceptPending() && StopRequested(10)) return;
  }
}

bool Acceptor::AcceptPending() {
  for (int i = 0; i < 256; ++i) {
    int fd = accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd >= 0) {
      Admit(fd);
      continue;
    }
    const int error = errno;
    switch (error) {
      case EAGAIN:
      case EINTR:
      case ECONNABORTED:
      case EPROTO:
        if (error == EAGAIN) return true;
        continue;
      case EMFILE:
      case ENFILE:
        ShedPending(error);
        return false;
      default:  // ENOBUFS, ENOMEM, ...: the kernel is short; try again soon
        if (int64_t held; accept_log_.Allow(&held)) {
          PX_LOG(WARNING) << what_ << ": accept failed: " << std::strerror(error) << "; retrying"
                          << (held ? " (" + std::to_string(held) + " more)" : "");
        }
        return false;
    }
  }
  return true;
}

void Acceptor::ShedPending(int error) {
  if (reserve_fd_ >= 0) {
    close(reserve_fd_);
    int fd = accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd >= 0) {
      close(fd);
      ++shed_;
    }
    reserve_fd_ = open("/dev/null", O_RDONLY | O_CLOEXEC);
  }
  if (int64_t held; emfile_log_.Allow(&held)) {
    PX_LOG(WARNING) << what_ << ": out of file descriptors (" << std::strerror(error)
                    << ", the open-file limit is " << OpenFileLimit() << ", "
                    << guard_.counts().open << " connections open): closed a new connection "
                    << "unanswered" << (held ? " (and " + std::to_string(held) + " more)" : "")
                    << "; lower --max-connections or raise the limit (LimitNOFILE=)";
  }
}

void Acceptor::Admit(int fd) {
  const std::string peer = PeerName(fd);
  // A client sends its request as soon as it connects: bytes already waiting
  // set it apart from a connection that only holds a descriptor.
  int waiting = 0;
  const bool spoke = ioctl(fd, FIONREAD, &waiting) == 0 && waiting > 0;
  std::optional<ConnectionGuard::Id> id = guard_.Admit(fd, peer, spoke);
  if (!id) {
    close(fd);
    return;
  }
  std::lock_guard<std::mutex> lock(threads_mu_);
  try {
    threads_.emplace(*id, std::thread([this, fd, id = *id, peer] { Serve(fd, id, peer); }));
  } catch (const std::system_error& e) {
    guard_.Remove(*id);
    close(fd);
    if (int64_t held; thread_log_.Allow(&held)) {
      PX_LOG(WARNING) << what_ << ": cannot start a thread for the connection from " << peer
                      << " (" << e.what() << "); closed it"
                      << (held ? " (and " + std::to_string(held) + " more)" : "");
    }
  }
}

void Acceptor::Serve(int fd, ConnectionGuard::Id id, const std::string& peer) {
  serve_(fd, id, peer);
  std::lock_guard<std::mutex> lock(threads_mu_);
  finished_.push_back(id);
}

void Acceptor::ReaperLoop() {
  while (!StopRequested(kReapPeriodMs)) {
    guard_.CloseExpired();
    JoinFinished();
  }
}

void Acceptor::JoinFinished() {
  std::vector<std::thread> done;
  {
    std::lock_guard<std::mutex> lock(threads_mu_);
    for (ConnectionGuard::Id id : finished_) {
      auto it = threads_.find(id);
      if (it == threads_.end()) continue;
      done.push_back(std::move(it->second));
      threads_.erase(it);
    }
    finished_.clear();
  }
  for (std::thread& t : done) t.join();
}

}  // namespace

std::unique_ptr<GuardedAcceptor> NewGuardedAcceptor(int listen_fd, const ConnectionLimits& limits,
                                                    const std::string& what,
                                                    GuardedAcceptor::ServeFn serve) {
  return std::make_unique<Acceptor>(listen_fd, limits, what, std::move(serve));
}

}  // namespace parallax
