// Serving a CoordinatorService over Thrift (core/rpc/thrift_server.h: framed
// transport, binary protocol, a thread per connection, so a blocking call on
// one connection never delays a heartbeat on another; bounded connections
// and deadlines, so a flood of connections does not starve it either).
#ifndef PARALLAX_COORDINATOR_SERVER_H_
#define PARALLAX_COORDINATOR_SERVER_H_

#include <memory>

#include "core/rpc/thrift_server.h"
#include "parallax/status.h"

namespace parallax::coordinator {

class CoordinatorService;
class RpcStats;

using ServerOptions = ThriftServerOptions;
using Server = ThriftServer;

// Binds and starts serving in background threads; returns once the socket
// is listening. The server tells connections that authenticated by the
// service's secret (options.auth_token is taken from `service`). `service`
// must outlive the server. With `rpc_stats` (which must outlive it too),
// every call is counted and timed there.
StatusOr<std::unique_ptr<Server>> StartServer(const ServerOptions& options,
                                              std::shared_ptr<CoordinatorService> service,
                                              RpcStats* rpc_stats = nullptr);

}  // namespace parallax::coordinator

#endif  // PARALLAX_COORDINATOR_SERVER_H_
