// A TCP port that was free a moment ago, for a test that must name the port
// before its server binds it (to start the server again on the same port,
// or for a program that takes no port 0).
#ifndef PARALLAX_TESTS_TESTING_FREE_PORT_H_
#define PARALLAX_TESTS_TESTING_FREE_PORT_H_

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

namespace parallax::testing {

// Bound on every address to port 0, then closed: free on this machine's
// every address now (0 when none could be bound).
inline int FreePort() {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  socklen_t len = sizeof(addr);
  int port = 0;
  if (bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0 &&
      getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0) {
    port = ntohs(addr.sin_port);
  }
  close(fd);
  return port;
}

}  // namespace parallax::testing

#endif  // PARALLAX_TESTS_TESTING_FREE_PORT_H_
