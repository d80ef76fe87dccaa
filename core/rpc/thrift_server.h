// Serving a Thrift service the way every Parallax daemon does: framed
// transport, binary protocol with size limits, a thread per connection (so a
// blocking call never delays another connection), started in the background
// and returned once the socket listens.
//
// The server cannot be starved by connections (docs/RELIABILITY.md,
// "Connection floods"): a ConnectionGuard (core/rpc/connection_guard.h) caps
// the open connections, closes the oldest that has not authenticated to make
// room for a new one, and closes connections that do not authenticate, send
// a request or (optionally) say anything in time; a request of a connection
// that has not authenticated is read only as far as its header
// (core/rpc/guarded_transport.h); and the accept loop survives running out of
// descriptors (EMFILE, ENFILE): it sheds the pending connection, logs once
// per 10 s, backs off briefly and keeps serving.
//
// Why not Thrift's own servers: TThreadedServer's serve() ends for good on
// the first accept() error (EMFILE), has no per-connection deadlines and
// allocates a whole frame before anything checks the secret; its concurrent
// client limit stops accepting instead of making room. TThreadPoolServer
// holds a pool thread per connection for the connection's life, so a pool
// sized for a flood is a thread per connection anyway, and a smaller one lets
// idle connections or long polls starve heartbeats. TNonblockingServer reads
// every frame whole into memory before processing it (no authentication
// before allocation), runs handlers on a fixed pool that long polls and
// key-value waits would block, and needs libevent. So Parallax keeps
// Thrift's transports, protocol and processors, and owns the accept loop and
// the per-connection threads.
#ifndef PARALLAX_CORE_RPC_THRIFT_SERVER_H_
#define PARALLAX_CORE_RPC_THRIFT_SERVER_H_

#include <cstdint>
#include <memory>
#include <string>
#include <utility>

#include "core/rpc/connection_guard.h"
#include "parallax/status.h"

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
  // The service's shared secret ("": none). The server itself only uses it
  // to tell connections that authenticated (a request header carried it)
  // from those that did not; the service still checks every request.
  std::string auth_token;
  // Connection cap and deadlines (core/rpc/connection_guard.h).
  ConnectionLimits limits;
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
  // The connection cap in force (options.limits.max_connections, or the
  // default derived from the open-file limit).
  virtual int max_connections() const = 0;
  // Stops accepting, closes connections and joins every thread. Idempotent.
  // Blocked handlers must be released first.
  virtual void Stop() = 0;
};

// Binds and starts serving `processor` in background threads. UNAVAILABLE
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
