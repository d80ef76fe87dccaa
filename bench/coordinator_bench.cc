// coordinator_bench: control-plane latency and heartbeat load against one
// real parallax-coordinator process (started here on a fresh database, or
// given with --coordinator).
//
//   submit / status round trips: one client, sequential calls;
//   heartbeats: N simulated agents, each its own connection and thread,
//   heartbeating every --interval-ms (paced) or back to back (saturate).
//
// Prints one JSON object per line and statistic; each value is the median
// over --runs runs of that run's statistic.
#include <signal.h>
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
#include <random>
#include <thread>

#include "bench/bench_stats.h"
#include "bench/spawn_coordinator.h"
#include "core/rpc/coordinator_client.h"


namespace parallax {
namespace {

using Clock = std::chrono::steady_clock;

double Ms(Clock::duration d) { return std::chrono::duration<double, std::milli>(d).count(); }

double Percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  size_t i = static_cast<size_t>(p / 100.0 * static_cast<double>(v.size() - 1) + 0.5);
  return v[std::min(i, v.size() - 1)];
}

using ::parallax::bench::Median;

struct Args {
  std::string coordinator;
  std::string coordinator_bin;
  int runs = 5;
  int agents = 500;
  int interval_ms = 1000;
  int duration_s = 10;
  int saturate_s = 5;
  int calls = 300;
};

const char kJob[] = R"([job]
name = "bench"
workers = 4
[trainer]
model = "lm"
)";

std::unique_ptr<CoordinatorClient> MustConnect(const std::string& address, const std::string& name) {
  CoordinatorClientOptions o;
  o.address = address;
  o.client_name = name;
  o.connect_timeout_ms = 10'000;
  auto c = CoordinatorClient::Connect(o);
  if (!c.ok()) {
    std::cerr << "coordinator_bench: " << c.status().ToString() << "\n";
    std::exit(1);
  }
  return std::move(c).value();
}

void Emit(const std::string& metric, const std::string& unit, int runs, double value,
          const Args& args, nlohmann::json extra = {}, const std::string& stat = "median") {
  nlohmann::json o = {{"bench", "coordinator"}, {"impl", "parallax"}, {"metric", metric},
                      {"unit", unit},           {"stat", stat},       {"runs", runs},
                      {"value", value}};
  o["agents"] = args.agents;
  o["interval_ms"] = args.interval_ms;
  for (auto& [k, v] : extra.items()) o[k] = v;
  std::cout << o.dump() << std::endl;
}

// Round-trip latencies of `calls` sequential calls of `fn` (ms).
template <typename Fn>
std::vector<double> Time(int calls, Fn fn) {
  std::vector<double> out;
  out.reserve(calls);
  for (int i = 0; i < calls; ++i) {
    auto t0 = Clock::now();
    fn();
    out.push_back(Ms(Clock::now() - t0));
  }
  return out;
}

struct HeartbeatRun {
  std::vector<double> latencies_ms;
  double per_second = 0;
  int errors = 0;
};

