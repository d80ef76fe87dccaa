// coordinator_load: the coordinator under a cluster's worth of load, against
// one real parallax-coordinator process started here on a fresh database
// (with a secret file, so every call is authenticated).
//
//   --preload jobs are written PENDING into the database before the
//   coordinator starts (a cluster with a queue);
//   --agents simulated agents, each with the three connections and two
//   threads a real agent has, register, heartbeat every --interval-ms,
//   long-poll for work, report every task RUNNING at once and EXITED 0 after
//   a run time drawn from [--task-ms-min, --task-ms-max];
//   after --warmup-s, --clients clients, each its own connection and thread,
//   submit a job and read one of their jobs (GetJob) every
//   --client-interval-ms, for --duration-s.
//
// Every submitted id must then be listed by the coordinator. The
// coordinator's peak RSS and CPU time over the timed window are read from
// /proc. With --baseline-bin, the same run is made with that binary too,
// alternating (current, baseline, current, ...) for --rounds rounds, and the
// ratio of submits per second is printed beside the absolute figures.
// --coordinator-arg adds a flag to every coordinator started (its web server,
// for bench/web_overhead.sh).
//
// Prints one JSON object per line (latency percentiles per call kind,
// counts, errors, lost jobs, resources, ratios) and exits 1 if a run of the
// current binary had an error or lost a job. See docs/PERFORMANCE.md.
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
#include <iterator>
#include <mutex>
#include <nlohmann/json.hpp>
#include <random>
#include <set>
#include <sstream>
#include <thread>

#include "bench/bench_stats.h"
#include "bench/spawn_coordinator.h"
#include "coordinator/store/sqlite_state_store.h"
#include "core/base/secret.h"
#include "core/rpc/coordinator_client.h"

namespace parallax {
namespace {

using Clock = std::chrono::steady_clock;

double Ms(Clock::duration d) { return std::chrono::duration<double, std::milli>(d).count(); }

double Percentile(const std::vector<double>& v, double p) {  // REQUIRES: v sorted
  if (v.empty()) return 0;
  size_t i = static_cast<size_t>(p / 100.0 * static_cast<double>(v.size() - 1) + 0.5);
  return v[std::min(i, v.size() - 1)];
}

struct Args {
  std::string coordinator_bin;
  std::string baseline_bin;
  std::vector<std::string> coordinator_args;  // appended to every spawned coordinator's flags
  int rounds = 1;
  int agents = 200;
  int slots = 4;
  int clients = 20;
  int preload = 1'000;
  int preload_schema = 0;
  int warmup_s = 5;
  int duration_s = 60;
  int interval_ms = 1'000;
  int client_interval_ms = 100;
  int poll_timeout_ms = 10'000;
  int task_ms_min = 20'000;
  int task_ms_max = 40'000;
  std::string dir = "/tmp";
};

const char kJob[] =
    "[job]\nname = \"load\"\nworkers = 2\narch = \"allreduce\"\n"
    "[trainer]\ncommand = [\"/bin/true\"]\n";

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

struct Calls {
  Series heartbeat, submit, get_job, report, poll, setup;
};

StatusOr<std::unique_ptr<CoordinatorClient>> Connect(const std::string& address,
                                                     const std::string& secret,
                                                     const std::string& name) {
  CoordinatorClientOptions o;
  o.address = address;
  o.auth_token = secret;
  o.client_name = name;
  o.connect_timeout_ms = 10'000;
  o.rpc_timeout_ms = 10'000;  // a call slower than this is an error of the run
  o.retry_deadline_ms = 0;
  return CoordinatorClient::Connect(o);
}

// Writes `n` PENDING jobs into a fresh database at `path`, many writers at
// once so that they are group-committed.
Status Preload(const std::string& path, int n, int schema) {
  coordinator::SqliteStateStoreOptions options;
  options.path = path;
  options.max_schema_version = schema;
  PX_ASSIGN_OR_RETURN(std::unique_ptr<coordinator::StateStore> store,
                      coordinator::OpenSqliteStateStore(options));
  std::atomic<int> next{0};
  std::mutex mu;
  Status failed;
  std::vector<std::thread> writers;
  for (int w = 0; w < 16; ++w) {
    writers.emplace_back([&] {
      coordinator::NewJob job;
      job.name = "load";
      job.workers = 2;
      job.job_text = kJob;
      job.job_path = "load.toml";
      job.submitted_by = "coordinator_load";
      while (next++ < n) {
        StatusOr<coordinator::JobRecord> r = store->CreateJob(job, 1'700'000'000'000);
        if (!r.ok()) {
          std::lock_guard<std::mutex> lock(mu);
          failed = r.status();
          return;
        }
      }
    });
  }
  for (auto& t : writers) t.join();
  return failed;
}

// Resident memory (VmRSS, kB) and CPU time (user + system, s) of `pid`.
struct Usage {
  int64_t rss_kb = 0;
  double cpu_s = 0;
};
Usage ReadUsage(pid_t pid) {
  Usage u;
  std::ifstream status("/proc/" + std::to_string(pid) + "/status");
  for (std::string line; std::getline(status, line);) {
    if (line.rfind("VmRSS:", 0) == 0) u.rss_kb = std::stoll(line.substr(6));
  }
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string text((std::istreambuf_iterator<char>(stat)), std::istreambuf_iterator<char>());
  // Fields after the command (which may hold spaces) start after the last ')'.
  std::istringstream rest(text.substr(text.rfind(')') + 2));
  std::vector<std::string> f((std::istream_iterator<std::string>(rest)),
                             std::istream_iterator<std::string>());
  if (f.size() > 12) {
    u.cpu_s = static_cast<double>(std::stoll(f[11]) + std::stoll(f[12])) /
              static_cast<double>(sysconf(_SC_CLK_TCK));
  }
  return u;
}

// One simulated agent: what parallax-agent does towards the coordinator,
// with tasks that run for a while and exit 0 instead of processes.
class SimAgent {
 public:
  SimAgent(const Args& args, std::string name, Calls* calls)
      : args_(args), name_(std::move(name)), calls_(calls), rng_(std::hash<std::string>()(name_)) {}

