// The coordinator's HTTP server on loopback sockets: routing to the handler,
// the read-only token, TLS, and the bounds a hostile client meets (header
// floods, slow senders, many connections, descriptor exhaustion).
#include "coordinator/web/http_server.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <httplib.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <future>
#include <mutex>
#include <thread>

#include "tests/testing/connect_storm.h"
#include "tests/testing/free_port.h"
#include "tests/testing/subprocess.h"
#include "tests/testing/temp_dir.h"

namespace parallax::coordinator {
namespace {

using Clock = std::chrono::steady_clock;

// A raw TCP connection to 127.0.0.1:port (-1 on failure).
int Connect(int port) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

// Reads until the peer closes or `timeout` passes; returns what came.
std::string ReadUntilClosed(int fd, std::chrono::milliseconds timeout, bool* closed) {
  std::string got;
  const auto deadline = Clock::now() + timeout;
  *closed = false;
  while (Clock::now() < deadline) {
    pollfd p{fd, POLLIN, 0};
    if (poll(&p, 1, 50) <= 0) continue;
    char buf[4096];
    ssize_t n = recv(fd, buf, sizeof(buf), 0);
    if (n <= 0) {
      *closed = true;
      break;
    }
    got.append(buf, static_cast<size_t>(n));
  }
  return got;
}

class HttpServerTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { signal(SIGPIPE, SIG_IGN); }

  void Start(HttpServerOptions options = {}) {
    auto server = StartHttpServer(options, [this](const HttpRequest& r) { return Handle(r); });
    ASSERT_TRUE(server.ok()) << server.status().ToString();
    server_ = std::move(server).value();
  }

  HttpResponse Handle(const HttpRequest& r) {
    calls_++;
    if (hold_) {
      std::unique_lock<std::mutex> lock(mu_);
      ++running_;
      max_running_ = std::max(max_running_, running_);
      cv_.notify_all();
      cv_.wait(lock, [&] { return !hold_; });
      --running_;
    }
    HttpResponse res;
    res.body = r.method + " " + r.path;
    for (const auto& [k, v] : r.params) res.body += " " + k + "=" + v;
    return res;
  }

  void Release() {
    std::lock_guard<std::mutex> lock(mu_);
    hold_ = false;
    cv_.notify_all();
  }

  httplib::Client Client() {
    httplib::Client c("127.0.0.1", server_->port());
    c.set_read_timeout(10, 0);
    return c;
  }

