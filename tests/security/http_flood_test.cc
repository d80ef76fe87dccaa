// Attacks on the coordinator's web server (--http, coordinator/web/http_server.h)
// from outside, as an attacker without the token would make them: clients
// that trickle half a request, idle connections beyond the server's cap,
// TLS handshakes that never finish, and a flood of unauthenticated requests.
// While each goes on, a scrape of /metrics and the jobs page with the token
// must be answered (a generous bound, not a speed target: the time is
// measured by bench/web_attack.py), the coordinator's memory must stay
// bounded, and /metrics must count what was cut. Each test prints the
// figures it saw (docs/RELIABILITY.md, "Security").
#include <gtest/gtest.h>
#include <httplib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <fstream>
#include <iostream>
#include <memory>
#include <thread>
#include <vector>

#include "tests/security/flood.h"
#include "tests/testing/build_paths.h"
#include "tests/testing/coordinator_process.h"
#include "tests/testing/subprocess.h"
#include "tests/testing/temp_dir.h"

namespace parallax {
namespace {

using testing::ConnectionFlood;
using testing::ProbeLog;
using Clock = std::chrono::steady_clock;

const std::string kBin = testing::BinDirOr(::parallax::testing::BuildBinDir());
constexpr char kSecret[] = "http-flood-test-secret-0123456789";
constexpr char kToken[] = "http-flood-test-web-token-9876543210";
// The failure bound of one honest scrape (connect, request, whole reply).
constexpr int kAnswerSeconds = 10;
// How long each attack is held while the honest client probes: past the
// web server's 5 s request deadline, so cut connections come back.
constexpr auto kAttackFor = std::chrono::seconds(12);
// The coordinator's resident memory may grow by at most this under attack.
constexpr int64_t kMemoryBound = int64_t{160} << 20;

class HttpFloodTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { testing::RaiseOwnFileLimit(); }

  void SetUp() override {
    secret_file_ = dir_.File("secret");
    std::ofstream(secret_file_) << kSecret << "\n";
    chmod(secret_file_.c_str(), 0600);
    token_file_ = dir_.File("web-token");
    std::ofstream(token_file_) << kToken << "\n";
    chmod(token_file_.c_str(), 0600);
  }

  // A coordinator with --http on loopback and the token; `extra` adds flags.
  void StartCoordinator(std::vector<std::string> extra = {}) {
    testing::CoordinatorProcessOptions options;
    // Enough descriptors for a thousand connections whatever this machine's
    // default (root may raise the hard limit).
    options.open_file_limit = 4'096;
    std::vector<std::string> args = {"--secret-file", secret_file_,       "--http",
                                     "127.0.0.1:0",   "--http-token-file", token_file_,
                                     "--http-port-file", dir_.File("http.port")};
    args.insert(args.end(), extra.begin(), extra.end());
    options.extra_args = args;
    coordinator_ = std::make_unique<testing::CoordinatorProcess>(kBin, dir_.path(), options);
    ASSERT_TRUE(coordinator_->ok()) << coordinator_->error();
    const std::string port = testing::WaitForFileWord(dir_.File("http.port"), 20'000,
                                                      coordinator_->process());
    ASSERT_FALSE(port.empty()) << coordinator_->Log();
    http_port_ = std::stoi(port);
  }

