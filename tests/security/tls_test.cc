// TLS on the Thrift control plane with real processes: a throwaway CA and
// server certificates made with the `openssl` CLI, parallax-coordinator and
// parallax-agent serving TLS (--tls-cert/--tls-key), the real CLI and tasks
// trusting the CA (--tls-ca, $PARALLAX_TLS_CA). See docs/RELIABILITY.md,
// "Security", and docs/OPERATIONS.md, "TLS".
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>

#include "tests/testing/build_paths.h"
#include "tests/testing/proc_scan.h"
#include "tests/testing/subprocess.h"
#include "tests/testing/temp_dir.h"

namespace parallax {
namespace {

using testing::ChildProcess;
using testing::LastLine;
using testing::RunProcess;
using testing::RunResult;
using Clock = std::chrono::steady_clock;

const std::string kBin = testing::BinDirOr(::parallax::testing::BuildBinDir());
constexpr char kOpenssl[] = "/usr/bin/openssl";

bool Contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

// A CA, a second CA nobody trusts, and server certificates, made once for
// the suite with the openssl CLI (EC keys: fast).
class Certificates {
 public:
  Certificates() {
    Make({"req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
          "-keyout", File("ca.key"), "-out", File("ca.pem"), "-days", "2", "-subj",
          "/CN=parallax-test-ca"});
    Make({"req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
          "-keyout", File("other-ca.key"), "-out", File("other-ca.pem"), "-days", "2", "-subj",
          "/CN=someone-else-ca"});
    Issue("server", "IP:127.0.0.1, DNS:localhost", "ca");
    Issue("wrong-name", "DNS:elsewhere.invalid", "ca");
    std::ofstream(File("garbage.pem")) << "this is not a certificate\n";
  }

  std::string File(const std::string& name) const { return dir_.File(name); }
  const std::string& error() const { return error_; }

 private:
  void Make(std::vector<std::string> args) {
    if (!error_.empty()) return;
    args.insert(args.begin(), kOpenssl);
    RunResult r = RunProcess(args, {}, 60'000);
    if (r.exit_code != 0) error_ = "openssl failed: " + r.err;
  }
  // <name>.key and <name>.pem, signed by <ca>, naming `san`.
  void Issue(const std::string& name, const std::string& san, const std::string& ca) {
    std::ofstream(File(name + ".ext")) << "subjectAltName = " << san << "\n";
    Make({"req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes", "-keyout",
          File(name + ".key"), "-out", File(name + ".csr"), "-subj", "/CN=" + name});
    Make({"x509", "-req", "-in", File(name + ".csr"), "-CA", File(ca + ".pem"), "-CAkey",
          File(ca + ".key"), "-CAcreateserial", "-days", "2", "-out", File(name + ".pem"),
          "-extfile", File(name + ".ext")});
  }

  testing::TempDir dir_;
  std::string error_;
};

class TlsTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (access(kOpenssl, X_OK) == 0) certs_ = new Certificates();
  }
  static void TearDownTestSuite() {
    delete certs_;
    certs_ = nullptr;
  }

