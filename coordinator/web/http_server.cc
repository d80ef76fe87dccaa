#include "coordinator/web/http_server.h"

#include <arpa/inet.h>
#include <httplib.h>
#include <netinet/in.h>
#include <openssl/crypto.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/ssl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <mutex>
#include <semaphore>

#include "coordinator/web/http_stream.h"
#include "core/base/daemon.h"
#include "core/base/logging.h"
#include "core/rpc/guarded_acceptor.h"

namespace parallax::coordinator {
namespace {

using SteadyClock = std::chrono::steady_clock;

std::string OpenSslError() {
  unsigned long e = ERR_get_error();
  if (e == 0) return "unknown error";
  char buf[256];
  ERR_error_string_n(e, buf, sizeof(buf));
  ERR_clear_error();
  return buf;
}

StatusOr<std::shared_ptr<SSL_CTX>> NewServerTlsContext(const std::string& cert_file,
                                                       const std::string& key_file) {
  std::shared_ptr<SSL_CTX> ctx(SSL_CTX_new(TLS_server_method()), SSL_CTX_free);
  if (!ctx) return Internal("http: cannot create a TLS context: " + OpenSslError());
  SSL_CTX_set_min_proto_version(ctx.get(), TLS1_2_VERSION);
  if (SSL_CTX_use_certificate_chain_file(ctx.get(), cert_file.c_str()) != 1) {
    return FailedPrecondition("--tls-cert '" + cert_file +
                              "' cannot be used for the web server: " + OpenSslError());
  }
  if (SSL_CTX_use_PrivateKey_file(ctx.get(), key_file.c_str(), SSL_FILETYPE_PEM) != 1 ||
      SSL_CTX_check_private_key(ctx.get()) != 1) {
    return FailedPrecondition("--tls-key '" + key_file + "' cannot be used with --tls-cert '" +
                              cert_file + "': " + OpenSslError());
  }
  return ctx;
}

bool ConstantTimeEquals(const std::string& a, const std::string& b) {
  if (a.size() != b.size()) return false;
  return CRYPTO_memcmp(a.data(), b.data(), a.size()) == 0;
}

// The token in "Bearer TOKEN", or the password in "Basic base64(user:pass)".
std::string CredentialOf(const std::string& authorization) {
  if (authorization.rfind("Bearer ", 0) == 0) return authorization.substr(7);
  if (authorization.rfind("Basic ", 0) != 0) return "";
  const std::string b64 = authorization.substr(6);
  if (b64.empty() || b64.size() > 4096 || b64.size() % 4 != 0) return "";
  std::string decoded(b64.size() / 4 * 3, '\0');
  int n = EVP_DecodeBlock(reinterpret_cast<unsigned char*>(decoded.data()),
                          reinterpret_cast<const unsigned char*>(b64.data()),
                          static_cast<int>(b64.size()));
  if (n < 0) return "";
  // EVP_DecodeBlock counts the padding's zero bytes.
  size_t padding = (b64.back() == '=') + (b64.size() > 1 && b64[b64.size() - 2] == '=');
  decoded.resize(static_cast<size_t>(n) - padding);
  size_t colon = decoded.find(':');
  return colon == std::string::npos ? "" : decoded.substr(colon + 1);
}

void AddSafetyHeaders(httplib::Response& res) {
  res.set_header("Content-Security-Policy",
                 "default-src 'none'; style-src 'unsafe-inline'; img-src 'self' data:; "
                 "frame-ancestors 'none'");
  res.set_header("X-Content-Type-Options", "nosniff");
  res.set_header("Referrer-Policy", "no-referrer");
  res.set_header("Cache-Control", "no-store");
}

// The connection a thread is serving, for the handler httplib calls on that
// thread (httplib's Request has no room for it).
struct Current {
  ConnectionGuard* guard = nullptr;
  ConnectionGuard::Id id = 0;
};
thread_local Current current_connection;

class HttplibServer final : public httplib::Server, public HttpServer {
 public:
  HttplibServer(HttpServerOptions options, HttpHandler handler, std::shared_ptr<SSL_CTX> tls)
      : options_(std::move(options)),
        handler_(std::move(handler)),
        tls_(std::move(tls)),
        handler_slots_(options_.threads) {
    set_pre_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
      Answer(req, res);
      return HandlerResponse::Handled;
    });
    set_exception_handler([](const httplib::Request&, httplib::Response& res, std::exception_ptr) {
      res.status = 500;
      res.set_content("internal error\n", "text/plain; charset=utf-8");
    });
  }
  ~HttplibServer() override { Stop(); }

