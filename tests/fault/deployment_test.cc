// The deployment docs/OPERATIONS.md describes ("Installing a cluster"), run
// as written on three "hosts" (network namespaces on a bridge,
// tests/testing/net_hosts.h), each with its own host name (a UTS namespace):
// the coordinator on one, an agent on each of the two others. Every daemon
// is started as its systemd unit (packaging/systemd/) would start it: the
// unit's ExecStart= line, expanded with the settings of the /etc/default
// file that OPERATIONS.md shows (read from OPERATIONS.md itself, so the
// documented configuration cannot drift from one that works). Only paths
// move: /usr/bin to this build's bin/, /etc/parallax and /var/lib to a
// directory per host. One shared secret, TLS everywhere (a CA and a
// certificate per host made with the openssl CLI as OPERATIONS.md shows).
//
// Then, as an operator would: a 4-rank hybrid job (2 ranks and a PS shard
// per host) SUCCEEDED on the first try; the agent of the second host is
// killed (SIGKILL) and restarted by the same command while the ranks wait,
// and registers again at once; `parallax logs -f` of a rank on that host
// follows its log across the restart; the job ends in its first attempt
// and exports the checkpoint of its last step. A job whose checkpoint
// directory the hosts lack is submitted with a warning and refused by the
// agents, naming what is missing.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>

#include "tests/fault/fault_cluster.h"
#include "tests/testing/build_paths.h"
#include "tests/testing/net_hosts.h"
#include "tests/testing/proc_scan.h"
#include "tests/testing/subprocess.h"
#include "tests/testing/temp_dir.h"

namespace parallax::testing {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

const std::string kBin = ::parallax::testing::BuildBinDir();
const std::string kSource = ::parallax::testing::SourceDir();
const char* const kOpenssl = "/usr/bin/openssl";
const char* const kUnshare = "/usr/bin/unshare";

using Env = std::map<std::string, std::string>;

// The fenced ```sh block of docs/OPERATIONS.md whose first line is
// `first_line` ("# /etc/default/parallax-agent"), as NAME=value settings the
// way systemd's EnvironmentFile= reads them: comments skipped, one level of
// double quotes removed.
Env DocumentedSettings(const std::string& first_line) {
  std::ifstream in(kSource + "/docs/OPERATIONS.md");
  Env env;
  bool inside = false;
  for (std::string line; std::getline(in, line);) {
    if (!inside) {
      inside = line == first_line;
      continue;
    }
    if (line.rfind("```", 0) == 0) break;
    if (line.empty() || line[0] == '#') continue;
    const size_t eq = line.find('=');
    if (eq == std::string::npos) continue;
    std::string value = line.substr(eq + 1);
    if (value.size() >= 2 && value.front() == '"' && value.back() == '"') {
      value = value.substr(1, value.size() - 2);
    }
    env[line.substr(0, eq)] = value;
  }
  return env;
}

// `text` with the install's paths moved under `root`, and this build's bin/.
std::string Relocate(std::string text, const std::string& root) {
  for (auto [from, to] : {std::pair<std::string, std::string>{"/usr/bin/", kBin + "/"},
                          {"/etc/parallax/", root + "/etc/parallax/"},
                          {"/var/lib/", root + "/var/lib/"}}) {
    for (size_t at = 0; (at = text.find(from, at)) != std::string::npos; at += to.size()) {
      text.replace(at, from.size(), to);
    }
  }
  return text;
}

// The unit's ExecStart= argv as systemd runs it: ${NAME} is one word, $NAME
// splits at spaces, %H is the host name; the unit's own paths relocated to
// `root` (the settings in `env` already are).
std::vector<std::string> ExecStart(const std::string& unit, const Env& env,
                                   const std::string& hostname, const std::string& root) {
  std::ifstream in(kSource + "/packaging/systemd/" + unit);
  std::string command;
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("ExecStart=", 0) == 0) command = line.substr(10);
  }
  std::vector<std::string> argv;
  std::istringstream words(command);
  for (std::string word; words >> word;) {
    auto value = [&](const std::string& name) {
      auto it = env.find(name);
      return it == env.end() ? std::string() : it->second;
    };
    if (word.rfind("${", 0) == 0 && word.back() == '}') {
      argv.push_back(value(word.substr(2, word.size() - 3)));
    } else if (word[0] == '$') {
      std::istringstream split(value(word.substr(1)));
      for (std::string part; split >> part;) argv.push_back(part);
    } else {
      argv.push_back(word == "%H" ? hostname : Relocate(word, root));
    }
  }
  return argv;
}

