// ShardServer: serves a ShardCore on a ZeroMQ ROUTER socket. One event-loop
// thread owns the socket and the core; many workers are served concurrently
// because nothing blocks the loop: a request whose step is not ready is held
// inside the core and answered when another message makes it ready.
#ifndef PARALLAX_PS_SHARD_SERVER_H_
#define PARALLAX_PS_SHARD_SERVER_H_

#include <memory>
#include <string>

#include "core/base/status.h"
#include "ps/shard_core.h"

namespace parallax::ps {

struct ShardServerOptions {
  ShardOptions shard;
  // Where to bind. A port of 0 ("tcp://127.0.0.1:0") picks a free port;
  // endpoint() tells which. ipc:// paths work for same-host workers.
  std::string listen = "tcp://127.0.0.1:0";
};

class ShardServer {
 public:
  virtual ~ShardServer() = default;

  // Binds and starts the loop thread. Fails when the plan or the address is
  // unusable.
  static StatusOr<std::unique_ptr<ShardServer>> Start(ShardServerOptions options);

  // The bound endpoint, e.g. "tcp://127.0.0.1:41234". Constant after Start.
  virtual const std::string& endpoint() const = 0;

  // Stops the loop and joins it; pending held requests are dropped.
  // Idempotent; the destructor calls it.
  virtual void Stop() = 0;
};

}  // namespace parallax::ps

#endif  // PARALLAX_PS_SHARD_SERVER_H_
