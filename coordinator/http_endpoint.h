// The coordinator's web endpoint as parallax-coordinator sets it up from its
// flags: the HTTP server (coordinator/http_server.h) answering with the site
// (coordinator/http_site.h), the read-only token, TLS with the coordinator's
// own certificate, and the agents' log service reached with the cluster
// secret. Off unless --http is given. See docs/OPERATIONS.md, "Web pages
// and metrics".
#ifndef PARALLAX_COORDINATOR_HTTP_ENDPOINT_H_
#define PARALLAX_COORDINATOR_HTTP_ENDPOINT_H_

#include <memory>
#include <string>

#include "coordinator/http_server.h"
#include "coordinator/http_site.h"
#include "coordinator/rpc_stats.h"
#include "coordinator/service.h"
#include "coordinator/state_store.h"
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
};

// Adds --http, --http-token-file, --http-port-file and --agent-tls-ca.
void AddHttpEndpointFlags(CLI::App* app, HttpEndpointFlags* flags);

// What the endpoint serves from; everything must outlive it.
struct HttpEndpointSources {
  StateStore* store = nullptr;
  CoordinatorService* service = nullptr;
  RpcStats* rpc_stats = nullptr;
  std::string cluster_secret;  // to read task logs from the agents
  std::string tls_cert_file;   // the coordinator's; both set: HTTPS
  std::string tls_key_file;
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
