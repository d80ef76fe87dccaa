// Serving a Thrift service the way every Parallax daemon does: framed
// transport, binary protocol with size limits, a thread per connection (so a
// blocking call never delays another connection), started in the background
// and returned once the socket listens.
#ifndef PARALLAX_CORE_RPC_THRIFT_SERVER_H_
#define PARALLAX_CORE_RPC_THRIFT_SERVER_H_

#include <cstdint>
#include <memory>
#include <string>
#include <utility>

#include "core/base/status.h"

namespace apache::thrift {
class TProcessor;
}

namespace parallax {

struct ThriftServerOptions {
  std::string host = "127.0.0.1";
  int port = 0;  // 0: pick a free port (see ThriftServer::port())
  // Largest string or binary field accepted; a request with a bigger one is
  // refused and its connection closed.
  uint32_t max_string_bytes = 16 << 20;
  // Largest frame (one whole request) accepted: a bigger frame header closes
  // the connection before anything is allocated for the body. The
  // coordinator's --max-request-bytes.
  uint32_t max_frame_bytes = 24 << 20;
  // A connection that sends nothing for this long is closed (0: never).
  int idle_timeout_ms = 0;
  // What is served, for log and error messages ("coordinator").
  std::string what = "service";
  // PEM certificate and private key: both set, the server speaks TLS only
  // (core/rpc/tls.h); both empty, plain TCP.
  std::string tls_cert_file;
  std::string tls_key_file;
};

class ThriftServer {
 public:
  virtual ~ThriftServer() = default;
  // The port actually bound.
  virtual int port() const = 0;
  // Stops accepting, closes connections and joins the serving thread.
  // Idempotent. Blocked handlers must be released first.
  virtual void Stop() = 0;
};

// Binds and starts serving `processor` in a background thread. UNAVAILABLE
// names the address when it cannot listen; INVALID_ARGUMENT or
// FAILED_PRECONDITION (naming the flag and file) when the TLS certificate or
// key cannot be used.
StatusOr<std::unique_ptr<ThriftServer>> StartThriftServer(
    const ThriftServerOptions& options, std::shared_ptr<apache::thrift::TProcessor> processor);

// Splits "HOST:PORT" or "[v6]:PORT" (port 0..65535). INVALID_ARGUMENT names
// the bad part.
StatusOr<std::pair<std::string, int>> ParseHostPort(const std::string& address);

}  // namespace parallax

#endif  // PARALLAX_CORE_RPC_THRIFT_SERVER_H_
