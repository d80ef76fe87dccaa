#include "core/base/host_port.h"

namespace parallax {

std::string HostOf(const std::string& host_port) {
  if (!host_port.empty() && host_port.front() == '[') {
    size_t close = host_port.find(']');
    return close == std::string::npos ? host_port : host_port.substr(1, close - 1);
  }
  size_t colon = host_port.rfind(':');
  // Two colons without brackets: a bare IPv6 address.
  if (colon == std::string::npos || host_port.find(':') != colon) return host_port;
  return host_port.substr(0, colon);
}

}  // namespace parallax
