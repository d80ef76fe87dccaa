// HttpServer: the coordinator's read-only HTTP endpoint (the web pages and
// /metrics), on cpp-httplib (Debian's libcpp-httplib-dev) for HTTP parsing
// and responses. What this layer adds is the policy a daemon port needs:
//
// - Bounded work: at most `threads` connections are served at once and at
//   most `max_queued` accepted ones wait; past that the accept loop stops
//   accepting (the kernel's backlog holds, then refuses, the rest) and a
//   rate-limited warning says so. The accept loop survives EMFILE and other
//   accept() failures (it re-listens on the same address).
// - Bounded memory and time per connection: one request per connection; the
//   whole request (line, headers, any body) may be at most
//   `max_request_bytes` and must arrive within `request_timeout_ms` (a slow
//   sender is cut off, however it trickles); the reply must be written within
//   `write_timeout_ms`. Only GET and HEAD are answered (405 otherwise), a
//   request URI over httplib's 8 KiB is 414.
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
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "parallax/status.h"

namespace parallax::coordinator {

struct HttpRequest {
  std::string method;                              // "GET" or "HEAD"
  std::string path;                                // decoded, without the query
  std::multimap<std::string, std::string> params;  // decoded query parameters
  std::string remote;                              // "IP:PORT" of the peer, for logs
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
  int threads = 4;      // connections served at once
  int max_queued = 32;  // accepted connections waiting for a thread
  size_t max_request_bytes = 16 << 10;
  // The whole request (and the TLS handshake), from when a thread takes the
  // connection; the whole reply, from its first byte.
  int request_timeout_ms = 5'000;
  int write_timeout_ms = 10'000;
};

class HttpServer {
 public:
  virtual ~HttpServer() = default;
  // The port actually bound.
  virtual int port() const = 0;
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
