#include "coordinator/http_server.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <httplib.h>
#include <netinet/in.h>
#include <openssl/crypto.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/ssl.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <mutex>
#include <set>
#include <thread>

#include "coordinator/http_stream.h"
#include "core/base/logging.h"

namespace parallax::coordinator {
namespace {

using SteadyClock = std::chrono::steady_clock;

// Connections waiting for one of `threads` workers. Enqueue blocks while
// `max_queued` wait, so the accept loop stops accepting and the number of
// open connections stays bounded; Close() releases it.
class ConnectionPool {
 public:
  ConnectionPool(int threads, int max_queued) : max_queued_(static_cast<size_t>(max_queued)) {
    for (int i = 0; i < threads; ++i) workers_.emplace_back([this] { Work(); });
  }
  ~ConnectionPool() { Close(); }

  // Blocks while the queue is full. After Close(), runs `fn` here (the
  // server then closes the connection at once).
  void Enqueue(std::function<void()> fn) {
    std::unique_lock<std::mutex> lock(mu_);
    if (jobs_.size() >= max_queued_ && !closed_) {
      auto now = SteadyClock::now();
      if (now - last_full_warning_ > std::chrono::minutes(1)) {
        last_full_warning_ = now;
        PX_LOG(WARNING) << "http: " << workers_.size() << " connections served and " << max_queued_
                        << " waiting; not accepting more until one ends (warned once a minute)";
      }
      room_.wait(lock, [&] { return jobs_.size() < max_queued_ || closed_; });
    }
    if (closed_) {
      lock.unlock();
      fn();
      return;
    }
    jobs_.push_back(std::move(fn));
    ready_.notify_one();
  }

  // Runs what is queued (each closes at once), then joins the workers.
  // Idempotent.
  void Close() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      closed_ = true;
    }
    ready_.notify_all();
    room_.notify_all();
    for (auto& t : workers_) {
      if (t.joinable()) t.join();
    }
  }

 private:
  void Work() {
    while (true) {
      std::function<void()> fn;
      {
        std::unique_lock<std::mutex> lock(mu_);
        ready_.wait(lock, [&] { return !jobs_.empty() || closed_; });
        if (jobs_.empty()) return;
        fn = std::move(jobs_.front());
        jobs_.pop_front();
      }
      room_.notify_one();
      fn();
    }
  }

  const size_t max_queued_;
  std::mutex mu_;
  std::condition_variable ready_;                // a job or closed_
  std::condition_variable room_;                 // the queue shrank or closed_
  std::deque<std::function<void()>> jobs_;       // GUARDED_BY(mu_)
  bool closed_ = false;                          // GUARDED_BY(mu_)
  SteadyClock::time_point last_full_warning_{};  // GUARDED_BY(mu_)
  std::vector<std::thread> workers_;             // constant after construction
};

// What httplib's listen loop is given each time it starts: enqueues into the
// server's long-lived pool, which the server closes itself.
class PoolHandle final : public httplib::TaskQueue {
 public:
  explicit PoolHandle(ConnectionPool* pool) : pool_(pool) {}
  void enqueue(std::function<void()> fn) override { pool_->Enqueue(std::move(fn)); }
  void shutdown() override {}

 private:
  ConnectionPool* const pool_;
};

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

class HttplibServer final : public httplib::Server, public HttpServer {
 public:
  HttplibServer(HttpServerOptions options, HttpHandler handler, std::shared_ptr<SSL_CTX> tls)
      : options_(std::move(options)),
        handler_(std::move(handler)),
        tls_(std::move(tls)),
        pool_(options_.threads, options_.max_queued) {
    new_task_queue = [this] { return new PoolHandle(&pool_); };
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

  Status Bind() {
    int port = options_.port == 0
                   ? bind_to_any_port(options_.host)
                   : (bind_to_port(options_.host, options_.port) ? options_.port : -1);
    if (port < 0) {
      return Unavailable("http: cannot listen on " + options_.host + ":" +
                         std::to_string(options_.port) + ": " + std::strerror(errno) +
                         "; is the port in use (another coordinator)? pick another with --http");
    }
    port_ = port;
    thread_ = std::thread([this] { ServeLoop(); });
    return Status::Ok();
  }

  int port() const override { return port_; }

  void Stop() override {
    int listening = INVALID_SOCKET;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (stopping_) return;
      stopping_ = true;
      listening = svr_sock_.exchange(INVALID_SOCKET);
      // Wakes the reads and writes in flight; each worker then closes its own.
      for (int fd : in_flight_) ::shutdown(fd, SHUT_RDWR);
    }
    rebind_cv_.notify_all();
    // Wakes accept(); the descriptor is closed only after the loop is gone,
    // so its number cannot be reused under it.
    if (listening != INVALID_SOCKET) ::shutdown(listening, SHUT_RDWR);
    if (thread_.joinable()) thread_.join();
    if (listening != INVALID_SOCKET) ::close(listening);
    pool_.Close();
  }