  std::unique_ptr<HttpServer> server_;
  std::atomic<int> calls_{0};
  std::mutex mu_;
  std::condition_variable cv_;
  bool hold_ = false;    // guarded by mu_ (read unlocked only before requests start)
  int running_ = 0;      // guarded by mu_
  int max_running_ = 0;  // guarded by mu_
};

TEST_F(HttpServerTest, AnswersGetAndHeadWithDecodedParameters) {
  Start();
  auto c = Client();
  auto r = c.Get("/jobs/7?limit=5&name=a%20b");
  ASSERT_TRUE(r) << httplib::to_string(r.error());
  EXPECT_EQ(r->status, 200);
  EXPECT_EQ(r->body, "GET /jobs/7 limit=5 name=a b");
  EXPECT_NE(r->get_header_value("Content-Security-Policy").find("default-src 'none'"),
            std::string::npos);
  EXPECT_EQ(r->get_header_value("X-Content-Type-Options"), "nosniff");
  auto h = c.Head("/");
  ASSERT_TRUE(h);
  EXPECT_EQ(h->status, 200);
  EXPECT_TRUE(h->body.empty());
}

TEST_F(HttpServerTest, RefusesWritesWith405) {
  Start();
  auto c = Client();
  auto post = c.Post("/jobs", "x", "text/plain");
  ASSERT_TRUE(post);
  EXPECT_EQ(post->status, 405);
  EXPECT_EQ(post->get_header_value("Allow"), "GET, HEAD");
  auto del = c.Delete("/jobs/1");
  ASSERT_TRUE(del);
  EXPECT_EQ(del->status, 405);
  EXPECT_EQ(calls_, 0);
}

TEST_F(HttpServerTest, TokenIsRequiredAsBearerOrBasicPassword) {
  HttpServerOptions options;
  options.token = "s3cret-token";
  Start(options);
  auto c = Client();
  auto none = c.Get("/metrics");
  ASSERT_TRUE(none);
  EXPECT_EQ(none->status, 401);
  EXPECT_NE(none->get_header_value("WWW-Authenticate").find("Basic"), std::string::npos);
  auto wrong = c.Get("/metrics", {{"Authorization", "Bearer s3cret-tokeN"}});
  ASSERT_TRUE(wrong);
  EXPECT_EQ(wrong->status, 401);
  auto prefix = c.Get("/metrics", {{"Authorization", "Bearer s3cret"}});
  ASSERT_TRUE(prefix);
  EXPECT_EQ(prefix->status, 401);
  EXPECT_EQ(calls_, 0);

  auto bearer = c.Get("/metrics", {{"Authorization", "Bearer s3cret-token"}});
  ASSERT_TRUE(bearer);
  EXPECT_EQ(bearer->status, 200);
  c.set_basic_auth("anyone", "s3cret-token");
  auto basic = c.Get("/metrics");
  ASSERT_TRUE(basic);
  EXPECT_EQ(basic->status, 200);
  c.set_basic_auth("anyone", "s3cret-tokeX");
  auto bad_basic = c.Get("/metrics");
  ASSERT_TRUE(bad_basic);
  EXPECT_EQ(bad_basic->status, 401);
}

TEST_F(HttpServerTest, HugeQueryIs4xxAndServingGoesOn) {
  Start();
  auto c = Client();
  // Over httplib's URI limit, and over the whole request's limit.
  for (size_t size : {10'000, 100'000}) {
    auto r = c.Get("/?q=" + std::string(size, 'a'));
    ASSERT_TRUE(r) << size;
    EXPECT_EQ(r->status, 414) << size;
  }
  EXPECT_EQ(calls_, 0);
  auto ok = c.Get("/");
  ASSERT_TRUE(ok);
  EXPECT_EQ(ok->status, 200);
}

// httplib alone keeps every header line of a request in memory, without a
// limit; the server cuts the connection at max_request_bytes.
TEST_F(HttpServerTest, HeaderFloodIsCutOffAtTheRequestLimit) {
  HttpServerOptions options;
  options.max_request_bytes = 16 << 10;
  Start(options);
  int fd = Connect(server_->port());
  ASSERT_GE(fd, 0);
  std::string line = "X-Filler: " + std::string(100, 'a') + "\r\n";
  std::string chunk = "GET / HTTP/1.1\r\nHost: x\r\n";
  while (chunk.size() < (64 << 10)) chunk += line;
  size_t sent = 0;
  const size_t flood = size_t{64} << 20;
  while (sent < flood) {
    ssize_t n = send(fd, chunk.data(), chunk.size(), MSG_NOSIGNAL);
    if (n <= 0) break;
    sent += static_cast<size_t>(n);
    chunk = line;
    while (chunk.size() < (64 << 10)) chunk += line;
  }
  close(fd);
  EXPECT_LT(sent, flood) << "the server read 64 MiB of headers";
  EXPECT_EQ(calls_, 0);
  auto ok = Client().Get("/");
  ASSERT_TRUE(ok);
  EXPECT_EQ(ok->status, 200);
}

TEST_F(HttpServerTest, SlowSenderIsCutOffAtTheRequestTimeout) {
  HttpServerOptions options;
  options.request_timeout_ms = 300;
  Start(options);
  int fd = Connect(server_->port());
  ASSERT_GE(fd, 0);
  const auto start = Clock::now();
  bool closed = false;
  const std::string request = "GET / HTTP/1.1\r\nHost: x\r\nX-Slow: ";
  // One byte every 50 ms: each read succeeds, only the total deadline stops it.
  for (size_t i = 0; !closed && Clock::now() - start < std::chrono::seconds(20); ++i) {
    char byte = i < request.size() ? request[i] : 'a';
    if (send(fd, &byte, 1, MSG_NOSIGNAL) != 1) break;
    ReadUntilClosed(fd, std::chrono::milliseconds(50), &closed);
  }
  close(fd);
  EXPECT_LT(Clock::now() - start, std::chrono::seconds(10));
  EXPECT_EQ(calls_, 0);
}

// A client that asks for a large reply and never reads it holds its
// connection for write_timeout_ms, not for ever, and never a handler thread.
TEST_F(HttpServerTest, ReaderThatDoesNotReadIsCutOffAtTheWriteTimeout) {
  HttpServerOptions options;
  options.threads = 1;
  options.write_timeout_ms = 300;
  auto server = StartHttpServer(options, [](const HttpRequest& r) {
    HttpResponse res;
    if (r.path == "/big") res.body.assign(size_t{64} << 20, 'x');
    return res;
  });
  ASSERT_TRUE(server.ok());
  int port = (*server)->port();
  int fd = Connect(port);
  ASSERT_GE(fd, 0);
  const std::string request = "GET /big HTTP/1.1\r\nHost: x\r\n\r\n";
  ASSERT_EQ(send(fd, request.data(), request.size(), MSG_NOSIGNAL),
            static_cast<ssize_t>(request.size()));
  httplib::Client c("127.0.0.1", port);
  c.set_read_timeout(30, 0);
  const auto start = Clock::now();
  auto r = c.Get("/small");
  ASSERT_TRUE(r) << httplib::to_string(r.error());
  EXPECT_EQ(r->status, 200);
  EXPECT_LT(Clock::now() - start, std::chrono::seconds(20));
  // Past the write timeout the reply is cut: what the socket buffers held,
  // then the end, far short of 64 MiB.
  std::this_thread::sleep_for(std::chrono::milliseconds(600));
  bool closed = false;
  std::string got = ReadUntilClosed(fd, std::chrono::seconds(20), &closed);
  EXPECT_TRUE(closed);
  EXPECT_LT(got.size(), size_t{32} << 20);
  close(fd);
}

// A connection's deadline runs from accept, whatever else the server is
// doing: with the only handler thread held, trickling clients are still cut
// at request_timeout_ms and counted.
TEST_F(HttpServerTest, TricklersAreCutFromAcceptWhileTheHandlerIsBusy) {
  HttpServerOptions options;
  options.threads = 1;
  options.request_timeout_ms = 500;
  hold_ = true;
  Start(options);
  auto held = std::async(std::launch::async, [this] {
    auto r = Client().Get("/held");
    return r ? r->status : -1;
  });
  {
    std::unique_lock<std::mutex> lock(mu_);
    ASSERT_TRUE(cv_.wait_for(lock, std::chrono::seconds(20), [&] { return running_ == 1; }));
  }
  std::vector<int> tricklers;
  for (int i = 0; i < 20; ++i) {
    int fd = Connect(server_->port());
    ASSERT_GE(fd, 0);
    ASSERT_EQ(send(fd, "GET /", 5, MSG_NOSIGNAL), 5);
    tricklers.push_back(fd);
  }
  const auto start = Clock::now();
  int cut = 0;
  for (int fd : tricklers) {
    bool closed = false;
    for (int i = 0; i < 200 && !closed; ++i) {
      (void)!send(fd, "a", 1, MSG_NOSIGNAL);
      ReadUntilClosed(fd, std::chrono::milliseconds(50), &closed);
    }
    cut += closed;
    close(fd);
  }
  EXPECT_EQ(cut, 20);
  EXPECT_LT(Clock::now() - start, std::chrono::seconds(5));
  EXPECT_GE(server_->stats().closed_deadline, 20);
  Release();
  EXPECT_EQ(held.get(), 200);
}

// At the cap a new connection closes the oldest that has sent nothing, so
// an honest request is answered while idle connections fill the server.
TEST_F(HttpServerTest, AtTheCapTheOldestIdleConnectionMakesRoom) {
  HttpServerOptions options;
  options.max_connections = 8;
  options.request_timeout_ms = 60'000;
  Start(options);
  std::vector<int> idle;
  for (int i = 0; i < 8; ++i) {
    int fd = Connect(server_->port());
    ASSERT_GE(fd, 0);
    idle.push_back(fd);
  }
  // Wait until the server holds all eight (accepted in order).
  for (int i = 0; i < 200 && server_->stats().open < 8; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ASSERT_EQ(server_->stats().open, 8);
  auto r = Client().Get("/honest");
  ASSERT_TRUE(r) << httplib::to_string(r.error());
  EXPECT_EQ(r->status, 200);
  EXPECT_EQ(r->body, "GET /honest");
  const HttpServerStats stats = server_->stats();
  EXPECT_GE(stats.closed_at_cap, 1);
  EXPECT_EQ(stats.max_connections, 8);
  bool closed = false;
  ReadUntilClosed(idle[0], std::chrono::seconds(5), &closed);
  EXPECT_TRUE(closed) << "the oldest idle connection was not the one closed";
  for (int fd : idle) close(fd);
}

// A handler that throws (anything) costs its request a 500, never the
// server one of its handler slots: with one slot, the next request is answered.
TEST_F(HttpServerTest, AThrowingHandlerGivesBackItsSlot) {
  HttpServerOptions options;
  options.threads = 1;
  auto server = StartHttpServer(options, [](const HttpRequest& r) -> HttpResponse {
    if (r.path == "/throw-int") throw 42;
    if (r.path == "/throw-std") throw std::runtime_error("broken");
    return HttpResponse{};
  });
  ASSERT_TRUE(server.ok());
  httplib::Client c("127.0.0.1", (*server)->port());
  c.set_read_timeout(10, 0);
  for (const char* path : {"/throw-int", "/throw-std", "/throw-int"}) {
    auto r = c.Get(path);
    ASSERT_TRUE(r) << path;
    EXPECT_EQ(r->status, 500) << path;
  }
  auto ok = c.Get("/fine");
  ASSERT_TRUE(ok);
  EXPECT_EQ(ok->status, 200);
}

TEST_F(HttpServerTest, ServesAtMostThreadsConnectionsAtOnceAndAnswersAll) {
  HttpServerOptions options;
  options.threads = 2;
  hold_ = true;
  Start(options);
  std::vector<std::future<int>> replies;
  for (int i = 0; i < 8; ++i) {
    replies.push_back(std::async(std::launch::async, [this] {
      auto r = Client().Get("/");
      return r ? r->status : -1;
    }));
  }
  {
    std::unique_lock<std::mutex> lock(mu_);
    ASSERT_TRUE(cv_.wait_for(lock, std::chrono::seconds(20), [&] { return running_ == 2; }));
  }
  Release();
  for (auto& f : replies) EXPECT_EQ(f.get(), 200);
  EXPECT_EQ(max_running_, 2);
  EXPECT_EQ(calls_, 8);
}

TEST_F(HttpServerTest, KeepsServingAfterRunningOutOfDescriptors) {
  Start();
  rlimit old{};
  ASSERT_EQ(getrlimit(RLIMIT_NOFILE, &old), 0);
  int client = Connect(server_->port());  // served before the limit bites
  ASSERT_GE(client, 0);
  close(client);
  // Fill the table up to a lowered limit, then connect: the kernel completes
  // the handshake, the server's accept() fails with EMFILE.
  int probe = open("/dev/null", O_RDONLY | O_CLOEXEC);
  ASSERT_GE(probe, 0);
  close(probe);
  rlimit low = old;
  low.rlim_cur = static_cast<rlim_t>(probe) + 8;
  ASSERT_EQ(setrlimit(RLIMIT_NOFILE, &low), 0);
  client = Connect(server_->port());
  std::vector<int> fillers;
  while (true) {
    int fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
    if (fd < 0) break;
    fillers.push_back(fd);
  }
  std::string request = "GET /after HTTP/1.1\r\nHost: x\r\n\r\n";
  bool sent = client >= 0 && send(client, request.data(), request.size(), MSG_NOSIGNAL) ==
                                 static_cast<ssize_t>(request.size());
  for (int fd : fillers) close(fd);
  ASSERT_EQ(setrlimit(RLIMIT_NOFILE, &old), 0);
  ASSERT_TRUE(sent);
  bool closed = false;
  std::string reply = ReadUntilClosed(client, std::chrono::seconds(20), &closed);
  close(client);
  // The connection that arrived while the descriptors were gone was either
  // shed unanswered (and counted) or served once they were back; it never
  // hangs.
  EXPECT_TRUE(closed);
  if (reply.empty()) {
    EXPECT_GE(server_->stats().refused, 1);
  } else {
    EXPECT_NE(reply.find("200 OK"), std::string::npos) << reply;
    EXPECT_NE(reply.find("GET /after"), std::string::npos) << reply;
  }
  auto ok = Client().Get("/");
  ASSERT_TRUE(ok);
  EXPECT_EQ(ok->status, 200);
}

TEST_F(HttpServerTest, StopCutsAConnectionInFlight) {
  HttpServerOptions options;
  options.request_timeout_ms = 60'000;
  Start(options);
  int fd = Connect(server_->port());
  ASSERT_GE(fd, 0);
  std::string partial = "GET / HTTP/1.1\r\nHost: x\r\n";  // never finished
  ASSERT_EQ(send(fd, partial.data(), partial.size(), MSG_NOSIGNAL),
            static_cast<ssize_t>(partial.size()));
  // Connections are accepted in order: once a later one is answered, the
  // first is being served (or queued).
  ASSERT_TRUE(Client().Get("/"));
  const auto start = Clock::now();
  server_->Stop();
  EXPECT_LT(Clock::now() - start, std::chrono::seconds(10));
  close(fd);
}

TEST_F(HttpServerTest, ServesTlsOnlyWithACertificate) {
  testing::TempDir dir;
  testing::RunResult made =
      testing::RunProcess({"/usr/bin/openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt",
                           "ec_paramgen_curve:prime256v1", "-nodes", "-keyout", dir.File("key.pem"),
                           "-out", dir.File("cert.pem"), "-days", "2", "-subj", "/CN=127.0.0.1",
                           "-addext", "subjectAltName=IP:127.0.0.1"},
                          {}, 60'000);
  ASSERT_EQ(made.exit_code, 0) << made.err;
  HttpServerOptions options;
  options.tls_cert_file = dir.File("cert.pem");
  options.tls_key_file = dir.File("key.pem");
  Start(options);

  httplib::SSLClient tls("127.0.0.1", server_->port());
  tls.set_ca_cert_path(dir.File("cert.pem").c_str());
  tls.enable_server_certificate_verification(true);
  auto r = tls.Get("/over-tls");
  ASSERT_TRUE(r) << httplib::to_string(r.error());
  EXPECT_EQ(r->status, 200);
  EXPECT_EQ(r->body, "GET /over-tls");

  auto plain = Client().Get("/");
  EXPECT_FALSE(plain && plain->status == 200);
  EXPECT_EQ(calls_, 1);
}

TEST_F(HttpServerTest, BadCertificateIsRefusedNamingTheFile) {
  testing::TempDir dir;
  {
    FILE* f = fopen(dir.File("junk.pem").c_str(), "w");
    fputs("not a certificate\n", f);
    fclose(f);
  }
  HttpServerOptions options;
  options.tls_cert_file = dir.File("junk.pem");
  options.tls_key_file = dir.File("junk.pem");
  auto server = StartHttpServer(options, [](const HttpRequest&) { return HttpResponse{}; });
  ASSERT_FALSE(server.ok());
  EXPECT_NE(server.status().message().find("junk.pem"), std::string::npos);
}

// Connections that arrive as the server starts are served on threads that
// may run before StartHttpServer returns; they once read the server's
// acceptor before it was stored (SIGSEGV).
TEST(HttpServerStartTest, ConnectionsArrivingAsTheServerStartsAreServed) {
  const int port = testing::FreePort();
  ASSERT_GT(port, 0);
  testing::ConnectStorm storm(port);
  for (int i = 0; i < 100; ++i) {
    HttpServerOptions options;
    options.port = port;
    auto server = StartHttpServer(options, [](const HttpRequest&) { return HttpResponse{}; });
    ASSERT_TRUE(server.ok()) << server.status().ToString();
    (*server)->Stop();
  }
  EXPECT_GT(storm.connected(), 0) << "no connection reached the server: the test tested nothing";
}

TEST(HttpLoopbackTest, KnowsLoopbackAddresses) {
  for (const char* h : {"127.0.0.1", "127.1.2.3", "::1", "[::1]", "localhost"}) {
    EXPECT_TRUE(IsLoopbackHost(h)) << h;
  }
  for (const char* h : {"0.0.0.0", "10.0.0.1", "::", "example.com", ""}) {
    EXPECT_FALSE(IsLoopbackHost(h)) << h;
  }
}

}  // namespace
}  // namespace parallax::coordinator
