// Serving a CoordinatorService over Thrift (core/rpc/thrift_server.h: framed
// transport, binary protocol, a thread per connection, so a blocking call on
// one connection never delays a heartbeat on another).
#ifndef PARALLAX_COORDINATOR_SERVER_H_
#define PARALLAX_COORDINATOR_SERVER_H_

#include <memory>

#include "core/base/status.h"
#include "core/rpc/thrift_server.h"

namespace parallax::coordinator {

class CoordinatorService;
class RpcStats;

using ServerOptions = ThriftServerOptions;
using Server = ThriftServer;

// Binds and starts serving in a background thread; returns once the socket
// is listening. `service` must outlive the server. With `rpc_stats` (which
// must outlive it too), every call is counted and timed there.
StatusOr<std::unique_ptr<Server>> StartServer(const ServerOptions& options,
                                              std::shared_ptr<CoordinatorService> service,
                                              RpcStats* rpc_stats = nullptr);

}  // namespace parallax::coordinator

#endif  // PARALLAX_COORDINATOR_SERVER_H_