 private:
  // httplib calls this (virtually) for every accepted connection, on a pool
  // thread; it replaces httplib's own, whose reads have neither a size nor a
  // total time limit.
  bool process_and_close_socket(int sock) override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (stopping_) {
        ::close(sock);
        return false;
      }
      in_flight_.insert(sock);
    }
    bool ok = ServeConnection(sock);
    {
      std::lock_guard<std::mutex> lock(mu_);
      in_flight_.erase(sock);
    }
    ::shutdown(sock, SHUT_RDWR);
    ::close(sock);
    return ok;
  }

  bool ServeConnection(int sock) {
    ConnectionLimits limits;
    limits.read_deadline =
        SteadyClock::now() + std::chrono::milliseconds(options_.request_timeout_ms);
    limits.max_read_bytes = options_.max_request_bytes;
    limits.write_timeout = std::chrono::milliseconds(options_.write_timeout_ms);
    std::unique_ptr<ConnectionStream> stream = OpenConnectionStream(sock, tls_.get(), limits);
    if (!stream) return false;
    bool closed = true;
    bool ok = process_request(*stream, /*close_connection=*/true, closed, nullptr);
    if (!ok && stream->read_limit_hit() && stream->bytes_written() == 0) {
      // httplib gives up silently when the request line itself does not fit
      // (it answers 400 for headers and 414 for a URI it could read whole).
      const std::string body = "414 the request is over the size limit\n";
      const std::string reply =
          "HTTP/1.1 414 URI Too Long\r\nConnection: close\r\nContent-Type: text/plain\r\n"
          "Content-Length: " +
          std::to_string(body.size()) + "\r\n\r\n" + body;
      stream->write(reply.data(), reply.size());
    }
    return ok;
  }

  void Answer(const httplib::Request& req, httplib::Response& res) {
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
    HttpResponse response;
    try {
      response = handler_(request);
    } catch (const std::exception& e) {
      PX_LOG(ERROR) << "http: " << req.method << " \"" << req.path << "\" failed: " << e.what();
      response = HttpResponse{500, "text/plain; charset=utf-8", "500 internal error\n", {}};
    }
    res.status = response.status;
    for (const auto& [name, value] : response.headers) res.set_header(name, value);
    res.set_content(std::move(response.body), response.content_type);
  }

  // Serves until Stop(). httplib's loop ends on an accept() failure other
  // than EMFILE (closing the socket); then the same address is bound again.
  void ServeLoop() {
    int backoff_ms = 10;
    while (true) {
      listen_after_bind();
      std::unique_lock<std::mutex> lock(mu_);
      if (stopping_) return;
      // httplib closed the socket but left its number here.
      svr_sock_ = INVALID_SOCKET;
      PX_LOG(WARNING) << "http: accepting on port " << port_ << " failed (" << std::strerror(errno)
                      << "); listening again";
      while (!stopping_ && !bind_to_port(options_.host, port_)) {
        rebind_cv_.wait_for(lock, std::chrono::milliseconds(backoff_ms));
        backoff_ms = std::min(backoff_ms * 2, 1'000);
      }
      if (stopping_) {
        int s = svr_sock_.exchange(INVALID_SOCKET);
        if (s != INVALID_SOCKET) ::close(s);
        return;
      }
    }
  }

  const HttpServerOptions options_;
  const HttpHandler handler_;
  const std::shared_ptr<SSL_CTX> tls_;  // null: plain HTTP
  int port_ = 0;                        // constant after Bind
  ConnectionPool pool_;
  std::mutex mu_;
  std::condition_variable rebind_cv_;
  bool stopping_ = false;    // GUARDED_BY(mu_)
  std::set<int> in_flight_;  // GUARDED_BY(mu_): sockets being served
  std::thread thread_;
};

}  // namespace

StatusOr<std::unique_ptr<HttpServer>> StartHttpServer(const HttpServerOptions& options,
                                                      HttpHandler handler) {
  if (options.tls_cert_file.empty() != options.tls_key_file.empty()) {
    return InvalidArgument("http: TLS needs both --tls-cert and --tls-key");
  }
  if (options.threads < 1 || options.max_queued < 1) {
    return InvalidArgument("http: threads and max_queued must be at least 1");
  }
  std::shared_ptr<SSL_CTX> tls;
  if (!options.tls_cert_file.empty()) {
    PX_ASSIGN_OR_RETURN(tls, NewServerTlsContext(options.tls_cert_file, options.tls_key_file));
  }
  auto server = std::make_unique<HttplibServer>(options, std::move(handler), std::move(tls));
  PX_RETURN_IF_ERROR(server->Bind());
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