  Status Start() {
    int port = options_.port == 0
                   ? bind_to_any_port(options_.host)
                   : (bind_to_port(options_.host, options_.port) ? options_.port : -1);
    if (port < 0) {
      return Unavailable("http: cannot listen on " + options_.host + ":" +
                         std::to_string(options_.port) + ": " + std::strerror(errno) +
                         "; is the port in use (another coordinator)? pick another with --http");
    }
    port_ = port;
    listen_fd_ = svr_sock_.exchange(INVALID_SOCKET);  // ours from here on, not httplib's
    // httplib listens with a backlog of 5: a burst of connections would wait
    // in SYN retries before the accept loop ever saw them.
    ::listen(listen_fd_, 4096);
    ConnectionLimits limits;
    limits.max_connections = options_.max_connections;
    limits.auth_timeout_ms = options_.request_timeout_ms;
    limits.request_timeout_ms = options_.request_timeout_ms;
    limits.limit_flag = "--http-max-connections";  // the coordinator's flag for the cap
    // Stored before it starts: Serve and stats() read it.
    acceptor_ = NewGuardedAcceptor(
        listen_fd_, limits, "web server",
        [this](int fd, ConnectionGuard::Id id, const std::string&) { Serve(fd, id); });
    return acceptor_->Start();
  }

  int port() const override { return port_; }

  HttpServerStats stats() const override {
    ConnectionGuard::Counts c = acceptor_->guard()->counts();
    HttpServerStats s;
    s.open = c.open;
    s.max_connections = options_.max_connections;
    s.refused = c.refused + acceptor_->shed();
    s.closed_at_cap = c.evicted;
    s.closed_deadline = c.expired;
    return s;
  }

  void Stop() override {
    std::lock_guard<std::mutex> lock(stop_mu_);
    if (acceptor_) acceptor_->Stop();
    if (listen_fd_ != INVALID_SOCKET) ::close(listen_fd_);
    listen_fd_ = INVALID_SOCKET;
  }

