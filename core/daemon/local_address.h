// LocalAddressToward: the address this host uses to reach another one, for
// a daemon that must tell others where to find it (an agent's tasks bind and
// advertise it). A name would need every peer's resolver to agree with this
// host's, and ZeroMQ cannot bind one at all; an address the kernel picked
// from its routing table is what peers on that route can reach.
#ifndef PARALLAX_CORE_DAEMON_LOCAL_ADDRESS_H_
#define PARALLAX_CORE_DAEMON_LOCAL_ADDRESS_H_

#include <string>

#include "parallax/status.h"

namespace parallax {

// The numeric source address (IPv4 dotted, or IPv6 without brackets) that
// this host's routing table picks to reach `host_port` ("HOST:PORT",
// "[V6]:PORT", or a bare host): resolves the host, connects a UDP socket to
// it (which sends nothing) and reads the socket's own address. A coordinator
// on this host gives its loopback address. INVALID_ARGUMENT when the host
// is empty; UNAVAILABLE naming the host when it does not resolve or no route
// leads there. Blocks for at most the resolver's own timeout.
StatusOr<std::string> LocalAddressToward(const std::string& host_port);

}  // namespace parallax

#endif  // PARALLAX_CORE_DAEMON_LOCAL_ADDRESS_H_
