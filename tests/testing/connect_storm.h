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

inline sockaddr_in LoopbackAddress(int port, uint32_t host = INADDR_LOOPBACK) {
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(host);
  return addr;
}

class ConnectStorm {
 public:
  // One client thread (on 2 cores, more made the server's start slower and
  // met its first instants less often).
  explicit ConnectStorm(int port) : thread_([this, port] { Run(port); }) {}
  ~ConnectStorm() {
    stop_ = true;
    thread_.join();
  }
  // Connections the server's socket accepted (into its queue) so far.
  int64_t connected() const { return connected_.load(); }

 private:
  void Run(int port) {
    const sockaddr_in addr = LoopbackAddress(port);
    // From 127.0.0.2: a connect to a port nobody listens on could otherwise
    // pick that very port as its own and connect to itself, holding the
    // port the server is about to bind.
    const sockaddr_in from = LoopbackAddress(0, INADDR_LOOPBACK + 1);
    while (!stop_.load()) {
      int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
      // The port is picked at connect, where a closed connection's TIME_WAIT
      // does not hold it (a port picked at bind ran out after ~28,000).
      const int one = 1;
      setsockopt(fd, IPPROTO_IP, IP_BIND_ADDRESS_NO_PORT, &one, sizeof(one));
      if (bind(fd, reinterpret_cast<const sockaddr*>(&from), sizeof(from)) == 0 &&
          connect(fd, reinterpret_cast<const sockaddr*>(&addr), sizeof(addr)) == 0) {
        ++connected_;
      }
      close(fd);
    }
  }

  std::atomic<bool> stop_{false};
  std::atomic<int64_t> connected_{0};
  std::thread thread_;  // last: starts after the counters exist
};

}  // namespace parallax::testing

#endif  // PARALLAX_TESTS_TESTING_CONNECT_STORM_H_