 private:
  void Serve(int sock, ConnectionGuard::Id id) {
    ConnectionGuard* guard = acceptor_->guard();
    current_connection = {guard, id};
    {
      StreamLimits limits;
      // The guard closes the connection at the deadline (and counts it);
      // the stream's own deadline, a little later, is a backstop.
      limits.read_deadline =
          SteadyClock::now() + std::chrono::milliseconds(options_.request_timeout_ms + 1'000);
      limits.max_read_bytes = options_.max_request_bytes;
      limits.write_timeout = std::chrono::milliseconds(options_.write_timeout_ms);
      limits.on_first_byte = [guard, id] { guard->SetPhase(id, ConnectionPhase::kReading); };
      std::unique_ptr<ConnectionStream> stream = OpenConnectionStream(sock, tls_.get(), limits);
      if (stream) ServeRequest(*stream);
    }
    current_connection = {};
    guard->Remove(id);  // before the descriptor is closed: the guard never touches a reused one
    ::shutdown(sock, SHUT_RDWR);
    ::close(sock);
  }

  void ServeRequest(ConnectionStream& stream) {
    bool closed = true;
    bool ok = process_request(stream, /*close_connection=*/true, closed, nullptr);
    if (!ok && stream.read_limit_hit() && stream.bytes_written() == 0) {
      // httplib gives up silently when the request line itself does not fit
      // (it answers 400 for headers and 414 for a URI it could read whole).
      const std::string body = "414 the request is over the size limit\n";
      const std::string reply =
          "HTTP/1.1 414 URI Too Long\r\nConnection: close\r\nContent-Type: text/plain\r\n"
          "Content-Length: " +
          std::to_string(body.size()) + "\r\n\r\n" + body;
      stream.write(reply.data(), reply.size());
    }
  }

  void Answer(const httplib::Request& req, httplib::Response& res) {
    const Current conn = current_connection;
    // The request is whole: no deadline cuts it from here on (the reply has
    // its own write timeout).
    if (conn.guard != nullptr) conn.guard->SetPhase(conn.id, ConnectionPhase::kHandling);
    AddSafetyHeaders(res);
    if (!options_.token.empty() &&
        !ConstantTimeEquals(CredentialOf(req.get_header_value("Authorization")), options_.token)) {
      res.status = 401;
      res.set_header("WWW-Authenticate", "Basic realm=\"parallax\", charset=\"UTF-8\"");
      res.set_content(
          "401 unauthorized: send \"Authorization: Bearer TOKEN\" with the token of "
          "the coordinator's --http-token-file\n",
          "text/plain; charset=utf-8");
      return;
    }
    if (conn.guard != nullptr) conn.guard->SetAuthenticated(conn.id);
    if (req.method != "GET" && req.method != "HEAD") {
      res.status = 405;
      res.set_header("Allow", "GET, HEAD");
      res.set_content("405 method not allowed: this server only reads (GET, HEAD)\n",
                      "text/plain; charset=utf-8");
      return;
    }
    HttpRequest request;
    request.method = req.method;
    request.path = req.path;
    request.params.insert(req.params.begin(), req.params.end());
    request.remote = req.remote_addr + ":" + std::to_string(req.remote_port);
    request.server = this;
    HttpResponse response;
    handler_slots_.acquire();
    try {
      response = handler_(request);
    } catch (const std::exception& e) {
      PX_LOG(ERROR) << "http: " << req.method << " \"" << req.path << "\" failed: " << e.what();
      response = HttpResponse{500, "text/plain; charset=utf-8", "500 internal error\n", {}};
    } catch (...) {  // whatever it was, the slot must go back
      PX_LOG(ERROR) << "http: " << req.method << " \"" << req.path << "\" failed";
      response = HttpResponse{500, "text/plain; charset=utf-8", "500 internal error\n", {}};
    }
    handler_slots_.release();
    res.status = response.status;
    for (const auto& [name, value] : response.headers) res.set_header(name, value);
    res.set_content(std::move(response.body), response.content_type);
  }

  const HttpServerOptions options_;  // max_connections resolved (never 0)
  const HttpHandler handler_;
  const std::shared_ptr<SSL_CTX> tls_;  // null: plain HTTP
  int port_ = 0;                        // constant after Start
  int listen_fd_ = INVALID_SOCKET;      // constant after Start, until Stop
  std::counting_semaphore<> handler_slots_;  // requests answered at once
  std::unique_ptr<GuardedAcceptor> acceptor_;  // set before it starts, constant after
  std::mutex stop_mu_;
};

}  // namespace

StatusOr<std::unique_ptr<HttpServer>> StartHttpServer(const HttpServerOptions& options,
                                                      HttpHandler handler) {
  if (options.tls_cert_file.empty() != options.tls_key_file.empty()) {
    return InvalidArgument("http: TLS needs both --tls-cert and --tls-key");
  }
  if (options.threads < 1 || options.max_connections < 0 || options.request_timeout_ms < 1 ||
      options.write_timeout_ms < 1) {
    return InvalidArgument(
        "http: threads, request_timeout_ms and write_timeout_ms must be at least 1 and "
        "max_connections not negative");
  }
  std::shared_ptr<SSL_CTX> tls;
  if (!options.tls_cert_file.empty()) {
    PX_ASSIGN_OR_RETURN(tls, NewServerTlsContext(options.tls_cert_file, options.tls_key_file));
  }
  HttpServerOptions resolved = options;
  if (resolved.max_connections == 0) {
    resolved.max_connections = DefaultMaxConnections(OpenFileLimit());
  }
  auto server = std::make_unique<HttplibServer>(resolved, std::move(handler), std::move(tls));
  PX_RETURN_IF_ERROR(server->Start());
  return std::unique_ptr<HttpServer>(std::move(server));
}

bool IsLoopbackHost(const std::string& host) {
  if (host == "localhost") return true;
  std::string h = host;
  if (h.size() > 2 && h.front() == '[' && h.back() == ']') h = h.substr(1, h.size() - 2);
  in_addr v4{};
  if (inet_pton(AF_INET, h.c_str(), &v4) == 1) return (ntohl(v4.s_addr) >> 24) == 127;
  in6_addr v6{};
  if (inet_pton(AF_INET6, h.c_str(), &v6) == 1) return IN6_IS_ADDR_LOOPBACK(&v6);
  return false;
}

}  // namespace parallax::coordinator
