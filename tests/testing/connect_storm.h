// ConnectStorm: a client that connects to a loopback port over and over (and
// closes at once) from its own thread, so that connections arrive in the
// instant a server starts listening on that port: the moment a server's
// accept loop runs before the code that started it has returned.
#ifndef PARALLAX_TESTS_TESTING_CONNECT_STORM_H_
#define PARALLAX_TESTS_TESTING_CONNECT_STORM_H_

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <thread>

namespace parallax::testing {

inline sockaddr_in LoopbackAddress(int port) {
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  return addr;
}

// A loopback port that was free a moment ago (bound to port 0, then closed).
inline int FreeLoopbackPort() {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in addr = LoopbackAddress(0);
  socklen_t len = sizeof(addr);
  int port = -1;
  if (bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0 &&
      getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0) {
    port = ntohs(addr.sin_port);
  }
  close(fd);
  return port;
}

class ConnectStorm {
 public:
  explicit ConnectStorm(int port)
      : thread_([this, port] {
          const sockaddr_in addr = LoopbackAddress(port);
          while (!stop_.load()) {
            int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
            if (connect(fd, reinterpret_cast<const sockaddr*>(&addr), sizeof(addr)) == 0) {
              ++connected_;
            }
            close(fd);
          }
        }) {}
  ~ConnectStorm() {
    stop_ = true;
    thread_.join();
  }
  // Connections the server's socket accepted (into its queue) so far.
  int64_t connected() const { return connected_.load(); }

 private:
  std::atomic<bool> stop_{false};
  std::atomic<int64_t> connected_{0};
  std::thread thread_;  // last: starts after the counters exist
};

}  // namespace parallax::testing

#endif  // PARALLAX_TESTS_TESTING_CONNECT_STORM_H_