  void SetUp() override {
    ASSERT_NE(certs_, nullptr) << kOpenssl << " is missing: run scripts/install-deps --test";
    ASSERT_TRUE(certs_->error().empty()) << certs_->error();
    mark_ = "PX_TEST_MARK=tls-" + std::to_string(getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name();
    secret_file_ = dir_.File("secret");
    std::ofstream(secret_file_) << "tls-test-secret-" << getpid() << "\n";
    chmod(secret_file_.c_str(), 0600);
  }
  void TearDown() override {
    agent_.reset();
    coordinator_.reset();
    testing::KillAllWithEnv({mark_});
  }

  static std::string Cert(const std::string& name) { return certs_->File(name); }

  std::vector<std::string> ServerTls(const std::string& cert = "server") const {
    return {"--tls-cert", Cert(cert + ".pem"), "--tls-key", Cert(cert + ".key")};
  }

  void StartCoordinator(const std::vector<std::string>& extra) {
    std::vector<std::string> argv = {kBin + "/parallax-coordinator",
                                     "--listen",
                                     "127.0.0.1:0",
                                     "--db",
                                     dir_.File("state.db"),
                                     "--port-file",
                                     dir_.File("port"),
                                     "--secret-file",
                                     secret_file_};
    argv.insert(argv.end(), extra.begin(), extra.end());
    coordinator_ = std::make_unique<ChildProcess>(argv, dir_.File("coordinator.log"));
    std::string port = testing::WaitForFileWord(dir_.File("port"), 20'000, coordinator_.get());
    ASSERT_FALSE(port.empty()) << testing::ReadWholeFile(dir_.File("coordinator.log"));
    address_ = "127.0.0.1:" + port;
  }

  // The CLI against the coordinator; `ca` empty: no --tls-ca.
  RunResult Cli(std::vector<std::string> args, const std::string& ca,
                const std::string& secret_file = "") {
    std::vector<std::string> argv = {kBin + "/parallax", "--coordinator", address_, "--secret-file",
                                     secret_file.empty() ? secret_file_ : secret_file};
    if (!ca.empty()) {
      argv.push_back("--tls-ca");
      argv.push_back(ca);
    }
    argv.insert(argv.end(), args.begin(), args.end());
    return RunProcess(argv, {}, 30'000);
  }

  std::string WriteJob(const std::string& name, int workers, int steps,
                       const std::string& arch = "allreduce") {
    std::string path = dir_.File(name);
    std::ofstream(path) << "[job]\nname = \"tls\"\nworkers = " << workers << "\narch = \"" << arch
                        << "\"\n"
                        << "[trainer]\nmodel = \"mlp\"\nsteps = " << steps << "\nbatch_size = 32\n"
                        << "[trainer.env]\nPX_TEST_MARK = \"" << mark_.substr(mark_.find('=') + 1)
                        << "\"\n"
                        << "[model]\nfeatures = 8\nclasses = 4\nhidden = [16]\n"
                        << "[optimizer.dense]\ntype = \"sgd\"\nlr = 0.1\n";
    return path;
  }

  std::string CoordinatorLog() const {
    return testing::ReadWholeFile(dir_.File("coordinator.log"));
  }

  static Certificates* certs_;
  testing::TempDir dir_;
  std::string mark_;
  std::string secret_file_;
  std::string address_;
  std::unique_ptr<ChildProcess> coordinator_;
  std::unique_ptr<ChildProcess> agent_;
};

Certificates* TlsTest::certs_ = nullptr;

TEST_F(TlsTest, ATlsClientSaysHelloSubmitsAndReadsStatus) {
  StartCoordinator(ServerTls());
  RunResult agents = Cli({"agents"}, Cert("ca.pem"));
  EXPECT_EQ(agents.exit_code, 0) << agents.err;

  RunResult submit = Cli({"submit", WriteJob("job.toml", 1, 5)}, Cert("ca.pem"));
  ASSERT_EQ(submit.exit_code, 0) << submit.err;
  std::string id = LastLine(submit.out);
  RunResult status = Cli({"status", id, "--json"}, Cert("ca.pem"));
  ASSERT_EQ(status.exit_code, 0) << status.err;
  nlohmann::json job = nlohmann::json::parse(status.out)["jobs"][0];
  EXPECT_EQ(std::to_string(job["id"].get<int64_t>()), id);
  EXPECT_EQ(job["name"], "tls");
  EXPECT_TRUE(Contains(CoordinatorLog(), "(TLS)")) << CoordinatorLog();
  // Clients that connected, asked and exited are routine: no warning each.
  std::istringstream log(CoordinatorLog());
  for (std::string line; std::getline(log, line);) EXPECT_NE(line.rfind("W ", 0), 0u) << line;
}

TEST_F(TlsTest, APlaintextClientIsRefusedAndTheCoordinatorServesOn) {
  StartCoordinator(ServerTls());
  RunResult plain = Cli({"submit", WriteJob("job.toml", 1, 5)}, "");
  EXPECT_NE(plain.exit_code, 0);
  EXPECT_TRUE(Contains(plain.err, "if it serves TLS")) << plain.err;
  EXPECT_TRUE(Contains(plain.err, "--tls-ca")) << plain.err;
  // The coordinator says what happened, and serves the next (TLS) client.
  EXPECT_TRUE(Contains(CoordinatorLog(), "does not speak TLS")) << CoordinatorLog();
  RunResult status = Cli({"status", "--json"}, Cert("ca.pem"));
  ASSERT_EQ(status.exit_code, 0) << status.err;
  EXPECT_TRUE(nlohmann::json::parse(status.out)["jobs"].empty()) << status.out;
}

TEST_F(TlsTest, AClientTrustingAnotherCaIsRefused) {
  StartCoordinator(ServerTls());
  RunResult other = Cli({"submit", WriteJob("job.toml", 1, 5)}, Cert("other-ca.pem"));
  EXPECT_EQ(other.exit_code, 1) << other.err;
  EXPECT_TRUE(Contains(other.err, "does not trust")) << other.err;
  EXPECT_TRUE(Contains(other.err, "other-ca.pem")) << other.err;
  RunResult status = Cli({"status", "--json"}, Cert("ca.pem"));
  ASSERT_EQ(status.exit_code, 0) << status.err;
  EXPECT_TRUE(nlohmann::json::parse(status.out)["jobs"].empty()) << status.out;
}

TEST_F(TlsTest, ACertificateThatDoesNotNameTheHostIsRefused) {
  StartCoordinator(ServerTls("wrong-name"));
  RunResult r = Cli({"status"}, Cert("ca.pem"));
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_TRUE(Contains(r.err, "does not name '127.0.0.1'")) << r.err;
}

TEST_F(TlsTest, ATlsClientOfAPlaintextCoordinatorIsToldToDropTls) {
  StartCoordinator({});
  RunResult r = Cli({"status"}, Cert("ca.pem"));
  EXPECT_NE(r.exit_code, 0);
  EXPECT_TRUE(Contains(r.err, "serves plaintext")) << r.err;
  RunResult plain = Cli({"status"}, "");
  EXPECT_EQ(plain.exit_code, 0) << plain.err;
}

TEST_F(TlsTest, TheSharedSecretStillAppliesOverTls) {
  StartCoordinator(ServerTls());
  std::string wrong = dir_.File("wrong-secret");
  std::ofstream(wrong) << "not-the-secret\n";
  chmod(wrong.c_str(), 0600);
  RunResult r = Cli({"submit", WriteJob("job.toml", 1, 5)}, Cert("ca.pem"), wrong);
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_TRUE(Contains(r.err, "authentication failed")) << r.err;
  RunResult status = Cli({"status", "--json"}, Cert("ca.pem"));
  ASSERT_EQ(status.exit_code, 0) << status.err;
  EXPECT_TRUE(nlohmann::json::parse(status.out)["jobs"].empty()) << status.out;
}

TEST_F(TlsTest, UnusableCertificateKeyOrCaFilesAreRefusedAtStart) {
  auto coordinator = [&](std::vector<std::string> tls) {
    std::vector<std::string> argv = {kBin + "/parallax-coordinator", "--listen", "127.0.0.1:0",
                                     "--db", dir_.File("refused.db")};
    argv.insert(argv.end(), tls.begin(), tls.end());
    return RunProcess(argv, {}, 30'000);
  };
  struct Case {
    std::vector<std::string> flags;
    std::string expected;
  };
  const std::vector<Case> cases = {
      {{"--tls-cert", dir_.File("missing.pem"), "--tls-key", Cert("server.key")},
       "--tls-cert '" + dir_.File("missing.pem") + "' cannot be read"},
      {{"--tls-cert", Cert("garbage.pem"), "--tls-key", Cert("server.key")},
       "holds no PEM certificate"},
      {{"--tls-cert", Cert("server.pem"), "--tls-key", Cert("garbage.pem")},
       "holds no PEM private key"},
      {{"--tls-cert", Cert("server.pem"), "--tls-key", Cert("other-ca.key")},
       "is not a usable private key for --tls-cert"},
      {{"--tls-cert", Cert("server.pem")}, "--tls-cert was given without --tls-key"},
  };
  for (const Case& c : cases) {
    RunResult r = coordinator(c.flags);
    EXPECT_EQ(r.exit_code, 2) << c.expected << "\n" << r.err;
    EXPECT_TRUE(Contains(r.err, c.expected)) << r.err;
  }
  // The agent refuses the same files, and a CA file that is not one.
  RunResult agent =
      RunProcess({kBin + "/parallax-agent", "--coordinator", "127.0.0.1:1", "--name", "a",
                  "--workdir", dir_.File("agent"), "--tls-ca", Cert("garbage.pem")},
                 {}, 30'000);
  EXPECT_EQ(agent.exit_code, 2) << agent.err;
  EXPECT_TRUE(Contains(agent.err, "--tls-ca '" + Cert("garbage.pem") + "' holds no PEM"))
      << agent.err;
  // So does the CLI, before connecting, whether the file comes from the flag
  // or the environment.
  address_ = "127.0.0.1:1";
  RunResult cli = Cli({"status"}, dir_.File("missing-ca.pem"));
  EXPECT_EQ(cli.exit_code, 2) << cli.err;
  EXPECT_TRUE(Contains(cli.err, "cannot be read")) << cli.err;
  RunResult env = RunProcess({kBin + "/parallax", "--coordinator", address_, "status"},
                             {"PARALLAX_TLS_CA=" + Cert("garbage.pem")}, 30'000);
  EXPECT_EQ(env.exit_code, 2) << env.err;
  EXPECT_TRUE(Contains(env.err, "PARALLAX_TLS_CA '")) << env.err;
}

// Every Thrift connection of a job over TLS: agent → coordinator, trainer
// ranks and a PS shard → coordinator (rendezvous, plan, CURVE keys,
// metrics), CLI → coordinator and CLI → the agent's log service. arch "ps"
// puts the model's variables on a shard, so a parallax-ps takes part.
TEST_F(TlsTest, AJobRunsEndToEndOverTlsAndItsLogsAreReadOverTls) {
  StartCoordinator(ServerTls());
  agent_ = std::make_unique<ChildProcess>(
      std::vector<std::string>{kBin + "/parallax-agent", "--coordinator", address_, "--name", "a",
                               "--workdir", dir_.File("agent"), "--slots", "2", "--heartbeat-ms",
                               "200", "--secret-file", secret_file_, "--tls-ca", Cert("ca.pem"),
                               "--tls-cert", Cert("server.pem"), "--tls-key", Cert("server.key"),
                               "--allow-env", "PX_TEST_*"},
      dir_.File("agent.log"), std::vector<std::string>{mark_});
  RunResult submit = Cli({"submit", WriteJob("job.toml", 2, 20, "ps")}, Cert("ca.pem"));
  ASSERT_EQ(submit.exit_code, 0) << submit.err;
  const std::string id = LastLine(submit.out);
  nlohmann::json job;
  auto deadline = Clock::now() + std::chrono::seconds(90);
  while (Clock::now() < deadline) {
    RunResult r = Cli({"status", id, "--json"}, Cert("ca.pem"));
    if (r.exit_code == 0) job = nlohmann::json::parse(r.out)["jobs"][0];
    if (!job.is_null() && (job["state"] == "SUCCEEDED" || job["state"] == "FAILED")) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  ASSERT_EQ(job["state"], "SUCCEEDED")
      << job.dump() << "\n"
      << CoordinatorLog() << testing::ReadWholeFile(dir_.File("agent.log"));
  EXPECT_GT(job["step"].get<int64_t>(), 0);  // rank 0's metrics came over TLS
  EXPECT_TRUE(Contains(testing::ReadWholeFile(dir_.File("agent.log")), "(TLS), coordinator"));

  RunResult logs = Cli({"logs", id, "--task", "trainer/1"}, Cert("ca.pem"));
  EXPECT_EQ(logs.exit_code, 0) << logs.err;
  EXPECT_FALSE(logs.out.empty());
  RunResult ps_logs = Cli({"logs", id, "--task", "ps/0"}, Cert("ca.pem"));
  EXPECT_EQ(ps_logs.exit_code, 0) << ps_logs.err;
  EXPECT_TRUE(Contains(ps_logs.out, "CURVE")) << ps_logs.out;
}

// `parallax run --tls-cert --tls-key --tls-ca`: the embedded daemons serve
// TLS and the rank reaches them with $PARALLAX_TLS_CA.
TEST_F(TlsTest, ParallaxRunRunsAJobOverTls) {
  RunResult r =
      RunProcess({kBin + "/parallax", "--secret-file", secret_file_, "--tls-ca", Cert("ca.pem"),
                  "run", "--state-dir", dir_.File("run"), "--tls-cert", Cert("server.pem"),
                  "--tls-key", Cert("server.key"), WriteJob("run.toml", 1, 10)},
                 {}, 120'000);
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_TRUE(Contains(r.out, "SUCCEEDED")) << r.out;
  EXPECT_TRUE(Contains(testing::ReadWholeFile(dir_.File("run/coordinator.log")), "(TLS)"));

  RunResult no_ca = RunProcess(
      {kBin + "/parallax", "run", "--state-dir", dir_.File("run2"), "--tls-cert",
       Cert("server.pem"), "--tls-key", Cert("server.key"), WriteJob("run2.toml", 1, 10)},
      {"PARALLAX_TLS_CA="}, 30'000);
  EXPECT_EQ(no_ca.exit_code, 2) << no_ca.err;
  EXPECT_TRUE(Contains(no_ca.err, "needs --tls-ca")) << no_ca.err;
}

}  // namespace
}  // namespace parallax
