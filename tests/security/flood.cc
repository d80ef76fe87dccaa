#include "tests/security/flood.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <string>
#include <vector>
#include <sstream>

namespace parallax::testing {
namespace {

using Clock = std::chrono::steady_clock;

}  // namespace

int64_t RaiseOwnFileLimit() {
  rlimit limit;
  getrlimit(RLIMIT_NOFILE, &limit);
  limit.rlim_cur = limit.rlim_max;
  setrlimit(RLIMIT_NOFILE, &limit);
  getrlimit(RLIMIT_NOFILE, &limit);
  return static_cast<int64_t>(limit.rlim_cur);
}

ConnectionFlood::ConnectionFlood(int port, Kind kind, int count, int per_second,
                                 uint32_t announced_bytes, uint32_t body_bytes)
    : port_(port),
      kind_(kind),
      count_(count),
      per_second_(per_second),
      announced_bytes_(announced_bytes),
      body_bytes_(body_bytes > 0 ? body_bytes : announced_bytes - 1) {
  opener_ = std::thread([this] { Open(); });
  if (kind_ == Kind::kSlow) dribbler_ = std::thread([this] { Dribble(); });
}

ConnectionFlood::ConnectionFlood(int port, int count, int per_second, Trickle trickle)
    : port_(port),
      kind_(Kind::kTrickle),
      count_(count),
      per_second_(per_second),
      announced_bytes_(0),
      body_bytes_(0),
      trickle_(std::move(trickle)) {
  opener_ = std::thread([this] { Open(); });
  dribbler_ = std::thread([this] { Dribble(); });
}

ConnectionFlood::~ConnectionFlood() { Close(); }

void ConnectionFlood::Close() {
  stop_ = true;
  if (opener_.joinable()) opener_.join();
  if (dribbler_.joinable()) dribbler_.join();
  std::lock_guard<std::mutex> lock(mu_);
  for (int fd : fds_) close(fd);
  fds_.clear();
}

// A connection completed by the kernel (non-blocking connect, 2 s at most:
// a full accept queue makes connect wait); -1 when it did not complete.
int ConnectionFlood::Connect() {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port_));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 &&
      errno != EINPROGRESS) {
    close(fd);
    return -1;
  }
  pollfd p = {fd, POLLOUT, 0};
  int error = 0;
  socklen_t len = sizeof(error);
  if (poll(&p, 1, 2'000) != 1 || getsockopt(fd, SOL_SOCKET, SO_ERROR, &error, &len) != 0 ||
      error != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

void ConnectionFlood::Open() {
  const auto start = Clock::now();
  std::string body;
  if (kind_ == Kind::kUnauthenticatedBody) {
    // Filler where a call with the secret would be: what an attacker
    // without the secret sends.
    body.assign(body_bytes_, 'x');
  }
  for (int i = 0; i < count_ && !stop_; ++i) {
    // Pace: connection i may start i / per_second seconds after the first.
    const auto due = start + std::chrono::microseconds(int64_t{1'000'000} * i / per_second_);
    while (Clock::now() < due && !stop_) std::this_thread::sleep_until(due);
    int fd = OpenOne(body);
    if (fd < 0) continue;
    std::lock_guard<std::mutex> lock(mu_);
    fds_.push_back(fd);
  }
  done_ = true;
}

int ConnectionFlood::OpenOne(const std::string& body) {
  int fd = Connect();
  if (fd < 0) return -1;
  ++opened_;
  if (kind_ == Kind::kTrickle) {
    (void)!send(fd, trickle_.prefix.data(), trickle_.prefix.size(), MSG_NOSIGNAL);
    return fd;
  }
  if (kind_ != Kind::kIdle) {
    uint32_t size = htonl(announced_bytes_);
    (void)!send(fd, &size, sizeof(size), MSG_NOSIGNAL);
  }
  if (kind_ == Kind::kUnauthenticatedBody) {
    // Blocking sends of the body, until the server refuses it or has it.
    fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);
    timeval timeout{2, 0};
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &timeout, sizeof(timeout));
    size_t sent = 0;
    while (sent < body.size() && !stop_) {
      ssize_t n = send(fd, body.data() + sent, body.size() - sent, MSG_NOSIGNAL);
      if (n <= 0) break;
      sent += static_cast<size_t>(n);
    }
  }
  return fd;
}

void ConnectionFlood::TrickleRound() {
  std::vector<int> fds;
  {
    std::lock_guard<std::mutex> lock(mu_);
    fds.swap(fds_);
  }
  std::vector<int> kept;
  int lost = 0;
  for (int fd : fds) {
    // Whatever the server sent (a 408, an alert) is drained; an end or an
    // error means the server closed the connection.
    pollfd p = {fd, POLLIN | POLLRDHUP, 0};
    bool gone = poll(&p, 1, 0) == 1 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR)) != 0;
    if (!gone && !trickle_.idle) {
      gone = send(fd, &trickle_.byte, 1, MSG_NOSIGNAL | MSG_DONTWAIT) < 0 && errno != EAGAIN;
    }
    if (gone) {
      close(fd);
      ++lost;
    } else {
      kept.push_back(fd);
    }
  }
  closed_by_server_ += lost;
  for (int i = 0; i < lost && trickle_.reopen && !stop_; ++i) {
    int fd = OpenOne("");
    if (fd >= 0) kept.push_back(fd);
  }
  std::lock_guard<std::mutex> lock(mu_);
  fds_.insert(fds_.end(), kept.begin(), kept.end());
}

void ConnectionFlood::Dribble() {
  if (kind_ == Kind::kTrickle) {
    while (!stop_) {
      const auto next = Clock::now() + std::chrono::milliseconds(trickle_.period_ms);
      while (!stop_ && Clock::now() < next) {
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
      }
      if (!stop_) TrickleRound();
    }
    return;
  }
  while (!stop_) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    std::lock_guard<std::mutex> lock(mu_);
    for (int fd : fds_) {
      const char byte = 0;
      (void)!send(fd, &byte, 1, MSG_NOSIGNAL | MSG_DONTWAIT);
    }
  }
}

ProbeLog ProbeWhile(const std::function<bool()>& running, const std::function<std::string()>& probe,
                    int period_ms, int min_probes) {
  ProbeLog log;
  while (running() || log.probes < min_probes) {
    const auto start = Clock::now();
    std::string failure = probe();
    const double ms = std::chrono::duration<double, std::milli>(Clock::now() - start).count();
    ++log.probes;
    log.max_ms = std::max(log.max_ms, ms);
    if (!failure.empty()) log.failures.push_back(failure);
    std::this_thread::sleep_until(start + std::chrono::milliseconds(period_ms));
  }
  return log;
}

int64_t ResidentBytes(int pid) {
  std::ifstream status("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind("VmRSS:", 0) == 0) {
      std::istringstream fields(line.substr(6));
      int64_t kb = 0;
      fields >> kb;
      return kb * 1024;
    }
  }
  return 0;
}

}  // namespace parallax::testing