// N agents, one connection and thread each. interval_ms > 0: paced, each
// agent at a random phase; 0: back to back.
HeartbeatRun Heartbeats(const Args& args, int run, int interval_ms, int seconds) {
  std::vector<std::unique_ptr<CoordinatorClient>> clients;
  for (int a = 0; a < args.agents; ++a) {
    std::string name = "bench-" + std::to_string(run) + "-" + std::to_string(a);
    clients.push_back(MustConnect(args.coordinator, "agent:" + name));
    rpc::AgentInfo info;
    info.name = name;
    info.address = "127.0.0.1:" + std::to_string(20000 + a);
    info.slots = 1;
    info.gpus = 0;
    Status s = clients.back()->RegisterAgent(info);
    if (!s.ok()) {
      std::cerr << "coordinator_bench: register: " << s.ToString() << "\n";
      std::exit(1);
    }
  }
  std::vector<std::vector<double>> lat(args.agents);
  std::atomic<int> errors{0};
  auto start = Clock::now() + std::chrono::milliseconds(200);
  auto end = start + std::chrono::seconds(seconds);
  std::vector<std::thread> threads;
  for (int a = 0; a < args.agents; ++a) {
    threads.emplace_back([&, a] {
      std::mt19937 rng(static_cast<unsigned>(run * 100'003 + a));
      auto next = start;
      if (interval_ms > 0) {
        next += std::chrono::milliseconds(std::uniform_int_distribution<int>(0, interval_ms - 1)(rng));
      }
      std::string name = "bench-" + std::to_string(run) + "-" + std::to_string(a);
      while (true) {
        if (interval_ms > 0) std::this_thread::sleep_until(next);
        auto t0 = Clock::now();
        if (t0 >= end) break;
        auto r = clients[a]->Heartbeat(name);
        auto t1 = Clock::now();
        if (!r.ok() || !r->known) {
          ++errors;
        } else {
          lat[a].push_back(Ms(t1 - t0));
        }
        next += std::chrono::milliseconds(interval_ms);
      }
    });
  }
  for (auto& t : threads) t.join();
  HeartbeatRun out;
  for (auto& v : lat) out.latencies_ms.insert(out.latencies_ms.end(), v.begin(), v.end());
  out.per_second = static_cast<double>(out.latencies_ms.size()) / seconds;
  out.errors = errors;
  return out;
}

pid_t StartCoordinator(Args& args, const std::string& dir) {
  // No job limit: the submitted jobs stay PENDING (agents here never poll).
  auto c = bench::SpawnCoordinator(args.coordinator_bin, dir, {"--max-active-jobs", "0"});
  if (!c.ok()) {
    std::cerr << "coordinator_bench: " << c.status().ToString() << "\n";
    std::exit(1);
  }
  args.coordinator = c->address;
  return c->pid;
}

int Main(int argc, char** argv) {
  Args args;
  CLI::App app{"Coordinator control-plane benchmark (JSON lines on stdout)"};
  app.add_option("--coordinator", args.coordinator,
                 "HOST:PORT of a running coordinator (default: start one on a fresh database)");
  app.add_option("--coordinator-bin", args.coordinator_bin,
                 "parallax-coordinator to start (default: next to this binary)");
  app.add_option("--runs", args.runs, "runs per measurement; the median is reported")->capture_default_str();
  app.add_option("--agents", args.agents, "simulated agents")->capture_default_str();
  app.add_option("--interval-ms", args.interval_ms, "heartbeat period of each agent")->capture_default_str();
  app.add_option("--duration-s", args.duration_s, "length of a paced heartbeat run")->capture_default_str();
  app.add_option("--saturate-s", args.saturate_s, "length of a back-to-back run")->capture_default_str();
  app.add_option("--calls", args.calls, "sequential submit/status calls per run")->capture_default_str();
  CLI11_PARSE(app, argc, argv);

  pid_t child = 0;
  std::string dir;
  if (args.coordinator.empty()) {
    if (args.coordinator_bin.empty()) {
      args.coordinator_bin = bench::NextToThisBinary("parallax-coordinator");
    }
    dir = bench::MakeBenchDir("parallax-bench");
    child = StartCoordinator(args, dir);
  }

  auto client = MustConnect(args.coordinator, "bench");
  std::vector<double> submit_p50, submit_p99, status_p50, status_p99;
  std::vector<double> hb_p50, hb_p99, hb_max, hb_rate, sat_rate, sat_p99;
  int errors = 0;
  for (int run = 0; run < args.runs; ++run) {
    int64_t last_id = 0;
    auto submit = Time(args.calls, [&] {
      auto j = client->SubmitJob(kJob, "bench.toml");
      if (!j.ok()) ++errors; else last_id = j->id;
    });
    submit_p50.push_back(Percentile(submit, 50));
    submit_p99.push_back(Percentile(submit, 99));
    auto status = Time(args.calls, [&] {
      if (!client->GetJob(last_id).ok()) ++errors;
    });
    status_p50.push_back(Percentile(status, 50));
    status_p99.push_back(Percentile(status, 99));

    HeartbeatRun paced = Heartbeats(args, run, args.interval_ms, args.duration_s);
    hb_p50.push_back(Percentile(paced.latencies_ms, 50));
    hb_p99.push_back(Percentile(paced.latencies_ms, 99));
    hb_max.push_back(Percentile(paced.latencies_ms, 100));
    hb_rate.push_back(paced.per_second);
    errors += paced.errors;

    HeartbeatRun sat = Heartbeats(args, run + 1000, 0, args.saturate_s);
    sat_rate.push_back(sat.per_second);
    sat_p99.push_back(Percentile(sat.latencies_ms, 99));
    errors += sat.errors;
    std::cerr << "run " << run + 1 << "/" << args.runs << ": submit p50 " << submit_p50.back()
              << " ms, heartbeat p99 " << hb_p99.back() << " ms at " << hb_rate.back()
              << "/s, saturated " << sat_rate.back() << "/s\n";
  }
  Emit("submit_latency_p50", "ms", args.runs, Median(submit_p50), args, {{"calls", args.calls}});
  Emit("submit_latency_p99", "ms", args.runs, Median(submit_p99), args, {{"calls", args.calls}});
  Emit("status_latency_p50", "ms", args.runs, Median(status_p50), args, {{"calls", args.calls}});
  Emit("status_latency_p99", "ms", args.runs, Median(status_p99), args, {{"calls", args.calls}});
  Emit("heartbeat_latency_p50", "ms", args.runs, Median(hb_p50), args, {{"duration_s", args.duration_s}});
  Emit("heartbeat_latency_p99", "ms", args.runs, Median(hb_p99), args, {{"duration_s", args.duration_s}});
  Emit("heartbeat_latency_max", "ms", args.runs, Median(hb_max), args, {{"duration_s", args.duration_s}});
  Emit("heartbeats_per_s_paced", "heartbeats/s", args.runs, Median(hb_rate), args,
       {{"duration_s", args.duration_s}});
  Emit("heartbeats_per_s_saturated", "heartbeats/s", args.runs, Median(sat_rate), args,
       {{"duration_s", args.saturate_s}, {"interval_ms", 0}});
  Emit("heartbeat_latency_p99_saturated", "ms", args.runs, Median(sat_p99), args,
       {{"duration_s", args.saturate_s}, {"interval_ms", 0}});
  Emit("errors", "count", args.runs, errors, args, {}, "sum");

  client.reset();
  if (child > 0) {
    kill(child, SIGTERM);
    int st;
    waitpid(child, &st, 0);
    std::filesystem::remove_all(dir);
  }
  return errors == 0 ? 0 : 1;
}

}  // namespace
}  // namespace parallax

int main(int argc, char** argv) { return parallax::Main(argc, argv); }
