#include "core/daemon/local_address.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "core/base/host_port.h"

namespace parallax {
namespace {

// The address `fd` is bound to, numeric; "" on failure.
std::string SocketAddress(int fd) {
  sockaddr_storage own{};
  socklen_t len = sizeof own;
  if (getsockname(fd, reinterpret_cast<sockaddr*>(&own), &len) != 0) return "";
  char text[INET6_ADDRSTRLEN] = {0};
  const void* where = own.ss_family == AF_INET6
                          ? static_cast<const void*>(&reinterpret_cast<sockaddr_in6*>(&own)->sin6_addr)
                          : static_cast<const void*>(&reinterpret_cast<sockaddr_in*>(&own)->sin_addr);
  if (inet_ntop(own.ss_family, where, text, sizeof text) == nullptr) return "";
  return text;
}

}  // namespace

StatusOr<std::string> LocalAddressToward(const std::string& host_port) {
  const std::string host = HostOf(host_port);
  if (host.empty()) return InvalidArgument("no host in '" + host_port + "'");
  addrinfo hints{};
  hints.ai_socktype = SOCK_DGRAM;
  hints.ai_flags = AI_ADDRCONFIG;
  addrinfo* found = nullptr;
  // Any port: connecting a UDP socket only picks the route.
  if (int rc = getaddrinfo(host.c_str(), "9", &hints, &found); rc != 0 || found == nullptr) {
    return Unavailable("cannot resolve '" + host + "': " + gai_strerror(rc));
  }
  std::string last_error = "no address";
  for (addrinfo* a = found; a != nullptr; a = a->ai_next) {
    int fd = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) {
      last_error = std::strerror(errno);
      continue;
    }
    std::string address;
    if (connect(fd, a->ai_addr, a->ai_addrlen) == 0) {
      address = SocketAddress(fd);
    } else {
      last_error = std::strerror(errno);
    }
    close(fd);
    if (!address.empty()) {
      freeaddrinfo(found);
      return address;
    }
  }
  freeaddrinfo(found);
  return Unavailable("no route from this host to '" + host + "': " + last_error);
}

}  // namespace parallax
