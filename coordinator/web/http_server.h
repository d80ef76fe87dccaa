// HttpServer: the coordinator's read-only HTTP endpoint (the web pages and
// /metrics), on cpp-httplib (Debian's libcpp-httplib-dev) for HTTP parsing
// and responses. What this layer adds is the policy a daemon port needs, the
// same as the Thrift servers' (core/rpc/guarded_acceptor.h):
//
// - Every connection is registered with a ConnectionGuard when it is
//   accepted and served on a thread of its own, so a slow or idle client
//   never holds a thread that another client waits for. At most
//   `max_connections` are open; at the cap a new connection closes the
//   oldest one that has not sent a byte, else the oldest without a complete
//   request (or with a wrong token), and only if every open connection is
//   answering a request with the token is the new one refused. The accept
//   loop survives EMFILE (the pending connection is closed unanswered).
// - A deadline counted from accept: the TLS handshake and the whole request
//   (line, headers, any body) must arrive within `request_timeout_ms` of the
//   connection being accepted, however the client trickles; at most
//   `max_request_bytes` of it (a request line or URI over that is 414,
//   httplib answers a body over it 413). The reply must be written within
//   `write_timeout_ms` of its first byte. One request per connection. At
//   most `threads` requests are answered at once (the handler runs on at
//   most that many threads); the others wait their turn, their deadlines
//   stopped since they sent everything.
// - Only GET and HEAD are answered (405 otherwise).
// - Authentication: with a token, every request must carry
//   "Authorization: Bearer TOKEN" (or HTTP Basic with the token as the
//   password, which is what a browser sends after the 401's prompt); wrong or
//   missing: 401, compared in constant time. This token only reads; it is not
//   the cluster secret.
// - TLS: with a certificate and key (PEM), HTTPS only.
//
// Responses carry headers that keep a browser from running or sniffing
// anything (Content-Security-Policy without scripts, nosniff, no framing).
#ifndef PARALLAX_COORDINATOR_HTTP_SERVER_H_
#define PARALLAX_COORDINATOR_HTTP_SERVER_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "parallax/status.h"

namespace parallax::coordinator {

class HttpServer;

struct HttpRequest {
  std::string method;                              // "GET" or "HEAD"
  std::string path;                                // decoded, without the query
  std::multimap<std::string, std::string> params;  // decoded query parameters
  std::string remote;                              // "IP:PORT" of the peer, for logs
  const HttpServer* server = nullptr;              // the server answering it (its figures)
};

struct HttpResponse {
  int status = 200;
  std::string content_type = "text/plain; charset=utf-8";
  std::string body;
  std::vector<std::pair<std::string, std::string>> headers;  // extra headers
};

// Answers one request. Called concurrently from up to `threads` threads.
using HttpHandler = std::function<HttpResponse(const HttpRequest&)>;

struct HttpServerOptions {
  std::string host = "127.0.0.1";
  int port = 0;  // 0: pick a free port (see HttpServer::port())
  // Read-only access token; empty: no authentication.
  std::string token;
  // PEM certificate (chain) and private key: both set, HTTPS only.
  std::string tls_cert_file;
  std::string tls_key_file;
  int threads = 4;  // requests answered at once
  // Connections open at most; 0: DefaultMaxConnections
  // (core/rpc/connection_guard.h) of the open-file limit.
  int max_connections = 0;
  size_t max_request_bytes = 16 << 10;
  // The TLS handshake and the whole request, from when the connection was
  // accepted; the whole reply, from its first byte.
  int request_timeout_ms = 5'000;
  int write_timeout_ms = 10'000;
};

// What the server did with its connections, since it started.
struct HttpServerStats {
  int open = 0;             // connections open now
  int max_connections = 0;  // the cap in force
  int64_t refused = 0;      // closed unanswered at accept: at the cap, or out of descriptors
  int64_t closed_at_cap = 0;    // closed to make room for a newer connection
  int64_t closed_deadline = 0;  // closed for not sending a whole request in time
};

class HttpServer {
 public:
  virtual ~HttpServer() = default;
  // The port actually bound.
  virtual int port() const = 0;
  // Thread-safe.
  virtual HttpServerStats stats() const = 0;
  // Stops accepting, cuts connections in flight, joins every thread.
  // Idempotent; the destructor calls it.
  virtual void Stop() = 0;
};

// Binds host:port and serves `handler` from background threads; returns once
// the socket listens. UNAVAILABLE names the address when it cannot bind;
// FAILED_PRECONDITION names the file when the certificate or key cannot be
// used. `handler` must stay callable until Stop() returns.
StatusOr<std::unique_ptr<HttpServer>> StartHttpServer(const HttpServerOptions& options,
                                                      HttpHandler handler);

// Whether `host` is a loopback address or name (127.0.0.0/8, ::1,
// "localhost"): the only places a server without a token should listen.
bool IsLoopbackHost(const std::string& host);

}  // namespace parallax::coordinator

#endif  // PARALLAX_COORDINATOR_HTTP_SERVER_H_
