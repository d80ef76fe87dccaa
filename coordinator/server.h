// CoordinatorServer: serves a CoordinatorService over Thrift (framed
// transport, binary protocol) with a thread per connection, so a blocking
// call on one connection never delays a heartbeat on another.
#ifndef PARALLAX_COORDINATOR_SERVER_H_
#define PARALLAX_COORDINATOR_SERVER_H_

#include <cstdint>
#include <memory>
#include <string>

#include "core/base/status.h"

namespace parallax::coordinator {

class CoordinatorService;

struct ServerOptions {
  std::string host = "127.0.0.1";
  int port = 0;  // 0: pick a free port (see Server::port())
  // Largest string or binary field accepted; a request with a bigger one is
  // refused and its connection closed. (Thrift also caps a frame at 16 MB.)
  uint32_t max_string_bytes = 16 << 20;
  // A connection that sends nothing for this long is closed (0: never).
  int idle_timeout_ms = 0;
};

class Server {
 public:
  virtual ~Server() = default;
  // The port actually bound.
  virtual int port() const = 0;
  // Stops accepting, closes connections and joins the serving thread.
  // Idempotent. The service must be stopped first so blocked calls return.
  virtual void Stop() = 0;
};

// Binds and starts serving in a background thread; returns once the socket
// is listening. `service` must outlive the server.
StatusOr<std::unique_ptr<Server>> StartServer(const ServerOptions& options,
                                              std::shared_ptr<CoordinatorService> service);

// Splits "HOST:PORT" (port 0..65535). INVALID_ARGUMENT names the bad part.
StatusOr<std::pair<std::string, int>> ParseHostPort(const std::string& address);

}  // namespace parallax::coordinator

#endif  // PARALLAX_COORDINATOR_SERVER_H_
