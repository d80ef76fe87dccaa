// PS hosts: agents started with `--role ps` take the PS shards of jobs with
// [ps] hosts = "ps" and no trainer rank. A real coordinator, one worker agent
// (2 slots) and two PS agents on loopback run the tiny job of
// tests/fault/fault_cluster.h (2 ranks, 2 shards): before a PS host is
// registered the job stays PENDING with the reason; with one, it runs to
// SUCCEEDED with its ranks on the worker agent and both shards on the PS
// agent; with two, the next job's shards go one on each, and rank 0 planned
// for shards on hosts of their own. `parallax run` of such a job starts a
// local PS agent beside its worker agent, and only for such a job.
#include <gtest/gtest.h>
#include <sqlite3.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "tests/fault/fault_cluster.h"
#include "tests/testing/build_paths.h"
#include "tests/testing/subprocess.h"
#include "tests/testing/temp_dir.h"

namespace parallax {
namespace {

using testing::FaultCluster;
using testing::RunProcess;
using testing::RunResult;
using testing::TinyJob;
using Clock = std::chrono::steady_clock;

// Calls `row` for every row of `sql` on the database at `db_path` (read-only),
// with `job_id` bound to ?1 when given.
void ForEachRow(const std::string& db_path, const char* sql,
                const std::function<void(sqlite3_stmt*)>& row,
                std::optional<int64_t> job_id = std::nullopt) {
  sqlite3* db = nullptr;
  EXPECT_EQ(sqlite3_open_v2(db_path.c_str(), &db, SQLITE_OPEN_READONLY, nullptr), SQLITE_OK);
  sqlite3_stmt* st = nullptr;
  EXPECT_EQ(sqlite3_prepare_v2(db, sql, -1, &st, nullptr), SQLITE_OK) << sqlite3_errmsg(db);
  if (job_id) sqlite3_bind_int64(st, 1, *job_id);
  while (sqlite3_step(st) == SQLITE_ROW) row(st);
  sqlite3_finalize(st);
  sqlite3_close(db);
}

std::string Text(sqlite3_stmt* st, int column) {
  return reinterpret_cast<const char*>(sqlite3_column_text(st, column));
}

// "TRAINER/0", "PS/1" (the store's role names) -> agent of every task of the job's last attempt.
std::map<std::string, std::string> TaskAgents(const std::string& db_path,
                                              const std::string& job_id) {
  std::map<std::string, std::string> out;
  ForEachRow(
      db_path,
      "SELECT role, task_index, agent_name FROM tasks WHERE job_id = ?1 AND attempt = "
      "(SELECT MAX(attempt) FROM tasks WHERE job_id = ?1)",
      [&](sqlite3_stmt* st) {
        out[Text(st, 0) + "/" + std::to_string(sqlite3_column_int(st, 1))] = Text(st, 2);
      },
      std::stoll(job_id));
  return out;
}

// Name -> role of every agent the database has seen (agents.role of
// schemas/state.sql: 1 "worker", 2 "ps").
std::map<std::string, std::string> AgentsInDb(const std::string& db_path) {
  std::map<std::string, std::string> out;
  ForEachRow(db_path, "SELECT name, role FROM agents", [&](sqlite3_stmt* st) {
    const int role = sqlite3_column_int(st, 1);
    out[Text(st, 0)] = role == 1 ? "worker" : role == 2 ? "ps" : std::to_string(role);
  });
  return out;
}

// `parallax status ID --json`'s job object once `done` holds for it, or the
// last one read after the deadline.
template <typename Done>
nlohmann::json WaitForStatus(FaultCluster& cluster, const std::string& id, Done done,
                             int timeout_ms = 60'000) {
  nlohmann::json job;
  const auto deadline = Clock::now() + std::chrono::milliseconds(timeout_ms);
  while (Clock::now() < deadline) {
    RunResult r = cluster.Cli({"status", id, "--json"}, 10'000);
    if (r.exit_code == 0) {
      job = nlohmann::json::parse(r.out)["jobs"][0];
      if (done(job)) return job;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  return job;
}

// The agents' roles as `parallax agents --json` lists them, once `n` are alive
// (then, or at the deadline, with the last output in *last).
std::map<std::string, std::string> AgentRoles(FaultCluster& cluster, size_t n,
                                              std::string* last) {
  std::map<std::string, std::string> roles;
  const auto deadline = Clock::now() + std::chrono::seconds(30);
  while (Clock::now() < deadline) {
    RunResult r = cluster.Cli({"agents", "--json"}, 10'000);
    *last = r.out + r.err;
    roles.clear();
    if (r.exit_code == 0) {
      const nlohmann::json doc = nlohmann::json::parse(r.out);
      for (const auto& a : doc["agents"]) {
        if (a.value("alive", false)) {
          roles[a.value("name", "")] = a.value("role", "");
        }
      }
    }
    if (roles.size() >= n) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  return roles;
}

TEST(PsHostsTest, ShardsRunOnPsAgentsAndRanksOnTheWorkerAgent) {
  testing::TempDir dir;
  FaultCluster cluster(dir);
  ASSERT_EQ(cluster.StartCoordinator(), "");
  cluster.StartAgent("w", "", "127.0.0.1", 2);
  std::string listed;
  ASSERT_EQ(AgentRoles(cluster, 1, &listed),
            (std::map<std::string, std::string>{{"w", "worker"}}))
      << listed << cluster.Logs();

  TinyJob job;
  job.tag = "ps-hosts";
  job.max_restarts = 0;
  job.ps_extra = "hosts = \"ps\"\n";
  const std::string first = cluster.Submit(job);
  ASSERT_FALSE(first.empty());
  // No PS host yet: the job waits, and says why and what to do.
  nlohmann::json pending = WaitForStatus(cluster, first, [](const nlohmann::json& j) {
    return j.value("waiting_for", "").find("no PS host") != std::string::npos;
  });
  EXPECT_EQ(pending["state"], "PENDING") << pending.dump();
  EXPECT_NE(pending.value("waiting_for", "").find("parallax-agent --role ps"), std::string::npos)
      << pending.dump();

  // One PS host: both shards go there, none on the worker agent.
  cluster.StartAgent("p1", "", "127.0.0.1", 2, {"--role", "ps"});
  nlohmann::json end = cluster.WaitForEnd(first);
  ASSERT_EQ(end["state"], "SUCCEEDED") << end.dump() << cluster.Logs();
  EXPECT_EQ(TaskAgents(cluster.Db(), first),
            (std::map<std::string, std::string>{
                {"TRAINER/0", "w"}, {"TRAINER/1", "w"}, {"PS/0", "p1"}, {"PS/1", "p1"}}));

  // Two PS hosts: one shard on each.
  cluster.StartAgent("p2", "", "127.0.0.1", 2, {"--role", "ps"});
  ASSERT_EQ(AgentRoles(cluster, 3, &listed),
            (std::map<std::string, std::string>{{"p1", "ps"}, {"p2", "ps"}, {"w", "worker"}}))
      << listed;
  job.tag = "ps-hosts-2";
  const std::string second = cluster.Submit(job);
  ASSERT_FALSE(second.empty());
  end = cluster.WaitForEnd(second);
  ASSERT_EQ(end["state"], "SUCCEEDED") << end.dump() << cluster.Logs();
  EXPECT_EQ(TaskAgents(cluster.Db(), second),
            (std::map<std::string, std::string>{
                {"TRAINER/0", "w"}, {"TRAINER/1", "w"}, {"PS/0", "p1"}, {"PS/1", "p2"}}));

  // Rank 0 planned for its shards on 2 hosts of their own, its ranks on 1.
  RunResult st = cluster.Cli({"status", second, "--json"}, 10'000);
  ASSERT_EQ(st.exit_code, 0) << st.err;
  const nlohmann::json plan = nlohmann::json::parse(st.out)["jobs"][0]["plan"];
  ASSERT_TRUE(plan.is_object()) << st.out;
  EXPECT_EQ(plan["cluster"]["hosts"], 1) << plan["cluster"].dump();
  EXPECT_EQ(plan["cluster"].value("ps_hosts", 0), 2) << plan["cluster"].dump();
}

// `parallax run` of the tiny job (one shard) with `ps_extra` under [ps], on a
// state directory of its own: the run's exit code and output.
RunResult ParallaxRun(const testing::TempDir& dir, const std::string& tag,
                      const std::string& ps_extra) {
  TinyJob job;
  job.tag = tag;
  job.max_restarts = 0;
  job.shards = 1;
  job.ps_extra = ps_extra;
  return RunProcess({std::string(::parallax::testing::BuildBinDir()) + "/parallax", "run", "--state-dir",
                     dir.File(tag), testing::WriteTinyJob(dir, job)},
                    {}, 60'000);
}

TEST(PsHostsTest, ParallaxRunStartsALocalPsAgentForAJobOnPsHosts) {
  testing::TempDir dir;
  RunResult r = ParallaxRun(dir, "run-ps", "hosts = \"ps\"\n");
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("SUCCEEDED"), std::string::npos) << r.out;
  const std::string db = dir.File("run-ps/state.db");
  EXPECT_EQ(AgentsInDb(db),
            (std::map<std::string, std::string>{{"local", "worker"}, {"local-ps", "ps"}}));
  EXPECT_EQ(TaskAgents(db, "1"),
            (std::map<std::string, std::string>{
                {"TRAINER/0", "local"}, {"TRAINER/1", "local"}, {"PS/0", "local-ps"}}));
}

TEST(PsHostsTest, ParallaxRunStartsNoPsAgentForAJobOnItsWorkersHosts) {
  testing::TempDir dir;
  RunResult r = ParallaxRun(dir, "run-workers", "hosts = \"workers\"\n");
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  const std::string db = dir.File("run-workers/state.db");
  EXPECT_EQ(AgentsInDb(db), (std::map<std::string, std::string>{{"local", "worker"}}));
  EXPECT_EQ(TaskAgents(db, "1"),
            (std::map<std::string, std::string>{
                {"TRAINER/0", "local"}, {"TRAINER/1", "local"}, {"PS/0", "local"}}));
}

}  // namespace
}  // namespace parallax
