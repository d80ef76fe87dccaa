// The coordinator's web endpoint as parallax-coordinator sets it up from its
// flags: the HTTP server (coordinator/web/http_server.h) answering with the site
// (coordinator/web/http_site.h), the read-only token, TLS with the coordinator's
// own certificate, and the agents' log service reached with the cluster
// secret. Off unless --http is given. See docs/OPERATIONS.md, "Web pages
// and metrics".
#ifndef PARALLAX_COORDINATOR_HTTP_ENDPOINT_H_
#define PARALLAX_COORDINATOR_HTTP_ENDPOINT_H_

#include <memory>
#include <string>

#include "coordinator/service/rpc_stats.h"
#include "coordinator/service/service.h"
#include "coordinator/store/state_store.h"
#include "coordinator/web/http_server.h"
#include "coordinator/web/http_site.h"
#include "parallax/status.h"

namespace CLI {
class App;
}

namespace parallax::coordinator {

struct HttpEndpointFlags {
  std::string listen;        // --http: HOST:PORT, :PORT or PORT (loopback); "": off
  std::string token_file;    // --http-token-file
  std::string port_file;     // --http-port-file
  std::string agent_tls_ca;  // --agent-tls-ca (default $PARALLAX_TLS_CA)
  int max_connections = 0;   // --http-max-connections; 0: a share of --max-connections
  int request_timeout_ms = HttpServerOptions{}.request_timeout_ms;  // --http-request-timeout-ms
  int write_timeout_ms = HttpServerOptions{}.write_timeout_ms;      // --http-write-timeout-ms
  int threads = HttpServerOptions{}.threads;                        // --http-threads
};

// Adds --http, --http-token-file, --http-port-file, --agent-tls-ca and the
// web server's limits (--http-max-connections, --http-request-timeout-ms,
// --http-write-timeout-ms, --http-threads).
void AddHttpEndpointFlags(CLI::App* app, HttpEndpointFlags* flags);

// The process has one budget of connections, `total` (--max-connections, by
// default derived from the open-file limit), shared by the Thrift service
// and the web server so that together they stay within the descriptors the
// process has. Returns the web server's part: 0 without --http, else
// --http-max-connections or by default a quarter of `total` (at least 16, at
// most 1024); the Thrift service keeps the rest. INVALID_ARGUMENT, naming
// both flags, when the web server's part would leave the service fewer than
// 16.
StatusOr<int> HttpConnectionShare(const HttpEndpointFlags& flags, int total);

// What the endpoint serves from; everything must outlive it.
struct HttpEndpointSources {
  StateStore* store = nullptr;
  CoordinatorService* service = nullptr;
  RpcStats* rpc_stats = nullptr;
  std::string cluster_secret;  // to read task logs from the agents
  std::string tls_cert_file;   // the coordinator's; both set: HTTPS
  std::string tls_key_file;
  // The web server's connection cap (HttpConnectionShare); 0: its default.
  int max_connections = 0;
};

class HttpEndpoint {
 public:
  virtual ~HttpEndpoint() = default;
  virtual int port() const = 0;
  virtual void Stop() = 0;
};

// Null (and OK) when flags.listen is empty. Fails, naming the flag, for a bad
// address, token file or CA file, or a port that cannot be bound. Logs a
// warning when it listens beyond loopback without a token, and writes the
// bound port to flags.port_file.
StatusOr<std::unique_ptr<HttpEndpoint>> StartHttpEndpoint(const HttpEndpointFlags& flags,
                                                          const HttpEndpointSources& sources);

}  // namespace parallax::coordinator

#endif  // PARALLAX_COORDINATOR_HTTP_ENDPOINT_H_
