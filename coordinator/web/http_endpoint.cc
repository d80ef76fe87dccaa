#include "coordinator/web/http_endpoint.h"

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdlib>

#include "core/base/daemon.h"
#include "core/base/logging.h"
#include "core/base/secret.h"
#include "core/rpc/thrift_server.h"
#include "core/rpc/tls.h"

namespace parallax::coordinator {
namespace {

class Endpoint final : public HttpEndpoint {
 public:
  Endpoint(std::unique_ptr<TaskLogReader> logs, std::unique_ptr<HttpSite> site)
      : logs_(std::move(logs)), site_(std::move(site)) {}
  ~Endpoint() override { Stop(); }

  Status Start(const HttpServerOptions& options) {
    HttpSite* site = site_.get();
    PX_ASSIGN_OR_RETURN(server_, StartHttpServer(options, [site](const HttpRequest& r) {
                          return site->Handle(r);
                        }));
    return Status::Ok();
  }
  int port() const override { return server_->port(); }
  void Stop() override {
    if (server_) server_->Stop();
  }

 private:
  std::unique_ptr<TaskLogReader> logs_;
  std::unique_ptr<HttpSite> site_;
  std::unique_ptr<HttpServer> server_;
};

// --http HOST:PORT, [V6]:PORT, :PORT or PORT; no host: loopback.
StatusOr<std::pair<std::string, int>> ParseListen(const std::string& listen) {
  std::string address = listen;
  if (!address.empty() && address.find_first_not_of("0123456789") == std::string::npos) {
    address = ":" + address;
  }
  if (!address.empty() && address[0] == ':') address = "127.0.0.1" + address;
  StatusOr<std::pair<std::string, int>> parsed = ParseHostPort(address);
  if (!parsed.ok()) {
    return InvalidArgument("--http '" + listen + "': " + parsed.status().message() +
                           " (give HOST:PORT, or :PORT for loopback)");
  }
  return parsed;
}

}  // namespace

void AddHttpEndpointFlags(CLI::App* app, HttpEndpointFlags* flags) {
  app->add_option("--http", flags->listen,
                  "serve the web pages and /metrics (read-only) on HOST:PORT; :PORT or PORT "
                  "listens on loopback, port 0 picks a free one (default: off)");
  app->add_option("--http-token-file", flags->token_file,
                  "a read-only token for --http, in a file only its owner can read: every "
                  "request must send \"Authorization: Bearer TOKEN\" (a browser asks for it as "
                  "the password). Not the cluster secret: it grants nothing else");
  app->add_option("--http-port-file", flags->port_file,
                  "write the port --http bound to this file once listening");
  app->add_option("--http-max-connections", flags->max_connections,
                  "connections the web server keeps open at most, out of --max-connections; at "
                  "the limit a new one closes the oldest that has not sent a whole request "
                  "(0: a quarter of --max-connections, from 16 to 1024)")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  app->add_option("--http-request-timeout-ms", flags->request_timeout_ms,
                  "a web connection must finish its TLS handshake and send its whole request "
                  "within this long of being accepted, or it is closed")
      ->capture_default_str()
      ->check(CLI::Range(1, 3'600'000));
  app->add_option("--http-write-timeout-ms", flags->write_timeout_ms,
                  "a web reply must be written within this long of its first byte, or the "
                  "connection is closed (a client that reads slowly)")
      ->capture_default_str()
      ->check(CLI::Range(1, 3'600'000));
  app->add_option("--http-threads", flags->threads,
                  "web requests answered at once; more wait their turn")
      ->capture_default_str()
      ->check(CLI::Range(1, 256));
  app->add_option("--agent-tls-ca", flags->agent_tls_ca,
                  "CA that signed the agents' certificates, to read task logs for the web pages "
                  "when agents serve TLS (default: $PARALLAX_TLS_CA)");
}

StatusOr<int> HttpConnectionShare(const HttpEndpointFlags& flags, int total) {
  if (flags.listen.empty()) return 0;
  constexpr int kFewest = 16;
  const int share = flags.max_connections > 0 ? flags.max_connections
                                              : std::clamp(total / 4, kFewest, 1'024);
  if (total - share < kFewest) {
    return InvalidArgument("--http-max-connections " + std::to_string(share) +
                           " leaves the coordinator's service " + std::to_string(total - share) +
                           " of the " + std::to_string(total) +
                           " connections of --max-connections (at least " +
                           std::to_string(kFewest) +
                           " are needed): lower --http-max-connections or raise "
                           "--max-connections (and the open-file limit)");
  }
  return share;
}

StatusOr<std::unique_ptr<HttpEndpoint>> StartHttpEndpoint(const HttpEndpointFlags& flags,
                                                          const HttpEndpointSources& sources) {
  if (flags.listen.empty()) {
    if (!flags.token_file.empty() || !flags.port_file.empty()) {
      return InvalidArgument("--http-token-file and --http-port-file need --http HOST:PORT");
    }
    return std::unique_ptr<HttpEndpoint>();
  }
  PX_ASSIGN_OR_RETURN(auto address, ParseListen(flags.listen));
  HttpServerOptions options;
  options.host = address.first;
  options.port = address.second;
  options.tls_cert_file = sources.tls_cert_file;
  options.tls_key_file = sources.tls_key_file;
  options.max_connections = sources.max_connections;
  options.request_timeout_ms = flags.request_timeout_ms;
  options.write_timeout_ms = flags.write_timeout_ms;
  options.threads = flags.threads;
  if (!flags.token_file.empty()) {
    StatusOr<std::string> token = ReadSecretFile(flags.token_file);
    if (!token.ok()) return token.status().WithContext("--http-token-file");
    if (*token == sources.cluster_secret) {
      return InvalidArgument(
          "--http-token-file holds the cluster secret; give the web pages a "
          "token of their own (whoever reads them must not be able to submit)");
    }
    options.token = std::move(token).value();
  }
  std::string agent_ca = flags.agent_tls_ca;
  if (agent_ca.empty()) {
    if (const char* env = std::getenv("PARALLAX_TLS_CA")) agent_ca = env;
  }
  PX_RETURN_IF_ERROR(
      CheckTlsCaFile(agent_ca, flags.agent_tls_ca.empty() ? "PARALLAX_TLS_CA" : "--agent-tls-ca"));
  if (options.token.empty() && !IsLoopbackHost(options.host)) {
    PX_LOG(WARNING) << "--http listens on \"" << options.host
                    << "\", beyond this machine, without --http-token-file: anyone who can "
                       "reach the port reads every job, plan and log";
  }
  auto logs = NewAgentLogReader(sources.cluster_secret, agent_ca);
  auto site = std::make_unique<HttpSite>(sources.store, sources.service, sources.rpc_stats,
                                         logs.get(), RealClock());
  auto endpoint = std::make_unique<Endpoint>(std::move(logs), std::move(site));
  PX_RETURN_IF_ERROR(endpoint->Start(options));
  if (!flags.port_file.empty()) {
    PX_RETURN_IF_ERROR(WriteFileAtomically(flags.port_file, std::to_string(endpoint->port()) + "\n")
                           .WithContext("--http-port-file"));
  }
  PX_LOG(INFO) << "web pages and /metrics on " << (options.tls_cert_file.empty() ? "http" : "https")
               << "://" << options.host << ":" << endpoint->port() << "/"
               << (options.token.empty() ? "" : " (token required)");
  return std::unique_ptr<HttpEndpoint>(std::move(endpoint));
}

}  // namespace parallax::coordinator