class DeploymentTest : public ::testing::Test {
 protected:
  static constexpr size_t kCoordinatorHost = 0;

  void SetUp() override {
    if (geteuid() != 0) GTEST_SKIP() << "needs root for ip netns (euid " << geteuid() << ")";
    ASSERT_EQ(access(kOpenssl, X_OK), 0) << kOpenssl << " is missing: run scripts/install-deps --test";
    ASSERT_EQ(access(kUnshare, X_OK), 0) << kUnshare << " is missing: run scripts/install-deps --test";
    if (std::string failed = net_.Create(); !failed.empty()) {
      GTEST_SKIP() << "the sandbox refused `" << failed << "`";
    }
    coordinator_address_ = net_.Host(kCoordinatorHost) + ":7070";
    MakeSecretsAndCertificates();
  }

  void TearDown() override {
    cli_follow_.reset();
    agents_.clear();
    coordinator_.reset();
    KillAllWithEnv({Marker()});
  }

  std::string Marker() const { return "PX_DEPLOYMENT_TEST=" + dir_.path(); }
  std::string Root(size_t host) const { return dir_.File("host" + std::to_string(host)); }
  std::string Hostname(size_t host) const { return "px-host-" + std::to_string(host); }

  void Openssl(std::vector<std::string> args) {
    args.insert(args.begin(), kOpenssl);
    RunResult r = RunProcess(args, {}, 60'000);
    ASSERT_EQ(r.exit_code, 0) << "openssl failed: " << r.err;
  }

  // One CA; per host a certificate naming its host name and address (the
  // commands of OPERATIONS.md, "TLS"), the CA and the one secret, all in
  // its /etc/parallax.
  void MakeSecretsAndCertificates() {
    Openssl({"req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
             "-nodes", "-keyout", dir_.File("ca.key"), "-out", dir_.File("ca.pem"), "-days", "2",
             "-subj", "/CN=parallax cluster CA"});
    std::ofstream(dir_.File("secret")) << "deployment-test-secret-" << getpid() << "\n";
    for (size_t h = 0; h < net_.size(); ++h) {
      const std::string etc = Root(h) + "/etc/parallax/";
      fs::create_directories(etc);
      fs::copy_file(dir_.File("ca.pem"), etc + "ca.pem");
      fs::copy_file(dir_.File("secret"), etc + "secret");
      chmod((etc + "secret").c_str(), 0600);
      std::ofstream(etc + "host.ext")
          << "subjectAltName = DNS:" << Hostname(h) << ", IP:" << net_.Host(h) << "\n";
      Openssl({"req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
               "-keyout", etc + "host.key", "-out", etc + "host.csr", "-subj",
               "/CN=" + Hostname(h)});
      Openssl({"x509", "-req", "-in", etc + "host.csr", "-CA", dir_.File("ca.pem"), "-CAkey",
               dir_.File("ca.key"), "-CAcreateserial", "-days", "2", "-out", etc + "host.pem",
               "-extfile", etc + "host.ext"});
      chmod((etc + "host.key").c_str(), 0600);
    }
    chmod(dir_.File("secret").c_str(), 0600);
  }

  // `unit`'s ExecStart= on `host`, with the documented settings, inside the
  // host's network namespace under its own host name.
  std::unique_ptr<ChildProcess> StartUnit(size_t host, const std::string& unit, Env env,
                                          const std::string& log) {
    for (auto& [name, value] : env) value = Relocate(value, Root(host));
    std::vector<std::string> command = ExecStart(unit, env, Hostname(host), Root(host));
    std::string script = "hostname " + Hostname(host) + " && exec";
    for (const std::string& word : command) script += " '" + word + "'";
    std::vector<std::string> argv =
        net_.InHost(host, {kUnshare, "--uts", "/bin/sh", "-c", script});
    std::vector<std::string> environment = {Marker()};
    for (const auto& [name, value] : env) environment.push_back(name + "=" + value);
    return std::make_unique<ChildProcess>(argv, dir_.File(log), environment);
  }

  void StartCoordinator() {
    Env env = DocumentedSettings("# /etc/default/parallax-coordinator");
    ASSERT_EQ(env["PARALLAX_LISTEN"], "0.0.0.0:7070") << "docs/OPERATIONS.md changed?";
    coordinator_ =
        StartUnit(kCoordinatorHost, "parallax-coordinator.service", env, "coordinator.log");
  }

  void StartAgent(size_t host) {
    Env env = DocumentedSettings("# /etc/default/parallax-agent");
    ASSERT_EQ(env["PARALLAX_COORDINATOR"], "coord-host:7070") << "docs/OPERATIONS.md changed?";
    env["PARALLAX_COORDINATOR"] = coordinator_address_;  // no DNS between the namespaces
    // Test-only: the ranks' pause switch (tests/trainer/tiny_trainer.h).
    env["PARALLAX_AGENT_ARGS"] += " --allow-env TINY_*";
    agents_[host] = StartUnit(host, "parallax-agent.service", env,
                              "agent-" + std::to_string(host) + ".log");
  }

  // The CLI in the root namespace, as a user with the secret and the CA.
  RunResult Cli(std::vector<std::string> args, int timeout_ms = 30'000) {
    std::vector<std::string> argv = {kBin + "/parallax", "--coordinator", coordinator_address_,
                                     "--secret-file", dir_.File("secret"), "--tls-ca",
                                     dir_.File("ca.pem")};
    argv.insert(argv.end(), args.begin(), args.end());
    return RunProcess(argv, {}, timeout_ms);
  }

  // `parallax agents --json` once both agents are alive; null on timeout.
  nlohmann::json WaitForAgents(int timeout_ms) {
    const auto deadline = Clock::now() + std::chrono::milliseconds(timeout_ms);
    while (Clock::now() < deadline) {
      RunResult r = Cli({"agents", "--json"}, 10'000);
      if (r.exit_code == 0) {
        nlohmann::json agents = nlohmann::json::parse(r.out)["agents"];
        int alive = 0;
        for (const auto& a : agents) alive += a["alive"].get<bool>() ? 1 : 0;
        if (alive == 2) return agents;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    return nullptr;
  }

  std::string Logs() {
    std::string out;
    for (const auto& e : fs::directory_iterator(dir_.path())) {
      if (e.path().extension() == ".log") {
        out += "== " + e.path().string() + "\n" + ReadWholeFile(e.path().string());
      }
    }
    for (const auto& e : fs::recursive_directory_iterator(dir_.path())) {
      if (e.path().filename() == "task.log") {
        out += "== " + e.path().string() + "\n" + ReadWholeFile(e.path().string());
      }
    }
    return out;
  }

  std::string SubmitJob() {
    const std::string path = dir_.File("job.toml");
    std::ofstream(path) << "[job]\nname = \"deploy\"\nworkers = 4\narch = \"hybrid\"\n"
                        << "max_restarts = 0\n[trainer]\ncommand = [\"" << kBin
                        << "/trainer_test_rank\", \"" << dir_.File("rank{rank}.out")
                        << "\", \"25\", \"32\"]\nsteps = 25\ncheckpoint_every = 10\n"
                        << "checkpoint_dir = \"" << dir_.File("shared/ckpt") << "\"\n"
                        << "metrics_every = 5\n[trainer.env]\nTINY_PAUSE_AT = \"step:15\"\n"
                        << "TINY_PAUSE_DIR = \"" << dir_.File("pause") << "\"\n"
                        << "[optimizer.dense]\ntype = \"sgd\"\nlr = 0.1\n"
                        << "[optimizer.sparse]\ntype = \"adagrad\"\nlr = 0.1\n"
                        << "[ps]\nshards = 2\n[[variable]]\nname = \"emb\"\npath = \"ps\"\n"
                        // All-reduced (where the planner's default figures would put
                        // this small model's dense weights on the PS too, which turns
                        // local aggregation off): hybrid, with local aggregation.
                        << "[[variable]]\nname = \"w\"\npath = \"allreduce\"\n";
    fs::create_directories(dir_.File("shared"));
    fs::create_directories(dir_.File("pause"));
    RunResult r = Cli({"submit", path});
    EXPECT_EQ(r.exit_code, 0) << r.err << Logs();
    return r.exit_code == 0 ? LastLine(r.out) : "";
  }

  nlohmann::json JobStatus(const std::string& id) {
    RunResult r = Cli({"status", id, "--json"}, 10'000);
    return r.exit_code == 0 ? nlohmann::json::parse(r.out)["jobs"][0] : nlohmann::json();
  }

  TempDir dir_;
  NetHosts net_{NetHostsOptions{.hosts = 3}};
  std::string coordinator_address_;
  std::unique_ptr<ChildProcess> coordinator_;
  std::map<size_t, std::unique_ptr<ChildProcess>> agents_;
  std::unique_ptr<ChildProcess> cli_follow_;
};

TEST_F(DeploymentTest, TheDocumentedClusterRunsAHybridJobAcrossAnAgentRestart) {
  const auto started = Clock::now();
  StartCoordinator();
  StartAgent(1);
  StartAgent(2);
  nlohmann::json agents = WaitForAgents(30'000);
  ASSERT_FALSE(agents.is_null()) << Logs();
  for (const auto& a : agents) {
    // Registered under the host name (%H), at the host's address, nothing on loopback.
    const std::string name = a["name"];
    const size_t host = name == Hostname(1) ? 1 : 2;
    EXPECT_EQ(name, Hostname(host));
    EXPECT_EQ(a["address"], net_.Host(host) + ":7071") << a.dump();
    EXPECT_EQ(a["warning"], "") << a.dump();
  }

  const std::string id = SubmitJob();
  ASSERT_FALSE(id.empty());
  for (int r = 0; r < 4; ++r) {
    ASSERT_TRUE(WaitForFile(dir_.File("pause/paused-rank" + std::to_string(r)), 60'000))
        << "rank " << r << "\n"
        << Logs();
  }
  // Two ranks and a shard on each host (`parallax status JOB`'s task table:
  // TASK ATTEMPT AGENT STATE EXIT).
  RunResult status = Cli({"status", id});
  ASSERT_EQ(status.exit_code, 0) << status.err;
  std::map<std::string, int> trainers_on, shards_on;
  std::string followed;  // a trainer on host 2, whose agent is restarted
  std::istringstream table(status.out);
  for (std::string line; std::getline(table, line);) {
    std::istringstream words(line);
    std::string task, attempt, agent;
    words >> task >> attempt >> agent;
    if (task.rfind("ps/", 0) == 0) ++shards_on[agent];
    if (task.rfind("trainer/", 0) != 0) continue;
    ++trainers_on[agent];
    if (agent == Hostname(2)) followed = task;
  }
  EXPECT_EQ(trainers_on[Hostname(1)], 2) << status.out;
  EXPECT_EQ(trainers_on[Hostname(2)], 2) << status.out;
  EXPECT_EQ(shards_on[Hostname(1)], 1) << status.out;
  EXPECT_EQ(shards_on[Hostname(2)], 1) << status.out;
  EXPECT_NE(status.out.find("local aggregation: on"), std::string::npos) << status.out;
  ASSERT_FALSE(followed.empty()) << status.out;

  // Follow a remote log over TLS, then kill and restart that host's agent.
  cli_follow_ = std::make_unique<ChildProcess>(
      std::vector<std::string>{kBin + "/parallax", "--coordinator", coordinator_address_,
                               "--secret-file", dir_.File("secret"), "--tls-ca",
                               dir_.File("ca.pem"), "logs", id, "--task", followed, "-f"},
      dir_.File("follow.log"));
  // Killed once the follower has read the log so far (it holds a
  // connection to the agent).
  for (auto deadline = Clock::now() + std::chrono::seconds(20);
       ReadWholeFile(dir_.File("follow.log")).find("started with plan") == std::string::npos;) {
    ASSERT_LT(Clock::now(), deadline) << ReadWholeFile(dir_.File("follow.log"));
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  agents_[2]->Signal(SIGKILL);
  agents_[2]->Wait(10'000);
  const auto restarted = Clock::now();
  StartAgent(2);
  // The restarted agent registers again (its log is appended to): at once,
  // not after the coordinator's agent timeout (10 s) refused it.
  auto registrations = [&] {
    const std::string log = ReadWholeFile(dir_.File("agent-2.log"));
    const std::string line = "registered as agent '" + Hostname(2) + "'";
    int n = 0;
    for (size_t at = 0; (at = log.find(line, at)) != std::string::npos; at += line.size()) ++n;
    return n;
  };
  while (registrations() < 2 && Clock::now() - restarted < std::chrono::seconds(20)) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  ASSERT_EQ(registrations(), 2) << Logs();
  ASSERT_FALSE(WaitForAgents(20'000).is_null()) << Logs();
  const double back_s = std::chrono::duration<double>(Clock::now() - restarted).count();
  std::cout << "restarted agent registered again after " << back_s << " s\n";
  EXPECT_LT(back_s, 10.0) << "a restarted agent must not wait out the agent timeout";
  EXPECT_EQ(ReadWholeFile(dir_.File("agent-2.log")).find("refused to register"),
            std::string::npos)
      << Logs();

  std::ofstream(dir_.File("pause/go")) << "go\n";
  nlohmann::json end;
  for (auto deadline = Clock::now() + std::chrono::seconds(60); Clock::now() < deadline;) {
    end = JobStatus(id);
    if (end.contains("state") && (end["state"] == "SUCCEEDED" || end["state"] == "FAILED")) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  ASSERT_EQ(end["state"], "SUCCEEDED") << end.dump() << "\n" << Logs();
  EXPECT_EQ(end["attempt"], 1) << end.dump();

  // The follower rode out the restart and ended with the task.
  ASSERT_EQ(cli_follow_->Wait(30'000), 0) << ReadWholeFile(dir_.File("follow.log"));
  const std::string followed_log = ReadWholeFile(dir_.File("follow.log"));
  EXPECT_NE(followed_log.find("lost agent \"" + Hostname(2) + "\""), std::string::npos)
      << followed_log;
  EXPECT_NE(followed_log.find("rank " + followed.substr(8) + " done"), std::string::npos)
      << followed_log;

  // 25 steps, checkpoint_every = 10: the last step's checkpoint is exported.
  RunResult exported = Cli({"export", id, "--out", dir_.File("export")}, 60'000);
  ASSERT_EQ(exported.exit_code, 0) << exported.err;
  EXPECT_EQ(nlohmann::json::parse(ReadWholeFile(dir_.File("export/manifest.json")))["step"], 25);

  // Data or a checkpoint directory missing on the hosts: submitting only
  // warns (the submitting host need not have them), and the agents refuse
  // the ranks unrun, saying which paths their host lacks.
  const std::string bad = dir_.File("bad.toml");
  std::string text = ReadWholeFile(dir_.File("job.toml"));
  text.replace(text.find(dir_.File("shared/ckpt")), dir_.File("shared/ckpt").size(),
               "/nonexistent-px-share/ckpt");
  std::ofstream(bad) << text;
  RunResult submitted = Cli({"submit", bad});
  ASSERT_EQ(submitted.exit_code, 0) << submitted.err;
  EXPECT_NE(submitted.err.find("warning: " + bad + ":"), std::string::npos) << submitted.err;
  EXPECT_NE(submitted.err.find("submitting anyway"), std::string::npos) << submitted.err;
  const std::string bad_id = LastLine(submitted.out);
  nlohmann::json failed;
  for (auto deadline = Clock::now() + std::chrono::seconds(30); Clock::now() < deadline;) {
    failed = JobStatus(bad_id);
    if (failed.contains("state") && failed["state"] == "FAILED") break;
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  ASSERT_EQ(failed["state"], "FAILED") << failed.dump();
  RunResult why = Cli({"status", bad_id});
  EXPECT_NE(why.out.find("paths the job names are missing here"), std::string::npos) << why.out;
  EXPECT_NE(why.out.find("/nonexistent-px-share"), std::string::npos) << why.out;

  // Nothing of this was a warning in the coordinator's log.
  std::istringstream log(ReadWholeFile(dir_.File("coordinator.log")));
  for (std::string line; std::getline(log, line);) EXPECT_NE(line.rfind("W ", 0), 0u) << line;
  const double total_s = std::chrono::duration<double>(Clock::now() - started).count();
  std::cout << "deployment test: " << total_s << " s\n";
  RecordProperty("seconds", std::to_string(total_s));
}

}  // namespace
}  // namespace parallax::testing
