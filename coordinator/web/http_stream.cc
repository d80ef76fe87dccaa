#include "coordinator/web/http_stream.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <openssl/err.h>
#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <optional>

namespace parallax::coordinator {
namespace {

using SteadyClock = std::chrono::steady_clock;

// Waits until `fd` is ready for `events` (or has an error or hang-up, which
// the next read or write reports) or `deadline` passes; false on timeout.
bool WaitFor(int fd, short events, SteadyClock::time_point deadline) {
  while (true) {
    auto left = std::chrono::ceil<std::chrono::milliseconds>(deadline - SteadyClock::now());
    if (left.count() <= 0) return false;
    pollfd p{fd, events, 0};
    int r = ::poll(&p, 1, static_cast<int>(std::min<int64_t>(left.count(), INT_MAX)));
    if (r > 0) return true;
    if (r < 0 && errno != EINTR) return false;
  }
}

void AddressOf(int fd, bool peer, std::string& ip, int& port) {
  sockaddr_storage addr{};
  socklen_t len = sizeof(addr);
  int r = peer ? getpeername(fd, reinterpret_cast<sockaddr*>(&addr), &len)
               : getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  ip.clear();
  port = -1;
  if (r != 0) return;
  char buf[INET6_ADDRSTRLEN] = {0};
  if (addr.ss_family == AF_INET) {
    auto* a = reinterpret_cast<sockaddr_in*>(&addr);
    inet_ntop(AF_INET, &a->sin_addr, buf, sizeof(buf));
    port = ntohs(a->sin_port);
  } else if (addr.ss_family == AF_INET6) {
    auto* a = reinterpret_cast<sockaddr_in6*>(&addr);
    inet_ntop(AF_INET6, &a->sin6_addr, buf, sizeof(buf));
    port = ntohs(a->sin6_port);
  }
  ip = buf;
}

class SocketStream final : public ConnectionStream {
 public:
  // `spoke`: on_first_byte was already called (after a TLS handshake).
  SocketStream(int fd, SSL* ssl, const StreamLimits& limits, bool spoke)
      : fd_(fd), ssl_(ssl), limits_(limits), spoke_(spoke) {}
  ~SocketStream() override {
    if (ssl_ == nullptr) return;
    SSL_shutdown(ssl_);  // one try: the socket is non-blocking
    SSL_free(ssl_);
    ERR_clear_error();
  }

  bool is_readable() const override {
    if (bytes_read_ >= limits_.max_read_bytes) return false;
    if (ssl_ != nullptr && SSL_pending(ssl_) > 0) return true;
    return WaitFor(fd_, POLLIN, limits_.read_deadline);
  }

  bool is_writable() const override {
    return WaitFor(fd_, POLLOUT,
                   write_deadline_.value_or(SteadyClock::now() + limits_.write_timeout));
  }

  bool read_limit_hit() const override { return read_limit_hit_; }
  size_t bytes_written() const override { return bytes_written_; }

  ssize_t read(char* ptr, size_t size) override {
    if (bytes_read_ >= limits_.max_read_bytes) {
      read_limit_hit_ = true;
      return -1;
    }
    size = std::min({size, limits_.max_read_bytes - bytes_read_, size_t{INT_MAX}});
    while (true) {
      short want = POLLIN;
      ssize_t n = ssl_ != nullptr ? SslIo(SSL_read(ssl_, ptr, static_cast<int>(size)), &want)
                                  : SocketIo(::recv(fd_, ptr, size, 0));
      if (n >= 0) {
        if (n > 0 && !spoke_) {
          spoke_ = true;
          if (limits_.on_first_byte) limits_.on_first_byte();
        }
        bytes_read_ += static_cast<size_t>(n);
        return n;
      }
      if (n == kFailed || !WaitFor(fd_, want, limits_.read_deadline)) return -1;
    }
  }

  ssize_t write(const char* ptr, size_t size) override {
    // One deadline for the whole reply, from its first write: a reader that
    // takes a byte now and then cannot hold the thread.
    if (!write_deadline_) write_deadline_ = SteadyClock::now() + limits_.write_timeout;
    const auto deadline = *write_deadline_;
    size = std::min(size, size_t{INT_MAX});
    while (true) {
      short want = POLLOUT;
      ssize_t n = ssl_ != nullptr ? SslIo(SSL_write(ssl_, ptr, static_cast<int>(size)), &want)
                                  : SocketIo(::send(fd_, ptr, size, MSG_NOSIGNAL));
      if (n >= 0) {
        bytes_written_ += static_cast<size_t>(n);
        return n;
      }
      if (n == kFailed || !WaitFor(fd_, want, deadline)) return -1;
    }
  }

  void get_remote_ip_and_port(std::string& ip, int& port) const override {
    AddressOf(fd_, /*peer=*/true, ip, port);
  }
  void get_local_ip_and_port(std::string& ip, int& port) const override {
    AddressOf(fd_, /*peer=*/false, ip, port);
  }
  int socket() const override { return fd_; }

 private:
  static constexpr ssize_t kWait = -2;    // not ready: wait and try again
  static constexpr ssize_t kFailed = -1;  // error or end

  static ssize_t SocketIo(ssize_t r) {
    if (r >= 0) return r;
    return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR ? kWait : kFailed;
  }

  // The result of SSL_read/SSL_write `r`; sets *want to what to wait for.
  ssize_t SslIo(int r, short* want) {
    if (r > 0) return r;
    switch (SSL_get_error(ssl_, r)) {
      case SSL_ERROR_WANT_READ:
        *want = POLLIN;
        return kWait;
      case SSL_ERROR_WANT_WRITE:
        *want = POLLOUT;
        return kWait;
      case SSL_ERROR_ZERO_RETURN:
        return 0;
      default:
        ERR_clear_error();
        return kFailed;
    }
  }

  const int fd_;
  SSL* const ssl_;  // owned; null: plain
  const StreamLimits limits_;
  size_t bytes_read_ = 0;
  size_t bytes_written_ = 0;
  bool read_limit_hit_ = false;
  bool spoke_;  // on_first_byte called
  std::optional<SteadyClock::time_point> write_deadline_;  // set by the first write
};

}  // namespace

std::unique_ptr<ConnectionStream> OpenConnectionStream(int sock, SSL_CTX* tls,
                                                       const StreamLimits& limits) {
  int flags = fcntl(sock, F_GETFL, 0);
  if (flags < 0 || fcntl(sock, F_SETFL, flags | O_NONBLOCK) != 0) return nullptr;
  if (tls == nullptr) return std::make_unique<SocketStream>(sock, nullptr, limits, /*spoke=*/false);
  SSL* ssl = SSL_new(tls);
  if (ssl == nullptr || SSL_set_fd(ssl, sock) != 1) {
    if (ssl != nullptr) SSL_free(ssl);
    ERR_clear_error();
    return nullptr;
  }
  while (true) {
    int r = SSL_accept(ssl);
    if (r == 1) {
      if (limits.on_first_byte) limits.on_first_byte();
      return std::make_unique<SocketStream>(sock, ssl, limits, /*spoke=*/true);
    }
    int e = SSL_get_error(ssl, r);
    short want = e == SSL_ERROR_WANT_READ ? POLLIN : e == SSL_ERROR_WANT_WRITE ? POLLOUT : 0;
    if (want == 0 || !WaitFor(sock, want, limits.read_deadline)) {
      SSL_free(ssl);
      ERR_clear_error();
      return nullptr;
    }
  }
}

}  // namespace parallax::coordinator