  // Connects its three connections and registers.
  Status Start(const std::string& address, const std::string& secret) {
    for (auto* c : {&heartbeat_, &poll_, &other_}) {
      PX_ASSIGN_OR_RETURN(*c, Connect(address, secret, "agent:" + name_));
    }
    rpc::AgentInfo info;
    info.name = name_;
    info.address = "127.0.0.1:1";
    info.slots = args_.slots;
    info.gpus = 0;
    PX_RETURN_IF_ERROR(other_->RegisterAgent(info));
    started_ = true;
    return Status::Ok();
  }

  // REQUIRES: Start succeeded (otherwise does nothing).
  // Heartbeats from `start`, polls and reports until `end`; latencies count
  // from `window` on.
  void Run(Clock::time_point start, Clock::time_point window, Clock::time_point end) {
    if (!started_) return;
    window_ = window;
    std::thread beat([&] { Heartbeats(start, end); });
    Polls(end);
    beat.join();
  }

 private:
  void Heartbeats(Clock::time_point start, Clock::time_point end) {
    auto next = start + std::chrono::milliseconds(
                            std::uniform_int_distribution<int>(0, args_.interval_ms - 1)(rng_));
    std::vector<double> lat;
    while (true) {
      std::this_thread::sleep_until(next);  // pacing, not synchronisation
      const auto t0 = Clock::now();
      if (t0 >= end) break;
      auto r = heartbeat_->Heartbeat(name_);
      if (!r.ok()) {
        calls_->heartbeat.Error(r.status());
      } else if (!r->known) {
        calls_->heartbeat.Error(Internal("agent " + name_ + " unknown to the coordinator"));
      } else if (t0 >= window_) {
        lat.push_back(Ms(Clock::now() - t0));
      }
      next += std::chrono::milliseconds(args_.interval_ms);
    }
    calls_->heartbeat.Add(lat);
  }

