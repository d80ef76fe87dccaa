// launch_bench: time from SubmitJob to every task of the job running, read
// from the coordinator's own event times (the "submitted" event and the
// "PLACING -> RUNNING" event), so polling intervals do not count.
//
//   --mode real:      parallax-coordinator + 2 real parallax-agent processes,
//                     an 8-rank job of real processes (px_test_task, hanging
//                     until cancelled)
//   --mode simulated: parallax-coordinator + 16 simulated agents (threads,
//                     each its own connection: long-poll, report RUNNING at
//                     once), a 64-rank job
//
// Prints one JSON object per line and statistic (median, min, max over --runs).
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
    req.timeout_ms = 200;
    req.running = running;
    rpc::PollResponse resp;
    if (!client->Call([&](rpc::CoordinatorClient& c) { c.PollAssignments(resp, client->Header(), req); }, 200).ok()) {
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

int Main(int argc, char** argv) {
  std::string mode = "real";
  int runs = 5;
  std::string bin_dir;
  CLI::App app{"Time from submit to all tasks running (JSON lines on stdout)"};
  app.add_option("--mode", mode, "real (2 agents, 8 ranks) or simulated (16 agents, 64 ranks)")
      ->check(CLI::IsMember({"real", "simulated"}))
      ->capture_default_str();
  app.add_option("--runs", runs, "runs; median, min and max are reported")->capture_default_str();
  app.add_option("--bin-dir", bin_dir, "where parallax-coordinator, parallax-agent, px_test_task are");
  CLI11_PARSE(app, argc, argv);
  if (bin_dir.empty()) bin_dir = std::filesystem::canonical("/proc/self/exe").parent_path().string();

  char tmpl[] = "/tmp/parallax-launch-XXXXXX";
  std::string dir = mkdtemp(tmpl);
  Child coordinator;
  Spawn(coordinator, {bin_dir + "/parallax-coordinator", "--listen", "127.0.0.1:0", "--db",
                      dir + "/state.db", "--port-file", dir + "/port"},
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
    return 1;
  }

  const bool real = mode == "real";
  const int agents = real ? 2 : 16, slots = 4, workers = agents * slots;
  std::vector<Child> agent_procs(real ? agents : 0);
  std::atomic<bool> stop{false};
  std::vector<std::thread> simulated;
  for (int a = 0; a < agents; ++a) {
    std::string name = "agent-" + std::to_string(a);
    if (real) {
      Spawn(agent_procs[a], {bin_dir + "/parallax-agent", "--coordinator", address, "--name", name,
                             "--workdir", dir + "/" + name, "--slots", std::to_string(slots),
                             "--grace-ms", "500", "--allow-env", "PX_TEST_*"},
            dir + "/" + name + ".log");
    } else {
      simulated.emplace_back([&, name] { SimulatedAgent(address, name, slots, stop); });
    }
  }
  auto client = Connect(address, "bench");
  for (int i = 0; i < 400; ++i) {
    auto list = client->ListAgents();
    if (list.ok() && static_cast<int>(list->size()) == agents) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(25));
  }
  std::string job = "[job]\nname = \"launch\"\nworkers = " + std::to_string(workers) +
                    "\narch = \"allreduce\"\n[trainer]\ncommand = [\"" + bin_dir +
                    "/px_test_task\"]\n[trainer.env]\nPX_TEST_BEHAVIOR = \"hang\"\n";
  std::vector<double> ms;
  for (int run = 0; run < runs; ++run) {
    auto submitted = client->SubmitJob(job, dir + "/launch.toml");
    if (!submitted.ok()) {
      std::cerr << "launch_bench: " << submitted.status().ToString() << "\n";
      return 1;
    }
    int64_t id = submitted->id;
    for (int i = 0; i < 3000; ++i) {
      auto j = client->GetJob(id);
      if (j.ok() && j->state != rpc::JobState::PENDING && j->state != rpc::JobState::PLACING) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    auto events = client->GetEvents(id, 0, 0);
    int64_t t0 = EventTime(*events, "submitted"), t1 = EventTime(*events, "PLACING -> RUNNING");
    if (t0 < 0 || t1 < 0) {
      std::cerr << "launch_bench: job " << id << " did not reach RUNNING; see " << dir << "\n";
      return 1;
    }
    ms.push_back(static_cast<double>(t1 - t0));
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
    std::cerr << "run " << run + 1 << "/" << runs << ": " << ms.back() << " ms\n";
  }
  stop = true;
  for (auto& t : simulated) t.join();
  std::sort(ms.begin(), ms.end());
  for (const auto& [stat, value] : std::vector<std::pair<std::string, double>>{
           {"median", ms[ms.size() / 2]}, {"min", ms.front()}, {"max", ms.back()}}) {
    nlohmann::json o = {{"bench", "launch"},   {"impl", "parallax"}, {"metric", "submit_to_running"},
                        {"unit", "ms"},        {"stat", stat},       {"runs", runs},
                        {"value", value},      {"ranks", workers},   {"agents", agents},
                        {"mode", mode}};
    std::cout << o.dump() << std::endl;
  }
  agent_procs.clear();
  std::filesystem::remove_all(dir);
  return 0;
}

}  // namespace
}  // namespace parallax

int main(int argc, char** argv) { return parallax::Main(argc, argv); }
