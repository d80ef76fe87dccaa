#include "tests/fault/fault_cluster.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sqlite3.h>
#include <sys/wait.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "tests/testing/build_paths.h"
#include "tests/testing/model_file.h"
#include "tests/testing/proc_scan.h"

namespace parallax::testing {
namespace {

using Clock = std::chrono::steady_clock;
const std::string kBin = ::parallax::testing::BuildBinDir();

}  // namespace

Model ReadModel(const std::string& path) { return ReadModelFile(path); }

bool WaitForFile(const std::string& path, int timeout_ms) {
  const auto deadline = Clock::now() + std::chrono::milliseconds(timeout_ms);
  while (Clock::now() < deadline) {
    if (std::filesystem::exists(path)) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return std::filesystem::exists(path);
}

FaultCluster::~FaultCluster() {
  agents_.clear();  // ChildProcess SIGKILLs what still runs
  coordinator_.reset();
  // Tasks outlive a killed agent (a cluster agent leaves them running).
  KillAllWithEnv({Marker()});
}

std::string FaultCluster::StartCoordinator(const std::string& listen_host, int port,
                                           int agent_timeout_ms) {
  const bool restart = coordinator_ && listen_host == listen_host_ && (port == 0 || port == port_);
  listen_host_ = listen_host;
  agent_timeout_ms_ = agent_timeout_ms;
  if (restart) {
    coordinator_->Restart();  // same host, port and database
  } else {
    CoordinatorProcessOptions options;
    options.listen_host = listen_host;
    options.port = port;
    options.db = Db();
    options.extra_args = {"--agent-timeout-ms", std::to_string(agent_timeout_ms)};
    coordinator_ = std::make_unique<CoordinatorProcess>(kBin, dir_.path(), options);
  }
  if (!coordinator_->ok()) return coordinator_->error();
  // A restart on the same port writes nothing: another thread may be
  // running Cli() (CoordinatorKillTest submits while it restarts).
  if (port_ != coordinator_->port()) port_ = coordinator_->port();
  if (address_ != coordinator_->address()) address_ = coordinator_->address();
  return "";
}

void FaultCluster::KillCoordinator() {
  EXPECT_TRUE(coordinator_->Kill()) << "the coordinator did not die of SIGKILL";
}

void FaultCluster::StartAgent(const std::string& name, const std::string& netns,
                              const std::string& host, int slots,
                              const std::vector<std::string>& extra) {
  std::vector<std::string> argv;
  if (!netns.empty()) argv = {"/usr/sbin/ip", "netns", "exec", netns};
  for (const std::string& a :
       {kBin + "/parallax-agent", std::string("--coordinator"), address_, std::string("--name"),
        name, std::string("--workdir"), dir_.File("agent-" + name), std::string("--slots"),
        std::to_string(slots), std::string("--grace-ms"), std::string("500"),
        std::string("--heartbeat-ms"), std::string("200"), std::string("--listen"), host + ":0",
        std::string("--advertise"), host, std::string("--bind-addr"), host,
        std::string("--allow-env"), std::string("TINY_*")}) {
    argv.push_back(a);
  }
  argv.insert(argv.end(), extra.begin(), extra.end());
  agents_[name] = std::make_unique<ChildProcess>(argv, dir_.File("agent-" + name + ".log"),
                                                 std::vector<std::string>{Marker()});
  agent_names_.push_back(name);
}

void FaultCluster::KillAgent(const std::string& name) {
  auto it = agents_.find(name);
  ASSERT_NE(it, agents_.end()) << name;
  it->second->Signal(SIGKILL);
  it->second->Wait(10'000);
}

RunResult FaultCluster::Cli(std::vector<std::string> args, int timeout_ms) {
  std::vector<std::string> argv = {kBin + "/parallax", "--coordinator", address_};
  argv.insert(argv.end(), args.begin(), args.end());
  return RunProcess(argv, {}, timeout_ms);
}

std::string WriteTinyJob(const TempDir& dir, const TinyJob& job) {
  const std::string path = dir.File(job.tag + ".toml");
  std::ofstream f(path);
  f << "[job]\nname = \"" << job.tag << "\"\nworkers = " << job.workers
    << "\nmax_restarts = " << job.max_restarts << "\n"
    << job.job_extra << "\n[trainer]\ncommand = [\"" << kBin << "/trainer_test_rank\", \""
    << dir.File(job.tag + "-rank{rank}.out") << "\", \"30\", \"32\"]\n"
    << "checkpoint_every = 10\ncheckpoint_dir = \"" << dir.File("ckpt") << "\"\n"
    << "keep_checkpoints = 3\nmetrics_every = 5\n";
  if (!job.env.empty()) {
    f << "[trainer.env]\n";
    for (const auto& [k, v] : job.env) f << k << " = \"" << v << "\"\n";
  }
  f << "[optimizer.dense]\ntype = \"" << job.dense_optimizer << "\"\nlr = 0.1\n"
    << "[optimizer.sparse]\ntype = \"adagrad\"\nlr = 0.1\n"
    << "[ps]\nshards = " << job.shards << "\n"
    << job.ps_extra << "\n[[variable]]\nname = \"emb\"\npath = \"ps\"\n"
    << job.variable_extra << "\n";
  return path;
}

std::string FaultCluster::Submit(const TinyJob& job, bool expect_ok) {
  const std::string path = WriteTinyJob(dir_, job);
  RunResult r = Cli({"submit", path});
  if (expect_ok) {
    EXPECT_EQ(r.exit_code, 0) << r.err;
  }
  return r.exit_code == 0 ? LastLine(r.out) : "";
}

nlohmann::json FaultCluster::WaitForEnd(const std::string& id, int timeout_ms) {
  nlohmann::json j;
  const auto deadline = Clock::now() + std::chrono::milliseconds(timeout_ms);
  while (Clock::now() < deadline) {
    RunResult r = Cli({"status", id, "--json"}, 10'000);
    if (r.exit_code == 0) {
      j = nlohmann::json::parse(r.out)["jobs"][0];
      if (j["state"] == "SUCCEEDED" || j["state"] == "FAILED") return j;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  return j;
}

std::vector<std::string> FaultCluster::EventMessages(const std::string& id) {
  RunResult r = Cli({"events", id, "--json"}, 10'000);
  std::vector<std::string> out;
  if (r.exit_code != 0) return out;
  const nlohmann::json events = nlohmann::json::parse(r.out);
  for (const auto& e : events["events"]) {
    out.push_back(e["message"].get<std::string>());
  }
  return out;
}

int FaultCluster::Restarts(const std::string& id) {
  int n = 0;
  for (const std::string& m : EventMessages(id)) {
    n += m.find("-> PENDING: restart ") != std::string::npos;
  }
  return n;
}

std::string FaultCluster::Logs() {
  std::string out = "---- coordinator.log\n" + ReadWholeFile(dir_.File("coordinator.log"));
  for (const std::string& name : agent_names_) {
    out += "---- agent-" + name + ".log\n" + ReadWholeFile(dir_.File("agent-" + name + ".log"));
  }
  return out;
}

std::string CheckDatabase(const std::string& db_path) {
  sqlite3* db = nullptr;
  if (sqlite3_open_v2(db_path.c_str(), &db, SQLITE_OPEN_READONLY, nullptr) != SQLITE_OK) {
    sqlite3_close(db);
    return "cannot open " + db_path;
  }
  auto scalar = [&](const char* sql) {
    sqlite3_stmt* st = nullptr;
    std::string v = "<error>";
    if (sqlite3_prepare_v2(db, sql, -1, &st, nullptr) == SQLITE_OK &&
        sqlite3_step(st) == SQLITE_ROW) {
      const unsigned char* t = sqlite3_column_text(st, 0);
      v = t ? reinterpret_cast<const char*>(t) : "";
    }
    sqlite3_finalize(st);
    return v;
  };
  std::string problems;
  if (std::string ic = scalar("PRAGMA integrity_check"); ic != "ok") {
    problems += "integrity_check: " + ic + "\n";
  }
  if (std::string fk = scalar("SELECT COUNT(*) FROM pragma_foreign_key_check"); fk != "0") {
    problems += fk + " foreign key violations\n";
  }
  if (std::string a = scalar("SELECT COUNT(*) FROM jobs"),
      b = scalar("SELECT COUNT(DISTINCT job_id) FROM events WHERE kind = 'submitted'");
      a != b) {
    problems += a + " jobs but " + b + " with a submitted event\n";
  }
  if (std::string live = scalar(
          "SELECT COUNT(*) FROM tasks t JOIN jobs j ON j.id = t.job_id WHERE j.state = 'SUCCEEDED'"
          " AND t.role = 'TRAINER' AND t.state IN ('ASSIGNED', 'RUNNING')");
      live != "0") {
    // (A succeeded job's shards are stopped after it ends: not checked.)
    problems += live + " trainers ASSIGNED/RUNNING of succeeded jobs\n";
  }
  if (std::string bad =
          scalar("SELECT COUNT(*) FROM checkpoints WHERE manifest_sha256 = '' OR path = ''");
      bad != "0") {
    problems += bad + " checkpoint rows without a manifest\n";
  }
  sqlite3_close(db);
  return problems;
}

}  // namespace parallax::testing