  // Makes a self-signed certificate for 127.0.0.1; the flags that serve it.
  std::vector<std::string> TlsFlags() {
    testing::RunResult made = testing::RunProcess(
        {"/usr/bin/openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt",
         "ec_paramgen_curve:prime256v1", "-nodes", "-keyout", dir_.File("key.pem"), "-out",
         dir_.File("cert.pem"), "-days", "2", "-subj", "/CN=127.0.0.1", "-addext",
         "subjectAltName=IP:127.0.0.1"},
        {}, 60'000);
    EXPECT_EQ(made.exit_code, 0) << made.err;
    tls_ = true;
    return {"--tls-cert", dir_.File("cert.pem"), "--tls-key", dir_.File("key.pem")};
  }

  // GET `path` with `token` ("" : none); the status (-1: no answer) and body.
  std::pair<int, std::string> Get(const std::string& path, const std::string& token) {
    auto ask = [&](httplib::ClientImpl& c) -> std::pair<int, std::string> {
      c.set_connection_timeout(kAnswerSeconds, 0);
      c.set_read_timeout(kAnswerSeconds, 0);
      c.set_write_timeout(kAnswerSeconds, 0);
      httplib::Headers headers;
      if (!token.empty()) headers.emplace("Authorization", "Bearer " + token);
      auto r = c.Get(path.c_str(), headers);
      if (!r) return {-1, httplib::to_string(r.error())};
      return {r->status, r->body};
    };
    if (tls_) {
      httplib::SSLClient c("127.0.0.1", http_port_);
      c.set_ca_cert_path(dir_.File("cert.pem").c_str());
      c.enable_server_certificate_verification(true);
      return ask(c);
    }
    httplib::ClientImpl c("127.0.0.1", http_port_);
    return ask(c);
  }

  // GET with the token, once more when the connection was closed before any
  // answer (at the cap, a connection that had not yet sent its request may
  // be the one closed to make room; a client connects again, within the
  // same bound).
  std::pair<int, std::string> GetWithToken(const std::string& path) {
    const auto give_up = Clock::now() + std::chrono::seconds(kAnswerSeconds);
    std::pair<int, std::string> got = Get(path, kToken);
    while (got.first == -1 && Clock::now() < give_up) {
      ++retries_;
      got = Get(path, kToken);
    }
    return got;
  }

  // An honest operator's exchange: a scrape of /metrics and the jobs page,
  // with the token. "" when both were answered 200.
  std::string Scrape() {
    auto [status, body] = GetWithToken("/metrics");
    if (status != 200) return "/metrics: " + std::to_string(status) + " " + body.substr(0, 200);
    if (body.find("parallax_http_connections") == std::string::npos) {
      return "/metrics without the web server's figures";
    }
    auto [page, html] = GetWithToken("/");
    if (page != 200) return "/: " + std::to_string(page) + " " + html.substr(0, 200);
    return "";
  }

  // The value of the sample line `name` on /metrics (-1 when absent).
  double MetricValue(const std::string& name) {
    auto [status, body] = GetWithToken("/metrics");
    if (status != 200) return -1;
    size_t at = body.find("\n" + name + " ");
    if (at == std::string::npos) return -1;
    return std::stod(body.substr(at + name.size() + 2));
  }

  // Probes while `attack` is held for kAttackFor; checks every scrape was
  // answered and memory stayed under kMemoryBound. Returns the probe log.
  ProbeLog ProbeUnderAttack(const std::string& what, const std::function<int()>& open_now) {
    const int pid = coordinator_->process()->pid();
    const auto until = Clock::now() + kAttackFor;
    int64_t peak = 0;
    int most_open = 0;
    ProbeLog log = testing::ProbeWhile(
        [&] {
          peak = std::max(peak, testing::ResidentBytes(pid) - base_rss_);
          most_open = std::max(most_open, open_now());
          return Clock::now() < until;
        },
        [&] { return Scrape(); }, 250, 10);
    std::cout << "[figures] web server, " << what << ": honest scrape (/metrics and /) max "
              << log.max_ms << " ms over " << log.probes << " probes; attacker connections "
              << most_open << " at most; coordinator memory +" << (peak >> 20) << " MiB; "
              << retries_ << " requests sent again after a close without an answer" << std::endl;
    EXPECT_TRUE(log.failures.empty()) << log.failures.front() << "\n" << coordinator_->Log();
    EXPECT_LT(log.max_ms, kAnswerSeconds * 1'000.0);
    EXPECT_LT(peak, kMemoryBound);
    return log;
  }

  void MeasureBase() {
    ASSERT_EQ(Scrape(), "");
    base_rss_ = testing::ResidentBytes(coordinator_->process()->pid());
  }

  testing::TempDir dir_;
  std::string secret_file_;
  std::string token_file_;
  std::unique_ptr<testing::CoordinatorProcess> coordinator_;
  int http_port_ = 0;
  bool tls_ = false;
  int64_t base_rss_ = 0;
  std::atomic<int> retries_{0};
};

// The attack that once made the pages unreachable with 40 connections: a
// thousand clients that each send half a request line and then a byte every
// 2 s, reconnecting when cut.
TEST_F(HttpFloodTest, AThousandTricklingClientsDoNotStopScrapes) {
  StartCoordinator({"--http-max-connections", "1100"});
  MeasureBase();
  ConnectionFlood flood(http_port_, 1'000, 1'000, {"GET /metrics HTTP/1.1\r\nHost: x\r\nX-A: "});
  ProbeUnderAttack("1000 trickling clients", [&] { return flood.opened() - flood.closed_by_server(); });
  const int opened = flood.opened();
  const int cut = flood.closed_by_server();
  flood.Close();
  EXPECT_GE(opened, 1'000);
  EXPECT_GT(cut, 0) << "no trickling connection was cut in " << kAttackFor.count() << " s";
  EXPECT_GT(MetricValue("parallax_http_connections_cut_total{reason=\"deadline\"}"), 0);
}

// Idle connections ten times the web server's cap: the oldest that sent
// nothing makes room for each new one, the honest scrape included.
TEST_F(HttpFloodTest, IdleConnectionsBeyondTheCapDoNotStopScrapes) {
  StartCoordinator({"--http-max-connections", "64"});
  MeasureBase();
  ConnectionFlood::Trickle idle;
  idle.period_ms = 500;
  idle.idle = true;
  ConnectionFlood flood(http_port_, 640, 1'000, idle);
  ProbeUnderAttack("640 idle connections at a cap of 64",
                   [&] { return flood.opened() - flood.closed_by_server(); });
  flood.Close();
  EXPECT_GT(MetricValue("parallax_http_connections_cut_total{reason=\"cap\"}"), 0);
  EXPECT_EQ(MetricValue("parallax_http_max_connections"), 64);
}

// TLS handshakes that never finish: a ClientHello's record header, then a
// byte every second.
TEST_F(HttpFloodTest, SlowTlsHandshakesDoNotStopScrapes) {
  StartCoordinator(TlsFlags());
  MeasureBase();
  const std::string hello_header("\x16\x03\x01\x02\x00\x01\x00\x01\xfc", 9);
  ConnectionFlood flood(http_port_, 500, 1'000, {hello_header, '\0', 1'000, true});
  ProbeUnderAttack("500 slow TLS handshakes",
                   [&] { return flood.opened() - flood.closed_by_server(); });
  const int cut = flood.closed_by_server();
  flood.Close();
  EXPECT_GT(cut, 0);
}

// Whole requests without the token, as fast as 8 clients can send them:
// each is answered 401 and costs the server nothing it keeps.
TEST_F(HttpFloodTest, UnauthenticatedRequestsDoNotStopScrapes) {
  StartCoordinator();
  MeasureBase();
  std::atomic<bool> stop{false};
  std::atomic<int> refused{0};
  std::atomic<int> other{0};
  std::vector<std::thread> attackers;
  for (int i = 0; i < 8; ++i) {
    attackers.emplace_back([&, i] {
      while (!stop) {
        auto [status, body] = Get(i % 2 == 0 ? "/metrics" : "/jobs/1", i < 4 ? "" : "wrong-token");
        (status == 401 ? refused : other)++;
      }
    });
  }
  ProbeUnderAttack("8 clients sending unauthenticated requests", [] { return 8; });
  stop = true;
  for (auto& t : attackers) t.join();
  std::cout << "[figures] unauthenticated requests answered 401: " << refused << ", otherwise: "
            << other << std::endl;
  EXPECT_GT(refused, 100);
  EXPECT_EQ(other, 0);
}

}  // namespace
}  // namespace parallax
