// coordinator_load: the coordinator under a cluster's worth of load, against
// one real parallax-coordinator process (started here on a fresh database
// with a secret file, so every call is authenticated, or given with
// --coordinator and --secret-file).
//
//   --agents simulated agents, each its own connection and thread, register
//   and heartbeat every --interval-ms;
//   --clients clients, each its own connection and thread, submit a job and
//   poll one of their jobs (GetJob) every --client-interval-ms.
//
// After --duration-s every submitted job id must be listed by the
// coordinator. Prints one JSON object per line (latency percentiles per call
// kind, counts, errors, lost jobs) and exits 1 if any call failed or any job
// was lost. See docs/PERFORMANCE.md.
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <mutex>
#include <nlohmann/json.hpp>
#include <random>
#include <set>
#include <thread>

#include "core/base/secret.h"
#include "bench/spawn_coordinator.h"
#include "core/rpc/coordinator_client.h"


namespace parallax {
namespace {

using Clock = std::chrono::steady_clock;

double Ms(Clock::duration d) { return std::chrono::duration<double, std::milli>(d).count(); }

double Percentile(std::vector<double>& v, double p) {  // REQUIRES: v sorted
  if (v.empty()) return 0;
  size_t i = static_cast<size_t>(p / 100.0 * static_cast<double>(v.size() - 1) + 0.5);
  return v[std::min(i, v.size() - 1)];
}

struct Args {
  std::string coordinator;
  std::string coordinator_bin;
  std::string secret_file;
  int agents = 200;
  int clients = 20;
  int duration_s = 60;
  int interval_ms = 1000;
  int client_interval_ms = 100;
};

const char kJob[] = "[job]\nname = \"load\"\nworkers = 2\n[trainer]\nmodel = \"lm\"\n";

// Latencies and errors of one kind of call, merged from every thread.
struct Series {
  std::mutex mu;
  std::vector<double> ms;
  std::atomic<int64_t> errors{0};
  std::string first_error;  // guarded by mu
  void Add(const std::vector<double>& v) {
    std::lock_guard<std::mutex> lock(mu);
    ms.insert(ms.end(), v.begin(), v.end());
  }
  void Error(const Status& s) {
    ++errors;
    std::lock_guard<std::mutex> lock(mu);
    if (first_error.empty()) first_error = s.ToString();
  }
};

std::unique_ptr<CoordinatorClient> MustConnect(const Args& args, const std::string& secret,
                                               const std::string& name) {
  CoordinatorClientOptions o;
  o.address = args.coordinator;
  o.auth_token = secret;
  o.client_name = name;
  o.connect_timeout_ms = 10'000;
  auto c = CoordinatorClient::Connect(o);
  if (!c.ok()) {
    std::cerr << "coordinator_load: " << c.status().ToString() << "\n";
    std::exit(1);
  }
  return std::move(c).value();
}

pid_t StartCoordinator(Args& args, const std::string& dir) {
  // No job limit: jobs pile up PENDING (the simulated agents never poll).
  auto c = bench::SpawnCoordinator(args.coordinator_bin, dir, {"--secret-file", args.secret_file, "--max-active-jobs", "0"});
  if (!c.ok()) {
    std::cerr << "coordinator_load: " << c.status().ToString() << "\n";
    std::exit(1);
  }
  args.coordinator = c->address;
  return c->pid;
}

void Emit(const std::string& call, Series& s, const Args& args) {
  std::sort(s.ms.begin(), s.ms.end());
  nlohmann::json o = {{"bench", "coordinator_load"},
                      {"call", call},
                      {"count", s.ms.size()},
                      {"errors", s.errors.load()},
                      {"p50_ms", Percentile(s.ms, 50)},
                      {"p90_ms", Percentile(s.ms, 90)},
                      {"p99_ms", Percentile(s.ms, 99)},
                      {"max_ms", s.ms.empty() ? 0.0 : s.ms.back()},
                      {"per_second", static_cast<double>(s.ms.size()) / args.duration_s},
                      {"agents", args.agents},
                      {"clients", args.clients},
                      {"duration_s", args.duration_s}};
  if (!s.first_error.empty()) o["first_error"] = s.first_error;
  std::cout << o.dump() << std::endl;
}

int Main(int argc, char** argv) {
  Args args;
  CLI::App app{"Coordinator load test: agents heartbeating and clients submitting and polling "
               "(JSON lines on stdout; exit 1 on any error or lost job)"};
  app.add_option("--coordinator", args.coordinator,
                 "HOST:PORT of a running coordinator (default: start one on a fresh database)");
  app.add_option("--coordinator-bin", args.coordinator_bin,
                 "parallax-coordinator to start (default: next to this binary)");
  app.add_option("--secret-file", args.secret_file,
                 "the coordinator's secret file (default when starting one: a fresh secret)");
  app.add_option("--agents", args.agents, "simulated agents")->capture_default_str();
  app.add_option("--clients", args.clients, "submitting and polling clients")->capture_default_str();
  app.add_option("--duration-s", args.duration_s, "length of the run")->capture_default_str()
      ->check(CLI::PositiveNumber);
  app.add_option("--interval-ms", args.interval_ms, "heartbeat period of each agent")
      ->capture_default_str()->check(CLI::PositiveNumber);
  app.add_option("--client-interval-ms", args.client_interval_ms,
                 "period of each client's submit + poll")
      ->capture_default_str()->check(CLI::PositiveNumber);
  CLI11_PARSE(app, argc, argv);

  pid_t child = 0;
  std::string dir;
  if (args.coordinator.empty()) {
    if (args.coordinator_bin.empty()) {
      args.coordinator_bin = bench::NextToThisBinary("parallax-coordinator");
    }
    dir = bench::MakeBenchDir("parallax-load");
    if (args.secret_file.empty()) {
      args.secret_file = dir + "/secret";
      std::random_device rd;
      std::ofstream(args.secret_file) << "load-" << std::hex << rd() << rd() << "\n";
      chmod(args.secret_file.c_str(), 0600);
    }
    child = StartCoordinator(args, dir);
  }
  std::string secret;
  if (!args.secret_file.empty()) {
    StatusOr<std::string> s = ReadSecretFile(args.secret_file);
    if (!s.ok()) {
      std::cerr << "coordinator_load: " << s.status().message() << "\n";
      return 2;
    }
    secret = *s;
  }

  Series heartbeat, submit, poll;
  std::vector<std::unique_ptr<CoordinatorClient>> agents;
  const std::string prefix = "load-" + std::to_string(getpid()) + "-";
  for (int a = 0; a < args.agents; ++a) {
    agents.push_back(MustConnect(args, secret, "agent:" + prefix + std::to_string(a)));
    rpc::AgentInfo info;
    info.name = prefix + std::to_string(a);
    info.address = "127.0.0.1:" + std::to_string(20000 + a);
    info.slots = 1;
    info.gpus = 0;
    if (Status s = agents.back()->RegisterAgent(info); !s.ok()) heartbeat.Error(s);
  }
  std::vector<std::unique_ptr<CoordinatorClient>> clients;
  for (int c = 0; c < args.clients; ++c) {
    clients.push_back(MustConnect(args, secret, "load-client-" + std::to_string(c)));
  }

  const auto start = Clock::now() + std::chrono::milliseconds(200);
  const auto end = start + std::chrono::seconds(args.duration_s);
  std::mutex ids_mu;
  std::set<int64_t> submitted;  // guarded by ids_mu
  std::vector<std::thread> threads;
  for (int a = 0; a < args.agents; ++a) {
    threads.emplace_back([&, a] {
      std::mt19937 rng(static_cast<unsigned>(a));
      auto next = start + std::chrono::milliseconds(
                              std::uniform_int_distribution<int>(0, args.interval_ms - 1)(rng));
      std::vector<double> lat;
      const std::string name = prefix + std::to_string(a);
      while (true) {
        std::this_thread::sleep_until(next);  // pacing, not synchronisation
        auto t0 = Clock::now();
        if (t0 >= end) break;
        auto r = agents[a]->Heartbeat(name);
        if (!r.ok()) {
          heartbeat.Error(r.status());
        } else if (!r->known) {
          heartbeat.Error(Internal("agent " + name + " unknown to the coordinator"));
        } else {
          lat.push_back(Ms(Clock::now() - t0));
        }
        next += std::chrono::milliseconds(args.interval_ms);
      }
      heartbeat.Add(lat);
    });
  }
  for (int c = 0; c < args.clients; ++c) {
    threads.emplace_back([&, c] {
      std::mt19937 rng(static_cast<unsigned>(1'000 + c));
      auto next = start + std::chrono::milliseconds(std::uniform_int_distribution<int>(
                              0, args.client_interval_ms - 1)(rng));
      std::vector<double> submit_ms, poll_ms;
      std::vector<int64_t> mine;
      while (true) {
        std::this_thread::sleep_until(next);
        auto t0 = Clock::now();
        if (t0 >= end) break;
        auto job = clients[c]->SubmitJob(kJob, "load.toml");
        auto t1 = Clock::now();
        if (!job.ok()) {
          submit.Error(job.status());
        } else {
          submit_ms.push_back(Ms(t1 - t0));
          mine.push_back(job->id);
        }
        if (!mine.empty()) {
          int64_t id = mine[std::uniform_int_distribution<size_t>(0, mine.size() - 1)(rng)];
          auto t2 = Clock::now();
          auto got = clients[c]->GetJob(id);
          if (!got.ok()) {
            poll.Error(got.status());
          } else if (got->id != id) {
            poll.Error(Internal("GetJob(" + std::to_string(id) + ") returned another job"));
          } else {
            poll_ms.push_back(Ms(Clock::now() - t2));
          }
        }
        next += std::chrono::milliseconds(args.client_interval_ms);
      }
      submit.Add(submit_ms);
      poll.Add(poll_ms);
      std::lock_guard<std::mutex> lock(ids_mu);
      submitted.insert(mine.begin(), mine.end());
    });
  }
  for (auto& t : threads) t.join();

  // No lost job: every id a submit returned is listed now.
  auto listed = clients[0]->ListJobs();
  int64_t lost = 0;
  if (!listed.ok()) {
    poll.Error(listed.status());
    lost = static_cast<int64_t>(submitted.size());
  } else {
    std::set<int64_t> present;
    for (const auto& j : *listed) present.insert(j.id);
    for (int64_t id : submitted) lost += present.count(id) == 0;
  }
  Emit("heartbeat", heartbeat, args);
  Emit("submit", submit, args);
  Emit("get_job", poll, args);
  int64_t errors = heartbeat.errors + submit.errors + poll.errors;
  nlohmann::json summary = {{"bench", "coordinator_load"}, {"call", "summary"},
                            {"submitted", submitted.size()}, {"lost", lost},
                            {"errors", errors},            {"agents", args.agents},
                            {"clients", args.clients},     {"duration_s", args.duration_s}};
  std::cout << summary.dump() << std::endl;
  if (child > 0) {
    kill(child, SIGTERM);
    int status = 0;
    waitpid(child, &status, 0);
    std::error_code ec;
    if (errors == 0 && lost == 0) std::filesystem::remove_all(dir, ec);
  }
  return errors == 0 && lost == 0 ? 0 : 1;
}

}  // namespace
}  // namespace parallax

int main(int argc, char** argv) { return parallax::Main(argc, argv); }