  void Polls(Clock::time_point end) {
    std::vector<double> report_ms;
    std::uniform_int_distribution<int> run_ms(args_.task_ms_min, args_.task_ms_max);
    while (Clock::now() < end) {
      auto wake = std::min(end, Clock::now() + std::chrono::milliseconds(args_.poll_timeout_ms));
      for (const auto& [key, ends] : tasks_) wake = std::min(wake, ends);
      rpc::PollRequest req;
      req.agent_name = name_;
      req.timeout_ms = std::max<int64_t>(0, std::chrono::duration_cast<std::chrono::milliseconds>(
                                                wake - Clock::now()).count());
      for (const auto& [key, ends] : tasks_) req.running.push_back(key);
      rpc::PollResponse resp;
      Status s = poll_->Call(
          [&](rpc::CoordinatorClient& c) { c.PollAssignments(resp, poll_->Header(), req); },
          req.timeout_ms);
      if (!s.ok()) {
        calls_->poll.Error(s);
        std::this_thread::sleep_for(std::chrono::milliseconds(100));  // an agent's backoff
        continue;
      }
      std::vector<rpc::TaskReport> reports;
      auto add = [&](const rpc::TaskKey& key, rpc::TaskState::type state) {
        rpc::TaskReport r;
        r.key = key;
        r.state = state;
        if (state == rpc::TaskState::EXITED) r.__set_exit_code(0);
        if (state == rpc::TaskState::KILLED) r.__set_signal(SIGTERM);
        reports.push_back(r);
      };
      for (const auto& a : resp.start) {
        tasks_.emplace_back(a.key, Clock::now() + std::chrono::milliseconds(run_ms(rng_)));
        add(a.key, rpc::TaskState::RUNNING);
      }
      const auto now = Clock::now();
      for (auto it = tasks_.begin(); it != tasks_.end();) {
        const bool stopped = std::count(resp.stop.begin(), resp.stop.end(), it->first) > 0;
        if (stopped || it->second <= now) {
          add(it->first, stopped ? rpc::TaskState::KILLED : rpc::TaskState::EXITED);
          it = tasks_.erase(it);
        } else {
          ++it;
        }
      }
      if (reports.empty()) continue;
      const auto t0 = Clock::now();
      Status r = other_->Call(
          [&](rpc::CoordinatorClient& c) { c.ReportTasks(other_->Header(), name_, reports); });
      if (!r.ok()) {
        calls_->report.Error(r);
      } else if (t0 >= window_) {
        report_ms.push_back(Ms(Clock::now() - t0));
      }
    }
    calls_->report.Add(report_ms);
  }

