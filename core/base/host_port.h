// The host part of an address as daemons print and take them.
#ifndef PARALLAX_CORE_BASE_HOST_PORT_H_
#define PARALLAX_CORE_BASE_HOST_PORT_H_

#include <string>

namespace parallax {

// "host:port", "[v6]:port", a bare host or a bare IPv6 address -> the host,
// without brackets.
std::string HostOf(const std::string& host_port);

}  // namespace parallax

#endif  // PARALLAX_CORE_BASE_HOST_PORT_H_
