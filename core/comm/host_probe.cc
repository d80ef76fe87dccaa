#include "core/comm/host_probe.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <thread>
#include <vector>

#include "core/comm/shm_segment.h"

namespace parallax::comm {
namespace {

using Clock = std::chrono::steady_clock;

// A file descriptor closed when it goes out of scope.
struct Fd {
  int fd = -1;
  explicit Fd(int f) : fd(f) {}
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
};

Status Errno(const std::string& what) {
  return Unavailable("host probe: " + what + ": " + std::strerror(errno));
}

// Milliseconds left before `end` (at least 0).
int MsLeft(Clock::time_point end) {
  return static_cast<int>(std::max<int64_t>(
      0, std::chrono::duration_cast<std::chrono::milliseconds>(end - Clock::now()).count()));
}

// Moves `bytes` through `fd` (write or read), polling until `end`.
Status Transfer(int fd, char* buf, size_t chunk, size_t bytes, bool write,
                Clock::time_point end) {
  size_t done = 0;
  while (done < bytes) {
    pollfd p{fd, static_cast<short>(write ? POLLOUT : POLLIN), 0};
    const int ready = ::poll(&p, 1, MsLeft(end));
    if (ready == 0) return DeadlineExceeded("host probe: loopback transfer passed its deadline");
    if (ready < 0) {
      if (errno == EINTR) continue;
      return Errno("poll");
    }
    const size_t n = std::min(chunk, bytes - done);
    const ssize_t r = write ? ::send(fd, buf, n, MSG_NOSIGNAL) : ::recv(fd, buf, n, 0);
    if (r < 0 && (errno == EINTR || errno == EAGAIN)) continue;
    if (r <= 0) return r == 0 ? Unavailable("host probe: loopback peer closed") : Errno("transfer");
    done += static_cast<size_t>(r);
  }
  return Status::Ok();
}

// A connected pair of TCP sockets over 127.0.0.1.
Status ConnectedPair(std::unique_ptr<Fd>* a, std::unique_ptr<Fd>* b) {
  Fd listener(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (listener.fd < 0) return Errno("socket");
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(addr);
  if (::bind(listener.fd, reinterpret_cast<sockaddr*>(&addr), len) != 0) return Errno("bind");
  if (::listen(listener.fd, 1) != 0) return Errno("listen");
  if (::getsockname(listener.fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    return Errno("getsockname");
  }
  *a = std::make_unique<Fd>(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if ((*a)->fd < 0) return Errno("socket");
  if (::connect((*a)->fd, reinterpret_cast<sockaddr*>(&addr), len) != 0) return Errno("connect");
  *b = std::make_unique<Fd>(::accept4(listener.fd, nullptr, nullptr, SOCK_CLOEXEC));
  if ((*b)->fd < 0) return Errno("accept");
  return Status::Ok();
}

}  // namespace

StatusOr<double> MeasureLoopback(const HostProbeOptions& options) {
  std::unique_ptr<Fd> writer, reader;
  PX_RETURN_IF_ERROR(ConnectedPair(&writer, &reader));
  const Clock::time_point end = Clock::now() + options.deadline;
  constexpr size_t kChunk = 1u << 20;
  std::vector<char> out(kChunk, 1), in(kChunk);
  double best = 0;
  for (int r = 0; r < std::max(1, options.rounds); ++r) {
    const auto start = Clock::now();
    Status sent;
    std::thread send([&] { sent = Transfer(writer->fd, out.data(), kChunk, options.bytes, true, end); });
    Status received = Transfer(reader->fd, in.data(), kChunk, options.bytes, false, end);
    if (!received.ok()) ::shutdown(writer->fd, SHUT_RDWR);  // the sender stops too
    send.join();
    PX_RETURN_IF_ERROR(received);
    PX_RETURN_IF_ERROR(sent);
    const double s = std::chrono::duration<double>(Clock::now() - start).count();
    best = std::max(best, static_cast<double>(options.bytes) / std::max(s, 1e-9));
  }
  return best;
}

StatusOr<double> MeasureSharedMemory(const HostProbeOptions& options) {
  const size_t bytes = (options.bytes + 4095) / 4096 * 4096;
  PX_ASSIGN_OR_RETURN(std::unique_ptr<ShmSegment> segment,
                      ShmSegment::Create(options.shm_directory, bytes));
  segment->Unlink();
  std::vector<char> src(bytes, 1);
  const Clock::time_point end = Clock::now() + options.deadline;
  double best = 0;
  for (int r = 0; r < std::max(1, options.rounds); ++r) {
    if (Clock::now() > end) {
      return DeadlineExceeded("host probe: shared-memory copies passed their deadline");
    }
    src[static_cast<size_t>(r) % bytes] = static_cast<char>(r);
    const auto start = Clock::now();
    std::memcpy(segment->data(), src.data(), bytes);
    const double s = std::chrono::duration<double>(Clock::now() - start).count();
    best = std::max(best, static_cast<double>(bytes) / std::max(s, 1e-9));
  }
  return best;
}

StatusOr<HostProbe> ProbeHost(const HostProbeOptions& options) {
  HostProbe probe;
  PX_ASSIGN_OR_RETURN(probe.loopback_bytes_per_s, MeasureLoopback(options));
  PX_ASSIGN_OR_RETURN(probe.shm_bytes_per_s, MeasureSharedMemory(options));
  return probe;
}

}  // namespace parallax::comm
