// FaultCluster: a real parallax-coordinator and agents on real sockets, the
// `parallax` CLI against them, and the tiny-model job (trainer_test_rank,
// 2 ranks, 2 PS shards, checkpoints every 10 of 30 steps) that the fault
// tests submit, break and compare. Agents may run inside a network
// namespace (`ip netns exec`).
#ifndef PARALLAX_TESTS_FAULT_FAULT_CLUSTER_H_
#define PARALLAX_TESTS_FAULT_FAULT_CLUSTER_H_

#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "tests/testing/coordinator_process.h"
#include "tests/testing/subprocess.h"
#include "tests/testing/temp_dir.h"

namespace parallax::testing {

// "name v v v" lines, as trainer_test_rank writes them.
using Model = std::map<std::string, std::vector<float>>;
Model ReadModel(const std::string& path);

struct TinyJob {
  std::string tag;  // names the job file and the ranks' outputs
  int max_restarts = 2;
  std::map<std::string, std::string> env;  // [trainer.env]
  std::string job_extra;                   // more [job] keys
  int workers = 2;
  int shards = 2;
  std::string ps_extra;  // more [ps] keys
  std::string variable_extra;  // more keys of emb's [[variable]]
  std::string dense_optimizer = "sgd";  // [optimizer.dense] type, for "w"
};

// Writes the tiny job's file, DIR/<tag>.toml (ranks' outputs and checkpoints
// under `dir` too); returns its path.
std::string WriteTinyJob(const TempDir& dir, const TinyJob& job);

class FaultCluster {
 public:
  explicit FaultCluster(const TempDir& dir) : dir_(dir) {}
  ~FaultCluster();

  // Starts the coordinator (listen_host:port; port 0 picks one, and a
  // restart reuses the first one). Returns "" or what went wrong.
  std::string StartCoordinator(const std::string& listen_host = "127.0.0.1", int port = 0,
                               int agent_timeout_ms = 3000);
  void KillCoordinator();
  // Starts agent `name` with 2 slots; `netns` non-empty runs it there,
  // advertising and binding `host`; `extra` are more flags (--role ps).
  void StartAgent(const std::string& name, const std::string& netns = "",
                  const std::string& host = "127.0.0.1", int slots = 2,
                  const std::vector<std::string>& extra = {});
  void KillAgent(const std::string& name);

  // Cli() and Submit() may run on another thread while the coordinator is
  // restarted on the same port; nothing else is thread-safe.
  RunResult Cli(std::vector<std::string> args, int timeout_ms = 30'000);
  // Submits the tiny job; returns its id ("" on failure, then a test failure
  // unless !expect_ok).
  std::string Submit(const TinyJob& job, bool expect_ok = true);
  // Polls `parallax status` until the job is SUCCEEDED or FAILED or the
  // deadline passes; returns the last status object.
  nlohmann::json WaitForEnd(const std::string& id, int timeout_ms = 120'000);
  // Events of the job that start a restart ("RUNNING -> PENDING: restart
  // 1 of 2: ...").
  int Restarts(const std::string& id);
  std::string Logs();
  // The job's events, oldest first (message only).
  std::vector<std::string> EventMessages(const std::string& id);

  // "PX_FAULT_TEST=<dir>": in the environment of the agents and so of every
  // task they start, to find (and finally kill) this test's processes.
  std::string Marker() const { return "PX_FAULT_TEST=" + dir_.path(); }
  const std::string& address() const { return address_; }
  int port() const { return port_; }
  std::string Db() const { return dir_.File("state.db"); }
  std::string CheckpointRoot() const { return dir_.File("ckpt"); }
  std::string Output(const std::string& tag, int rank) const {
    return dir_.File(tag + "-rank" + std::to_string(rank) + ".out");
  }

 private:
  const TempDir& dir_;
  std::string listen_host_;
  int port_ = 0;
  int agent_timeout_ms_ = 3000;
  std::string address_;
  std::unique_ptr<CoordinatorProcess> coordinator_;
  std::map<std::string, std::unique_ptr<ChildProcess>> agents_;
  std::vector<std::string> agent_names_;
};

// Checks the coordinator's database after a kill: SQLite's integrity check,
// foreign keys, every job has its "submitted" event, no succeeded job has a
// live trainer, every checkpoint row has a manifest digest. Returns
// the problems found ("" when none).
std::string CheckDatabase(const std::string& db_path);

// Waits up to timeout_ms for `path` to exist.
bool WaitForFile(const std::string& path, int timeout_ms);

}  // namespace parallax::testing

#endif  // PARALLAX_TESTS_FAULT_FAULT_CLUSTER_H_