  const Args& args_;
  const std::string name_;
  Calls* const calls_;
  std::mt19937 rng_;
  std::unique_ptr<CoordinatorClient> heartbeat_, poll_, other_;
  bool started_ = false;
  Clock::time_point window_;
  std::vector<std::pair<rpc::TaskKey, Clock::time_point>> tasks_;  // poll thread only
};

struct RunResult {
  bool ok = false;
  double submits_per_s = 0;
};

nlohmann::json Line(const Args& args, const std::string& impl, int round, const std::string& call) {
  return {{"bench", "coordinator_load"}, {"impl", impl},          {"round", round},
          {"call", call},                {"agents", args.agents}, {"clients", args.clients},
          {"preload", args.preload},     {"duration_s", args.duration_s}};
}

void Emit(const Args& args, const std::string& impl, int round, const std::string& call,
          Series& s) {
  std::sort(s.ms.begin(), s.ms.end());
  nlohmann::json o = Line(args, impl, round, call);
  o["count"] = s.ms.size();
  o["errors"] = s.errors.load();
  o["p50_ms"] = Percentile(s.ms, 50);
  o["p90_ms"] = Percentile(s.ms, 90);
  o["p99_ms"] = Percentile(s.ms, 99);
  o["max_ms"] = s.ms.empty() ? 0.0 : s.ms.back();
  o["per_second"] = static_cast<double>(s.ms.size()) / args.duration_s;
  if (!s.first_error.empty()) o["first_error"] = s.first_error;
  std::cout << o.dump() << std::endl;
}

// The timed window: clients submit and read while the agents run. Returns
// the ids that submits acknowledged.
std::set<int64_t> RunClients(const Args& args, const std::string& address,
                             const std::string& secret, Clock::time_point start,
                             Clock::time_point end, Calls* calls) {
  std::mutex ids_mu;
  std::set<int64_t> submitted;
  std::vector<std::thread> threads;
  for (int c = 0; c < args.clients; ++c) {
    threads.emplace_back([&, c] {
      auto client = Connect(address, secret, "load-client-" + std::to_string(c));
      if (!client.ok()) return calls->setup.Error(client.status());
      std::mt19937 rng(static_cast<unsigned>(1'000 + c));
      auto next = start + std::chrono::milliseconds(std::uniform_int_distribution<int>(
                              0, args.client_interval_ms - 1)(rng));
      std::vector<double> submit_ms, get_ms;
      std::vector<int64_t> mine;
      while (true) {
        std::this_thread::sleep_until(next);
        const auto t0 = Clock::now();
        if (t0 >= end) break;
        auto job = (*client)->SubmitJob(kJob, "load.toml");
        if (!job.ok()) {
          calls->submit.Error(job.status());
        } else {
          submit_ms.push_back(Ms(Clock::now() - t0));
          mine.push_back(job->id);
        }
        if (!mine.empty()) {
          int64_t id = mine[std::uniform_int_distribution<size_t>(0, mine.size() - 1)(rng)];
          const auto t2 = Clock::now();
          auto got = (*client)->GetJob(id);
          if (!got.ok()) {
            calls->get_job.Error(got.status());
          } else if (got->id != id) {
            calls->get_job.Error(Internal("GetJob(" + std::to_string(id) + ") returned another job"));
          } else {
            get_ms.push_back(Ms(Clock::now() - t2));
          }
        }
        next += std::chrono::milliseconds(args.client_interval_ms);
      }
      calls->submit.Add(submit_ms);
      calls->get_job.Add(get_ms);
      std::lock_guard<std::mutex> lock(ids_mu);
      submitted.insert(mine.begin(), mine.end());
    });
  }
  for (auto& t : threads) t.join();
  return submitted;
}

// Samples the coordinator's RSS every 100 ms until `stop`.
class UsageSampler {
 public:
  explicit UsageSampler(pid_t pid) : pid_(pid), first_(ReadUsage(pid)) {
    thread_ = std::thread([this] {
      while (!stop_) {
        peak_kb_ = std::max(peak_kb_.load(), ReadUsage(pid_).rss_kb);
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
      }
    });
  }
  // Peak RSS (kB) and CPU seconds since construction.
  std::pair<int64_t, double> Finish() {
    stop_ = true;
    thread_.join();
    Usage last = ReadUsage(pid_);
    return {std::max(peak_kb_.load(), last.rss_kb), last.cpu_s - first_.cpu_s};
  }

 private:
  const pid_t pid_;
  const Usage first_;
  std::atomic<bool> stop_{false};
  std::atomic<int64_t> peak_kb_{0};
  std::thread thread_;
};

RunResult RunOnce(const Args& args, const std::string& bin, const std::string& impl, int round) {
  RunResult result;
  const std::string dir = bench::MakeBenchDir("parallax-load", args.dir);
  if (dir.empty()) {
    std::cerr << "coordinator_load: cannot create a directory under " << args.dir << "\n";
    return result;
  }
  const std::string secret_file = dir + "/secret";
  std::random_device rd;
  std::ofstream(secret_file) << "load-" << std::hex << rd() << rd() << "\n";
  chmod(secret_file.c_str(), 0600);
  const std::string secret = ReadSecretFile(secret_file).value();
  const auto t_preload = Clock::now();
  if (Status s = Preload(dir + "/state.db", args.preload, args.preload_schema); !s.ok()) {
    std::cerr << "coordinator_load: preload: " << s.ToString() << "\n";
    return result;
  }
  const double preload_s = Ms(Clock::now() - t_preload) / 1000;
  // No job limit: the queue is what is measured.
  std::vector<std::string> flags = {"--secret-file", secret_file, "--max-active-jobs", "0"};
  flags.insert(flags.end(), args.coordinator_args.begin(), args.coordinator_args.end());
  auto spawned = bench::SpawnCoordinator(bin, dir, flags, 120'000);
  if (!spawned.ok()) {
    std::cerr << "coordinator_load: " << spawned.status().ToString() << "\n";
    return result;
  }
  const std::string address = spawned->address;
  Calls calls;
  std::vector<std::unique_ptr<SimAgent>> agents;
  const std::string prefix = "load-" + std::to_string(getpid()) + "-";
  for (int a = 0; a < args.agents; ++a) {
    agents.push_back(std::make_unique<SimAgent>(args, prefix + std::to_string(a), &calls));
  }
  // Agents connect and register in parallel, as a cluster's hosts would.
  const auto t_register = Clock::now();
  {
    std::vector<std::thread> starts;
    for (auto& a : agents) {
      starts.emplace_back([&, agent = a.get()] {
        if (Status s = agent->Start(address, secret); !s.ok()) calls.setup.Error(s);
      });
    }
    for (auto& t : starts) t.join();
  }
  const double register_s = Ms(Clock::now() - t_register) / 1000;
  const auto start = Clock::now() + std::chrono::milliseconds(100);
  const auto window = start + std::chrono::seconds(args.warmup_s);
  const auto end = window + std::chrono::seconds(args.duration_s);
  std::vector<std::thread> agent_threads;
  for (auto& a : agents) agent_threads.emplace_back([&, agent = a.get()] { agent->Run(start, window, end); });
  std::this_thread::sleep_until(window);
  UsageSampler usage(spawned->pid);
  std::set<int64_t> submitted = RunClients(args, address, secret, window, end, &calls);
  auto [peak_kb, cpu_s] = usage.Finish();
  for (auto& t : agent_threads) t.join();

  // No lost job: every id a submit returned is listed now.
  int64_t lost = static_cast<int64_t>(submitted.size());
  if (auto client = Connect(address, secret, "load-check"); client.ok()) {
    if (auto listed = (*client)->ListJobs(); listed.ok()) {
      std::set<int64_t> present;
      for (const auto& j : *listed) present.insert(j.id);
      lost = 0;
      for (int64_t id : submitted) lost += present.count(id) == 0;
    } else {
      calls.setup.Error(listed.status());
    }
  } else {
    calls.setup.Error(client.status());
  }
  kill(spawned->pid, SIGTERM);
  waitpid(spawned->pid, nullptr, 0);

  Emit(args, impl, round, "heartbeat", calls.heartbeat);
  Emit(args, impl, round, "submit", calls.submit);
  Emit(args, impl, round, "get_job", calls.get_job);
  Emit(args, impl, round, "report", calls.report);
  const int64_t errors = calls.heartbeat.errors + calls.submit.errors + calls.get_job.errors +
                         calls.report.errors + calls.poll.errors + calls.setup.errors;
  nlohmann::json usage_line = Line(args, impl, round, "coordinator");
  usage_line["rss_mb_peak"] = static_cast<double>(peak_kb) / 1024;
  usage_line["cpu_s"] = cpu_s;
  usage_line["cpu_cores"] = cpu_s / args.duration_s;
  usage_line["preload_s"] = preload_s;
  usage_line["register_s"] = register_s;
  std::cout << usage_line.dump() << std::endl;
  nlohmann::json summary = Line(args, impl, round, "summary");
  summary["submitted"] = submitted.size();
  summary["submits_per_s"] = static_cast<double>(submitted.size()) / args.duration_s;
  summary["lost"] = lost;
  summary["errors"] = errors;
  summary["poll_errors"] = calls.poll.errors.load();
  summary["setup_errors"] = calls.setup.errors.load();
  if (!calls.poll.first_error.empty()) summary["first_poll_error"] = calls.poll.first_error;
  if (!calls.setup.first_error.empty()) summary["first_setup_error"] = calls.setup.first_error;
  std::cout << summary.dump() << std::endl;
  result.ok = errors == 0 && lost == 0;
  result.submits_per_s = static_cast<double>(submitted.size()) / args.duration_s;
  std::error_code ec;
  if (result.ok) std::filesystem::remove_all(dir, ec);
  return result;
}

int Main(int argc, char** argv) {
  Args args;
  CLI::App app{"Coordinator load test: a queue, agents that heartbeat, poll and report, and "
               "clients submitting and reading (JSON lines on stdout; exit 1 on any error or "
               "lost job of the current binary)"};
  app.add_option("--coordinator-bin", args.coordinator_bin,
                 "parallax-coordinator to measure (default: next to this binary)");
  app.add_option("--baseline-bin", args.baseline_bin,
                 "another parallax-coordinator to measure the same way, alternating with "
                 "--coordinator-bin (e.g. one built from an earlier commit)");
  app.add_option("--coordinator-arg", args.coordinator_args,
                 "a flag for every coordinator started, after the benchmark's own (repeat it; "
                 "e.g. --coordinator-arg=--http --coordinator-arg=127.0.0.1:0)")
      ->allow_extra_args(false);
  app.add_option("--rounds", args.rounds, "runs of each binary")->capture_default_str()
      ->check(CLI::PositiveNumber);
  app.add_option("--agents", args.agents, "simulated agents")->capture_default_str();
  app.add_option("--slots", args.slots, "slots of each agent")->capture_default_str()
      ->check(CLI::PositiveNumber);
  app.add_option("--clients", args.clients, "submitting and reading clients")
      ->capture_default_str();
  app.add_option("--preload", args.preload, "PENDING jobs in the database at start")
      ->capture_default_str()->check(CLI::NonNegativeNumber);
  app.add_option("--preload-schema", args.preload_schema,
                 "schema version of the preloaded database (0: this build's); give the "
                 "oldest version every measured binary opens")
      ->capture_default_str()->check(CLI::NonNegativeNumber);
  app.add_option("--warmup-s", args.warmup_s, "agents alone before the timed window")
      ->capture_default_str()->check(CLI::NonNegativeNumber);
  app.add_option("--duration-s", args.duration_s, "length of the timed window")
      ->capture_default_str()->check(CLI::PositiveNumber);
  app.add_option("--interval-ms", args.interval_ms, "heartbeat period of each agent")
      ->capture_default_str()->check(CLI::PositiveNumber);
  app.add_option("--client-interval-ms", args.client_interval_ms,
                 "period of each client's submit + read")
      ->capture_default_str()->check(CLI::PositiveNumber);
  app.add_option("--poll-timeout-ms", args.poll_timeout_ms, "long-poll wait of each agent")
      ->capture_default_str()->check(CLI::PositiveNumber);
  app.add_option("--task-ms-min", args.task_ms_min, "shortest simulated task run")
      ->capture_default_str()->check(CLI::NonNegativeNumber);
  app.add_option("--task-ms-max", args.task_ms_max, "longest simulated task run")
      ->capture_default_str()->check(CLI::NonNegativeNumber);
  app.add_option("--dir", args.dir,
                 "where each run's database and logs go (its disk's fsync is in every commit)")
      ->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  if (args.task_ms_max < args.task_ms_min) {
    std::cerr << "coordinator_load: --task-ms-max must be >= --task-ms-min\n";
    return 2;
  }
  if (args.coordinator_bin.empty()) {
    args.coordinator_bin = bench::NextToThisBinary("parallax-coordinator");
  }
  bool ok = true;
  std::vector<double> current, baseline;
  for (int round = 1; round <= args.rounds; ++round) {
    RunResult r = RunOnce(args, args.coordinator_bin, "current", round);
    ok &= r.ok;
    current.push_back(r.submits_per_s);
    if (args.baseline_bin.empty()) continue;
    baseline.push_back(RunOnce(args, args.baseline_bin, "baseline", round).submits_per_s);
    nlohmann::json ratio = Line(args, "current/baseline", round, "ratio");
    ratio["metric"] = "submits_per_s";
    ratio["value"] = baseline.back() > 0 ? current.back() / baseline.back() : 0.0;
    std::cout << ratio.dump() << std::endl;
  }
  if (!baseline.empty()) {
    nlohmann::json median = Line(args, "current/baseline", 0, "ratio");
    median["metric"] = "submits_per_s";
    median["stat"] = "median";
    median["rounds"] = args.rounds;
    const double b = bench::Median(baseline);
    median["value"] = b > 0 ? bench::Median(current) / b : 0.0;
    std::cout << median.dump() << std::endl;
  }
  return ok ? 0 : 1;
}

}  // namespace
}  // namespace parallax

int main(int argc, char** argv) { return parallax::Main(argc, argv); }
