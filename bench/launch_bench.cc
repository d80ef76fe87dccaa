// launch_bench: time from SubmitJob to the job placed and to every task of
// the job running, read from the coordinator's own event times (the
// "submitted" event, "PENDING -> PLACING" and "PLACING -> RUNNING"), so
// polling intervals do not count.
//
//   --mode real:      parallax-coordinator + real parallax-agent processes
//                     (default 2), a job of real processes (px_test_task,
//                     hanging until cancelled) on every slot
//   --mode simulated: parallax-coordinator + simulated agents (threads,
//                     each its own connection: long-poll, report RUNNING at
//                     once; default 16), a job on every slot
//
// With --baseline-bin, another coordinator binary is measured the same way,
// alternating, and the ratio of the medians is printed too. Prints one JSON
// object per line and statistic (median, min, max over the runs).
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <thread>

#include "bench/bench_stats.h"
#include "core/rpc/coordinator_client.h"

extern char** environ;

namespace parallax {
namespace {

struct Child {
  pid_t pid = -1;
  ~Child() {
    if (pid > 0) {
      kill(pid, SIGTERM);
      int st;
      waitpid(pid, &st, 0);
    }
  }
};

void Spawn(Child& child, std::vector<std::string> argv, const std::string& log) {
  std::vector<char*> p;
  for (auto& s : argv) p.push_back(s.data());
  p.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 1, log.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
  posix_spawn_file_actions_adddup2(&actions, 1, 2);
  if (posix_spawn(&child.pid, p[0], &actions, nullptr, p.data(), environ) != 0) {
    std::cerr << "launch_bench: cannot start " << argv[0] << "\n";
    std::exit(1);
  }
}

std::unique_ptr<CoordinatorClient> Connect(const std::string& address, const std::string& name) {
  CoordinatorClientOptions o;
  o.address = address;
  o.client_name = name;
  auto c = CoordinatorClient::Connect(o);
  if (!c.ok()) {
    std::cerr << "launch_bench: " << c.status().ToString() << "\n";
    std::exit(1);
  }
  return std::move(c).value();
}

// A simulated agent: registers, long-polls, reports every start as RUNNING
// and every stop as KILLED at once.
void SimulatedAgent(const std::string& address, const std::string& name, int slots,
                    std::atomic<bool>& stop) {
  auto client = Connect(address, "agent:" + name);
  rpc::AgentInfo info;
  info.name = name;
  info.address = "127.0.0.1:1";
  info.slots = slots;
  info.gpus = 0;
  if (!client->RegisterAgent(info).ok()) std::exit(1);
  std::vector<rpc::TaskKey> running;
  while (!stop) {
    rpc::PollRequest req;
    req.agent_name = name;
    req.timeout_ms = 1000;
    req.running = running;
    rpc::PollResponse resp;
    if (!client->Call([&](rpc::CoordinatorClient& c) { c.PollAssignments(resp, client->Header(), req); }, req.timeout_ms).ok()) {
      continue;
    }
    std::vector<rpc::TaskReport> reports;
    for (const auto& a : resp.start) {
      running.push_back(a.key);
      rpc::TaskReport r;
      r.key = a.key;
      r.state = rpc::TaskState::RUNNING;
      reports.push_back(r);
    }
    for (const auto& k : resp.stop) {
      running.erase(std::remove(running.begin(), running.end(), k), running.end());
      rpc::TaskReport r;
      r.key = k;
      r.state = rpc::TaskState::KILLED;
      r.__set_signal(SIGTERM);
      reports.push_back(r);
    }
    if (!reports.empty()) {
      (void)client->Call([&](rpc::CoordinatorClient& c) { c.ReportTasks(client->Header(), name, reports); });
    }
  }
}

int64_t EventTime(const std::vector<rpc::Event>& events, const std::string& needle) {
  for (const auto& e : events) {
    if (e.message.find(needle) != std::string::npos) return e.time;
  }
  return -1;
}

struct Setup {
  std::string mode = "real";
  int runs = 5;
  int rounds = 1;
  int agents = 0;  // 0: the mode's default
  int slots = 4;
  std::string bin_dir;
  std::string coordinator_bin;
  std::string baseline_bin;
};

// Milliseconds from submit to placed (PENDING -> PLACING) and to running
// (PLACING -> RUNNING) of each run.
struct Times {
  std::vector<double> placed, running;
};

// One coordinator (`coordinator_bin`) with its agents, and `setup.runs`
// jobs submitted one after the other. False if a job did not start.
bool RunSeries(const Setup& setup, const std::string& coordinator_bin, Times* times) {
  char tmpl[] = "/tmp/parallax-launch-XXXXXX";
  std::string dir = mkdtemp(tmpl);
  Child coordinator;
  Spawn(coordinator, {coordinator_bin, "--listen", "127.0.0.1:0", "--db", dir + "/state.db",
                      "--port-file", dir + "/port"},
        dir + "/coordinator.log");
  std::string address;
  for (int i = 0; i < 400 && address.empty(); ++i) {
    std::ifstream in(dir + "/port");
    int port = 0;
    if (in >> port && port > 0) address = "127.0.0.1:" + std::to_string(port);
    std::this_thread::sleep_for(std::chrono::milliseconds(25));
  }
  if (address.empty()) {
    std::cerr << "launch_bench: coordinator did not start\n";
    return false;
  }
  const bool real = setup.mode == "real";
  const int agents = setup.agents > 0 ? setup.agents : (real ? 2 : 16);
  const int workers = agents * setup.slots;
  std::vector<Child> agent_procs(real ? agents : 0);
  std::atomic<bool> stop{false};
  std::vector<std::thread> simulated;
  for (int a = 0; a < agents; ++a) {
    std::string name = "agent-" + std::to_string(a);
    if (real) {
      Spawn(agent_procs[a], {setup.bin_dir + "/parallax-agent", "--coordinator", address, "--name",
                             name, "--workdir", dir + "/" + name, "--slots",
                             std::to_string(setup.slots), "--grace-ms", "500", "--allow-env", "PX_TEST_*"},
            dir + "/" + name + ".log");
    } else {
      simulated.emplace_back([&, name] { SimulatedAgent(address, name, setup.slots, stop); });
    }
  }
  auto client = Connect(address, "bench");
  for (int i = 0; i < 400; ++i) {
    auto list = client->ListAgents();
    if (list.ok() && static_cast<int>(list->size()) == agents) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(25));
  }
  std::string job = "[job]\nname = \"launch\"\nworkers = " + std::to_string(workers) +
                    "\narch = \"allreduce\"\n[trainer]\ncommand = [\"" + setup.bin_dir +
                    "/px_test_task\"]\n[trainer.env]\nPX_TEST_BEHAVIOR = \"hang\"\n";
  bool ok = true;
  for (int run = 0; run < setup.runs && ok; ++run) {
    auto submitted = client->SubmitJob(job, dir + "/launch.toml");
    if (!submitted.ok()) {
      std::cerr << "launch_bench: " << submitted.status().ToString() << "\n";
      ok = false;
      break;
    }
    int64_t id = submitted->id;
    for (int i = 0; i < 3000; ++i) {
      auto j = client->GetJob(id);
      if (j.ok() && j->state != rpc::JobState::PENDING && j->state != rpc::JobState::PLACING) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    auto events = client->GetEvents(id, 0, 0);
    int64_t t0 = EventTime(*events, "submitted"), t1 = EventTime(*events, "PENDING -> PLACING"),
            t2 = EventTime(*events, "PLACING -> RUNNING");
    if (t0 < 0 || t1 < 0 || t2 < 0) {
      std::cerr << "launch_bench: job " << id << " did not reach RUNNING; see " << dir << "\n";
      ok = false;
      break;
    }
    times->placed.push_back(static_cast<double>(t1 - t0));
    times->running.push_back(static_cast<double>(t2 - t0));
    (void)client->CancelJob(id, "benchmark run over");
    // Wait for every task to stop before the next run.
    for (int i = 0; i < 3000; ++i) {
      std::vector<rpc::TaskInfo> tasks;
      (void)client->Call([&](rpc::CoordinatorClient& c) { c.ListTasks(tasks, client->Header(), id); });
      bool live = false;
      for (const auto& t : tasks) live |= t.state == rpc::TaskState::RUNNING || t.state == rpc::TaskState::ASSIGNED;
      if (!live) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    std::cerr << coordinator_bin << " run " << run + 1 << "/" << setup.runs << ": placed "
              << times->placed.back() << " ms, running " << times->running.back() << " ms\n";
  }
  stop = true;
  for (auto& t : simulated) t.join();
  agent_procs.clear();
  if (ok) std::filesystem::remove_all(dir);
  return ok;
}

void Emit(const Setup& setup, const std::string& impl, const std::string& metric,
          std::vector<double> ms) {
  if (ms.empty()) return;
  const size_t runs = ms.size();
  const bench::Spread spread = bench::SpreadOf(std::move(ms));
  const int agents = setup.agents > 0 ? setup.agents : (setup.mode == "real" ? 2 : 16);
  for (const auto& [stat, value] : std::vector<std::pair<std::string, double>>{
           {"median", spread.median}, {"min", spread.min}, {"max", spread.max}}) {
    nlohmann::json o = {{"bench", "launch"}, {"impl", impl},
                        {"metric", metric},  {"unit", "ms"},
                        {"stat", stat},      {"runs", runs},
                        {"value", value},    {"ranks", agents * setup.slots},
                        {"agents", agents},  {"mode", setup.mode}};
    std::cout << o.dump() << std::endl;
  }
}

int Main(int argc, char** argv) {
  Setup setup;
  CLI::App app{"Time from submit to placed and to all tasks running (JSON lines on stdout)"};
  app.add_option("--mode", setup.mode, "real (agents are parallax-agent processes) or simulated "
                                       "(threads that long-poll and report RUNNING at once)")
      ->check(CLI::IsMember({"real", "simulated"}))
      ->capture_default_str();
  app.add_option("--runs", setup.runs, "jobs per coordinator; median, min and max are reported")
      ->capture_default_str();
  app.add_option("--rounds", setup.rounds,
                 "coordinators started, each with --runs jobs (alternating with --baseline-bin)")
      ->capture_default_str();
  app.add_option("--agents", setup.agents, "agents (default: 2 real, 16 simulated)");
  app.add_option("--slots", setup.slots, "slots per agent; the job has agents x slots ranks")
      ->capture_default_str();
  app.add_option("--bin-dir", setup.bin_dir, "where parallax-coordinator, parallax-agent, px_test_task are");
  app.add_option("--coordinator-bin", setup.coordinator_bin,
                 "parallax-coordinator to measure (default: in --bin-dir)");
  app.add_option("--baseline-bin", setup.baseline_bin,
                 "another parallax-coordinator measured the same way, alternating");
  CLI11_PARSE(app, argc, argv);
  if (setup.bin_dir.empty()) {
    setup.bin_dir = std::filesystem::canonical("/proc/self/exe").parent_path().string();
  }
  if (setup.coordinator_bin.empty()) setup.coordinator_bin = setup.bin_dir + "/parallax-coordinator";
  Times current, baseline;
  for (int round = 0; round < setup.rounds; ++round) {
    if (!RunSeries(setup, setup.coordinator_bin, &current)) return 1;
    if (!setup.baseline_bin.empty() && !RunSeries(setup, setup.baseline_bin, &baseline)) return 1;
  }
  Emit(setup, "current", "submit_to_placed", current.placed);
  Emit(setup, "current", "submit_to_running", current.running);
  Emit(setup, "baseline", "submit_to_placed", baseline.placed);
  Emit(setup, "baseline", "submit_to_running", baseline.running);
  if (!baseline.running.empty()) {
    const double c = bench::Median(current.running);
    nlohmann::json o = {{"bench", "launch"}, {"impl", "baseline/current"},
                        {"metric", "submit_to_running"}, {"stat", "median"},
                        {"value", c > 0 ? bench::Median(baseline.running) / c : 0.0},
                        {"mode", setup.mode}};
    std::cout << o.dump() << std::endl;
  }
  return 0;
}

}  // namespace
}  // namespace parallax

int main(int argc, char** argv) { return parallax::Main(argc, argv); }
