// ps_bench: sparse parameter-server throughput, workload W1 (docs/PERFORMANCE.md).
//
// V rows of D float32 (default 1,000,000 × 64) range-partitioned over 2
// parallax-ps shard processes; 2 worker processes each pull K = 8192 distinct
// rows and push K gradient rows per step, SGD w -= 0.01·g on the shards
// (async). Ids: Zipf(1.05) over V, drawn until K are distinct, then
// scrambled by a bijection of [0, V) (a splitmix64-style finalizer on 20
// bits, cycle-walked into [0, V)) so hot ids do not crowd one range
// partition. Every id stream is generated before timing.
//
// rows/s = (pulled + pushed rows of both workers) / slowest worker's time.
// GB/s counts row values only (D × 4 bytes a row). cpu_ns_per_row: CPU time
// (user + system, every thread) the 2 workers and 2 shards spent over the
// timed steps, per row moved; unlike rows/s it hardly depends on what else
// runs on the machine.
//
// Modes: "pullpush" (waited pull, then waited push, per step) and "pushpull"
// (one combined PUSH_PULL per step). Prints one JSON object per line and
// statistic (median, min, max over --runs), and the requests each shard
// received per worker-step (its own count, STATS).
//
// --tables N: N tables of rows / N rows share the stream (a step's id goes to
// table id mod N as id / N; a CTR model's categorical fields, N = 26 and
// --dim 16), and a worker-step sends every table's request at once.
//
// Mode "stream" (alone): a dynamic table with a row budget (--max-rows, LRU)
// under a stream with drift, served by the 2 shard processes (sync): per step each
// worker sends one PUSH_PULL of K ids, half from a hot set of --hot ids that
// moves by --hot-drift ids a step, half never seen before (a counter through
// Mix64, a bijection: generated on the fly, nothing stored), until
// --stream-ids new ids went in. Every --every steps worker 0 samples each
// shard's rows held (STATS, "dynamic_tables") and RSS (/proc/PID/status,
// VmRSS), and at steps 1, 2, 4, ... before the first of those; prints a point per sample and shard, then per shard the most rows
// held against the shard's share of the budget and its RSS after warm-up
// (from the first sample at which the shard held its share).
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "bench/bench_stats.h"
#include "core/plan/job_plan.h"
#include "core/ps/client.h"
#include "core/ps/plan.h"

extern char** environ;

namespace {

using namespace parallax;
using namespace parallax::ps;
using Clock = std::chrono::steady_clock;

struct Config {
  int64_t rows = 1'000'000;
  uint32_t dim = 64;
  uint32_t k = 8192;
  int warmup = 20;
  int steps = 500;
  int runs = 5;
  double zipf_s = 1.05;
  std::string modes = "pullpush,pushpull";
  std::string transport = "ipc";
  int prefault_mb = 256;  // parallax-ps --prefault-mb
  // The client keeps every request until answered, to resend it to a lost
  // shard's next generation (PsClientOptions::resolve_shard), as async and
  // ssp ranks do; no shard is lost here, so this measures the bookkeeping.
  bool shard_recovery = false;
  // "fixed": a table of `rows` rows; "dynamic": a dynamic table (no row
  // count, core/ps/dynamic_table.h, admitted at once, no budget) fed the
  // same key stream.
  std::string table = "fixed";
  std::string scheme = "range";  // the fixed table's partitions (a dynamic table's are hash)
  // "zipf": W1's ids in [0, rows); "u64": each of them mixed (a bijection)
  // into the whole 64-bit range, negative int64 included (dynamic only).
  std::string ids = "zipf";
  // Tables sharing the stream (--tables N): a step's K ids go to table
  // id mod N as id / N, each table of rows / N rows (a CTR model's
  // categorical fields); every worker-step sends each table's pull, push or
  // push-pull at once and waits for them all. 1: W1's one table.
  int tables = 1;
  // With --tables: each worker-step's calls go as one PsClient::Batch (one
  // message per shard, wire version 2) instead of one request per table and
  // partition.
  bool batch = false;
  std::string ps_bin = PARALLAX_BIN_DIR "/parallax-ps";
  // Mode "stream".
  // The dynamic table's budget (max_rows, LRU), split over the shards; -1:
  // 10^6 for the stream, none for the other modes.
  int64_t max_rows = -1;
  int64_t hot = 100'000;              // ids in the hot set
  int64_t hot_drift = 100;            // how far it moves a step
  int64_t stream_ids = 100'000'000;   // new ids in all, both workers
  int every = 500;                    // steps between samples
  std::string shard_pids;             // (internal) for worker 0's samples
};

bool IsStream(const Config& c) { return c.modes == "stream"; }

// Steps of the stream: each worker sends K/2 new ids a step.
int64_t StreamSteps(const Config& c) {
  const int64_t per_step = 2 * int64_t{c.k / 2};
  return (c.stream_ids + per_step - 1) / per_step;
}

// A shard's share of the budget: the table's, split by partition, rounded up
// (as ShardCore does; each shard owns 1 of the 2 partitions).
int64_t ShardBudget(const Config& c) { return (c.max_rows + 1) / 2; }

// A bijection of [0, 2^20) (splitmix64's finalizer shape: xor-shift,
// multiply by an odd constant, modulo 2^20), cycle-walked into [0, v).
uint64_t Scramble(uint64_t x, uint64_t v) {
  constexpr uint64_t kMask = (1u << 20) - 1;
  do {
    x ^= x >> 10;
    x = (x * 0x9E3B5u) & kMask;
    x ^= x >> 9;
    x = (x * 0x6A4F7u) & kMask;
    x ^= x >> 11;
  } while (x >= v);
  return x;
}

std::vector<std::vector<int64_t>> MakeIdStream(const Config& c, uint32_t worker, int steps) {
  std::vector<double> cdf(c.rows);
  double sum = 0;
  for (int64_t i = 0; i < c.rows; ++i) {
    sum += 1.0 / std::pow(static_cast<double>(i + 1), c.zipf_s);
    cdf[i] = sum;
  }
  std::mt19937_64 rng(1234 + worker);
  std::uniform_real_distribution<double> u(0.0, sum);
  std::vector<std::vector<int64_t>> stream(steps);
  std::vector<uint32_t> seen(c.rows, 0);
  for (int s = 0; s < steps; ++s) {
    auto& ids = stream[s];
    ids.reserve(c.k);
    while (ids.size() < c.k) {
      const int64_t rank = std::lower_bound(cdf.begin(), cdf.end(), u(rng)) - cdf.begin();
      const int64_t r = std::min<int64_t>(rank, c.rows - 1);
      if (seen[r] == static_cast<uint32_t>(s + 1)) continue;
      seen[r] = s + 1;
      const uint64_t id = Scramble(static_cast<uint64_t>(r), c.rows);
      ids.push_back(static_cast<int64_t>(c.ids == "u64" ? Mix64(id) : id));
    }
  }
  return stream;
}

PsPlan MakePlan(const Config& c) {
  PsPlan plan;
  // The stream runs sync: both workers at the same step, so the rows held
  // and evicted at each sample are those of one step of both.
  plan.consistency = IsStream(c) ? Consistency::kSync : Consistency::kAsync;
  plan.num_workers = 2;
  plan.num_shards = 2;
  for (int t = 0; t < c.tables; ++t) {
    VariableSpec v;
    v.id = static_cast<uint32_t>(t);
    v.name = t == 0 ? "w1" : "w1_" + std::to_string(t);
    v.rows = c.table == "dynamic" ? 0 : (c.rows + c.tables - 1) / c.tables;
    v.dim = c.dim;
    v.partitions = 2;
    v.scheme = c.table == "fixed" && c.scheme == "range" ? PartitionScheme::kRange
                                                         : PartitionScheme::kHash;
    if (c.table == "dynamic") v.dynamic = DynamicTableSettings{};
    if (c.table == "dynamic" && c.max_rows > 0) {
      v.dynamic->max_rows = c.max_rows;
      v.dynamic->eviction = EvictionPolicy::kLru;
    }
    v.partition_shards = {0, 1};
    v.optimizer.type = OptimizerType::kSgd;
    v.optimizer.lr = 0.01f;
    plan.variables.push_back(v);
  }
  return plan;
}

bool WaitForFile(const std::string& path, int timeout_ms) {
  const auto deadline = Clock::now() + std::chrono::milliseconds(timeout_ms);
  while (Clock::now() < deadline) {
    if (std::filesystem::exists(path)) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return false;
}

pid_t Spawn(const std::vector<std::string>& args) {
  std::vector<char*> argv;
  for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  pid_t pid = -1;
  if (posix_spawn(&pid, argv[0], nullptr, nullptr, argv.data(), environ) != 0) return -1;
  return pid;
}

// CPU seconds (user + system, all threads) of this process so far.
double ProcessCpuSeconds() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

// CPU seconds (user + system) of process `pid` so far, from /proc; -1 if
// unreadable.
double ChildCpuSeconds(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string stat((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const size_t close = stat.rfind(')');  // the command name may hold spaces
  if (close == std::string::npos) return -1;
  std::stringstream fields(stat.substr(close + 2));
  std::string f;
  double ticks = 0;
  for (int i = 3; i <= 15 && fields >> f; ++i) {
    if (i == 14 || i == 15) ticks += std::stod(f);  // utime, stime
  }
  return ticks / static_cast<double>(sysconf(_SC_CLK_TCK));
}

// Resident memory of process `pid` in bytes (VmRSS); -1 if unreadable.
int64_t ResidentBytes(pid_t pid) {
  std::ifstream status("/proc/" + std::to_string(pid) + "/status");
  for (std::string line; std::getline(status, line);) {
    if (line.rfind("VmRSS:", 0) == 0) return std::stoll(line.substr(6)) * 1024;
  }
  return -1;
}

// The ids worker `worker` sends at stream step `s` (1-based): K/2 draws from
// the hot window [s·drift, s·drift + hot) (repeats dropped) and K/2 ids never
// sent before by any worker (`*fresh` counts them). Hot and new ids are
// Mix64 of disjoint inputs, so they never meet.
void StreamIds(const Config& c, uint32_t worker, int64_t s, std::mt19937_64* rng,
               uint64_t* fresh, std::vector<int64_t>* ids) {
  ids->clear();
  const uint64_t base = static_cast<uint64_t>(s) * static_cast<uint64_t>(c.hot_drift);
  for (uint32_t i = 0; i < c.k / 2; ++i) {
    const uint64_t hot = base + (*rng)() % static_cast<uint64_t>(c.hot);
    ids->push_back(static_cast<int64_t>(Mix64((uint64_t{1} << 62) | hot)));
  }
  std::sort(ids->begin(), ids->end());
  ids->erase(std::unique(ids->begin(), ids->end()), ids->end());
  for (uint32_t i = 0; i < c.k / 2; ++i) {
    ids->push_back(static_cast<int64_t>(Mix64((uint64_t{worker} << 48) | (*fresh)++)));
  }
}

// Worker 0's sample of every shard after step `s`: one line per shard into
// `out` (rows held, the table's counters, RSS).
bool SampleShards(PsClient& ps, const std::vector<pid_t>& pids, int64_t s,
                  uint64_t new_ids, double secs, std::ostream& out) {
  std::vector<std::string> texts;
  auto t = ps.Stats(&texts);
  if (!t.ok() || !ps.Wait(*t, DeadlineIn(60'000)).ok()) return false;
  for (size_t i = 0; i < texts.size() && i < pids.size(); ++i) {
    const nlohmann::json stats = nlohmann::json::parse(texts[i]);
    const nlohmann::json& table = stats.at("dynamic_tables").at("w1");
    out << nlohmann::json{{"shard", i},
                          {"step", s},
                          {"new_ids", new_ids},
                          {"secs", secs},
                          {"rows", table.at("rows")},
                          {"evicted_budget", table.at("evicted_budget")},
                          {"table_bytes", table.at("bytes")},
                          {"rss_bytes", ResidentBytes(pids[i])}}
               .dump()
        << std::endl;
  }
  return true;
}

// ---- worker process ----

int RunWorker(const Config& c, const std::string& plan_file, const std::string& endpoints_csv,
              uint32_t worker, const std::string& mode, const std::string& dir) {
  std::ifstream in(plan_file);
  std::stringstream text;
  text << in.rdbuf();
  auto plan = plan::ParseJobPlan(text.str());
  if (!plan.ok()) {
    std::cerr << plan_file << ": " << plan.status().ToString() << "\n";
    return 1;
  }
  PsClientOptions o;
  o.plan = plan->ps;
  o.worker = worker;
  o.shared_memory = c.transport == "shm";
  if (c.shard_recovery) {
    o.resolve_shard = [](uint32_t, uint32_t, Deadline) -> StatusOr<ShardAddress> {
      return NotFound("ps_bench starts no shard again");
    };
  }
  std::stringstream ss(endpoints_csv);
  for (std::string ep; std::getline(ss, ep, ',');) o.shard_endpoints.push_back(ep);
  auto client = PsClient::Create(o);
  if (!client.ok()) {
    std::cerr << client.status().ToString() << "\n";
    return 1;
  }
  PsClient& ps = **client;
  if (IsStream(c)) {
    std::vector<pid_t> pids;
    std::stringstream ps_ids(c.shard_pids);
    for (std::string p; std::getline(ps_ids, p, ',');) pids.push_back(std::stoi(p));
    std::ofstream samples(dir + "/samples" + std::to_string(worker));
    std::mt19937_64 rng(99 + worker);
    uint64_t fresh = 0;
    std::vector<int64_t> ids;
    std::vector<float> grads, rows;
    const int64_t steps = StreamSteps(c);
    const auto start = Clock::now();
    for (int64_t s = 1; s <= steps; ++s) {
      StreamIds(c, worker, s, &rng, &fresh, &ids);
      grads.assign(ids.size() * c.dim, 0.001f);
      auto t = ps.PushPull(0, ids, grads, s - 1, &rows);  // sync steps count from 0
      Status st = t.ok() ? ps.Wait(*t, DeadlineIn(60'000)) : t.status();
      if (!st.ok()) {
        std::cerr << "stream step " << s << ": " << st.ToString() << "\n";
        return 1;
      }
      // Both workers' new ids so far (they go at the same pace).
      // Every --every steps, and at steps 1, 2, 4, ... before (the table
      // filling up).
      const bool sample = s % c.every == 0 || s == steps || (s < c.every && (s & (s - 1)) == 0);
      if (worker == 0 && sample &&
          !SampleShards(ps, pids, s, 2 * fresh,
                        std::chrono::duration<double>(Clock::now() - start).count(), samples)) {
        return 1;
      }
    }
    return 0;
  }
  const int total = c.warmup + c.steps;
  const auto stream = MakeIdStream(c, worker, total);
  std::vector<float> grads(size_t{c.k} * c.dim, 0.001f), rows;
  // --tables N: each step's ids by table, and each table's rows.
  std::vector<std::vector<int64_t>> table_ids(c.tables);
  std::vector<std::vector<float>> table_rows(c.tables);
  std::vector<BatchCall> calls;
  std::vector<Ticket> tickets;
  auto tables_step = [&](int s) -> bool {
    for (auto& t : table_ids) t.clear();
    for (int64_t id : stream[s]) {
      const uint64_t u = static_cast<uint64_t>(id);
      table_ids[u % c.tables].push_back(static_cast<int64_t>(u / c.tables));
    }
    // Every table's request at once, then all their replies (a trainer's
    // step over a model's tables); pull then push: all pulls first.
    using Kind = BatchCall::Kind;
    auto all = [&](Kind kind) -> bool {
      calls.clear();
      for (int t = 0; t < c.tables; ++t) {
        const auto& ids = table_ids[t];
        const std::span<const float> g(grads.data(), kind == Kind::kPull ? 0 : ids.size() * c.dim);
        calls.push_back({kind, static_cast<uint32_t>(t), ids, g,
                         kind == Kind::kPush ? nullptr : &table_rows[t]});
      }
      tickets.clear();
      Status st = SubmitCalls(&ps, calls, s, c.batch, &tickets);
      for (size_t k = 0; k < tickets.size() && st.ok(); ++k) st = ps.Wait(tickets[k], DeadlineIn(60'000));
      if (!st.ok()) std::cerr << "ps_bench worker " << worker << ": step " << s << ": " << st.ToString() << "\n";
      return st.ok();
    };
    return mode == "pushpull" ? all(Kind::kPushPull) : all(Kind::kPull) && all(Kind::kPush);
  };
  auto step = [&](int s) -> bool {
    if (c.tables > 1) return tables_step(s);
    const auto& ids = stream[s];
    if (mode == "pushpull") {
      auto t = ps.PushPull(0, ids, grads, s, &rows);
      Status st = t.ok() ? ps.Wait(*t, DeadlineIn(60'000)) : t.status();
      if (!st.ok()) std::cerr << "ps_bench worker " << worker << ": step " << s << ": " << st.ToString() << "\n";
      return st.ok();
    }
    auto p = ps.Pull(0, ids, s, &rows);
    if (!p.ok() || !ps.Wait(*p, DeadlineIn(60'000)).ok()) return false;
    auto q = ps.Push(0, ids, grads, s);
    return q.ok() && ps.Wait(*q, DeadlineIn(60'000)).ok();
  };
  for (int s = 0; s < c.warmup; ++s) {
    if (!step(s)) return 1;
  }
  // Both workers start the timed steps together.
  std::ofstream(dir + "/ready" + std::to_string(worker)) << "1";
  if (!WaitForFile(dir + "/go", 120'000)) return 1;
  const auto start = Clock::now();
  const double cpu_start = ProcessCpuSeconds();
  for (int s = c.warmup; s < total; ++s) {
    if (!step(s)) {
      std::cerr << "step " << s << " failed\n";
      return 1;
    }
  }
  const double secs = std::chrono::duration<double>(Clock::now() - start).count();
  const double cpu = ProcessCpuSeconds() - cpu_start;
  const TransportBytes t = ps.transport_bytes();
  const int64_t socket_bytes = t.push_sent + t.push_received + t.pull_sent + t.pull_received +
                               t.other_sent + t.other_received;
  std::ofstream(dir + "/result" + std::to_string(worker)) << secs << " " << cpu << " " << socket_bytes << "\n";
  if (worker == 0) {
    // Requests each shard received in all (both workers, warm-up included),
    // counted by the shard (STATS), once worker 1 is done too.
    if (!WaitForFile(dir + "/result1", 120'000)) return 1;
    std::vector<std::string> texts;
    auto t = ps.Stats(&texts);
    if (!t.ok() || !ps.Wait(*t, DeadlineIn(60'000)).ok()) return 1;
    std::ofstream requests(dir + "/requests");
    for (const std::string& text : texts) {
      const nlohmann::json j = nlohmann::json::parse(text);
      requests << j.at("requests").get<int64_t>() << "\n";
    }
  }
  return 0;
}

// ---- launcher ----

struct RunResult {
  double secs = -1;       // the slowest worker's time; < 0 on failure
  double cpu = 0;         // CPU seconds of the workers and shards over the timed steps
  double shard_cpu = 0;   // of which the shards'
  double socket_bytes = 0;  // ZeroMQ frame bytes the workers sent and received, whole run
  double shard_requests = 0;  // requests the shards received (STATS), whole run, all shards
};

// Writes the plan to `dir` and starts the 2 shard processes; false if one
// does not come up.
bool StartShards(const Config& c, const std::string& dir, std::string* plan_file,
                 std::vector<pid_t>* shards, std::string* endpoints) {
  std::filesystem::create_directories(dir);
  *plan_file = dir + "/plan.json";
  std::ofstream(*plan_file) << plan::JobPlanToJson(plan::JobPlanOfPs(MakePlan(c)));
  for (int s = 0; s < 2; ++s) {
    const std::string listen = c.transport != "tcp" ? "ipc://" + dir + "/shard" + std::to_string(s)
                                                    : "tcp://127.0.0.1:0";
    const std::string port_file = dir + "/endpoint" + std::to_string(s);
    shards->push_back(Spawn({c.ps_bin, "--plan", *plan_file, "--shard", std::to_string(s),
                             "--listen", listen, "--port-file", port_file, "--prefault-mb",
                             std::to_string(c.prefault_mb)}));
    if (!WaitForFile(port_file, 20'000)) return false;
    std::ifstream in(port_file);
    std::string ep;
    in >> ep;
    *endpoints += (s ? "," : "") + ep;
  }
  return true;
}

// One run.
RunResult RunOnce(const Config& c, const std::string& self, const std::string& mode, int run) {
  const std::string dir = "/tmp/ps_bench." + std::to_string(getpid()) + "." + mode + "." + std::to_string(run);
  std::string plan_file, endpoints;
  std::vector<pid_t> shards;
  if (!StartShards(c, dir, &plan_file, &shards, &endpoints)) return {};
  std::vector<pid_t> workers;
  for (int w = 0; w < 2; ++w) {
    workers.push_back(Spawn({self, "--role", "worker", "--plan", plan_file, "--endpoints", endpoints,
                             "--worker", std::to_string(w), "--mode", mode, "--dir", dir, "--rows",
                             std::to_string(c.rows), "--dim", std::to_string(c.dim), "--k",
                             std::to_string(c.k), "--warmup", std::to_string(c.warmup), "--steps",
                             std::to_string(c.steps), "--transport", c.transport, "--table",
                             c.table, "--scheme", c.scheme, "--ids", c.ids, "--tables",
                             std::to_string(c.tables), "--batch=" + std::string(c.batch ? "true" : "false"),
                             "--shard-recovery=" + std::string(c.shard_recovery ? "true" : "false")}));
  }
  // Both workers ready, or one gone: a worker that fails a warm-up step
  // exits (and says why), and waiting on would only time out.
  std::vector<bool> exited(workers.size(), false);
  bool ok = true;
  const auto deadline = Clock::now() + std::chrono::minutes(5);
  while (!(std::filesystem::exists(dir + "/ready0") && std::filesystem::exists(dir + "/ready1"))) {
    for (size_t w = 0; w < workers.size(); ++w) {
      int status = 0;
      if (!exited[w] && waitpid(workers[w], &status, WNOHANG) == workers[w]) {
        exited[w] = true;
        ok = false;
      }
    }
    if (!ok || Clock::now() > deadline) {
      ok = false;
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  double shard_cpu = 0;
  for (pid_t p : shards) shard_cpu -= ChildCpuSeconds(p);
  if (ok) {
    std::ofstream(dir + "/go") << "1";
  } else {
    for (size_t w = 0; w < workers.size(); ++w) {
      if (!exited[w]) kill(workers[w], SIGTERM);
    }
  }
  for (size_t w = 0; w < workers.size(); ++w) {
    if (exited[w]) continue;
    int status = 0;
    waitpid(workers[w], &status, 0);
    ok &= WIFEXITED(status) && WEXITSTATUS(status) == 0;
  }
  for (pid_t p : shards) shard_cpu += ChildCpuSeconds(p);
  for (pid_t p : shards) {
    kill(p, SIGTERM);
    waitpid(p, nullptr, 0);
  }
  RunResult result;
  if (ok) {
    result.cpu = shard_cpu;
    result.shard_cpu = shard_cpu;
    for (int w = 0; w < 2; ++w) {
      std::ifstream in(dir + "/result" + std::to_string(w));
      double secs = -1, cpu = 0, bytes = 0;
      in >> secs >> cpu >> bytes;
      result.secs = std::max(result.secs, secs);
      result.cpu += cpu;
      result.socket_bytes += bytes;
    }
    std::ifstream requests(dir + "/requests");
    for (double n = 0; requests >> n;) result.shard_requests += n;
  }
  std::filesystem::remove_all(dir);
  return result;
}

void Emit(const std::string& metric, const std::string& unit, const std::string& stat, int runs,
          double value, const std::string& mode, const Config& c) {
  nlohmann::json j = {{"bench", "ps"},   {"impl", "parallax"}, {"metric", metric},
                      {"unit", unit},    {"stat", stat},       {"runs", runs},
                      {"value", value},  {"workers", 2},       {"shards", 2},
                      {"mode", mode},    {"transport", c.transport}, {"rows", c.rows},
                      {"dim", c.dim},    {"k", c.k},           {"steps", c.steps},
                      {"prefault_mb", c.prefault_mb}, {"shard_recovery", c.shard_recovery},
                      {"table", c.table}, {"scheme", c.table == "dynamic" ? "hash" : c.scheme},
                      {"ids", c.ids}, {"tables", c.tables}, {"batch", c.batch}};
  if (c.table == "dynamic") j["max_rows"] = c.max_rows;
  std::cout << j.dump() << std::endl;
}

nlohmann::json StreamLine(const Config& c, const std::string& metric, const std::string& unit,
                          const std::string& stat, double value) {
  return {{"bench", "ps"},         {"impl", "parallax"},          {"metric", metric},
          {"unit", unit},          {"stat", stat},                {"runs", 1},
          {"value", value},        {"workers", 2},                {"shards", 2},
          {"mode", "stream"},      {"consistency", "sync"},       {"transport", c.transport},
          {"dim", c.dim},
          {"k", c.k},              {"table", "dynamic"},          {"eviction", "lru"},
          {"max_rows", c.max_rows}, {"shard_budget", ShardBudget(c)}, {"hot", c.hot},
          {"hot_drift", c.hot_drift}, {"stream_ids", c.stream_ids}, {"every", c.every}};
}

// Mode "stream": one run; prints the samples and the summary.
int RunStream(const Config& c, const std::string& self) {
  const std::string dir = "/tmp/ps_bench." + std::to_string(getpid()) + ".stream";
  std::string plan_file, endpoints;
  std::vector<pid_t> shards;
  int rc = 0;
  const auto start = Clock::now();
  if (StartShards(c, dir, &plan_file, &shards, &endpoints)) {
    const std::string pids = std::to_string(shards[0]) + "," + std::to_string(shards[1]);
    std::vector<pid_t> workers;
    for (int w = 0; w < 2; ++w) {
      workers.push_back(Spawn(
          {self, "--role", "worker", "--plan", plan_file, "--endpoints", endpoints, "--worker",
           std::to_string(w), "--modes", "stream", "--dir", dir, "--dim", std::to_string(c.dim),
           "--k", std::to_string(c.k), "--transport", c.transport, "--table", "dynamic",
           "--max-rows", std::to_string(c.max_rows), "--hot", std::to_string(c.hot),
           "--hot-drift", std::to_string(c.hot_drift), "--stream-ids",
           std::to_string(c.stream_ids), "--every", std::to_string(c.every), "--shard-pids",
           pids}));
    }
    for (pid_t p : workers) {
      int status = 0;
      waitpid(p, &status, 0);
      if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) rc = 1;
    }
  } else {
    rc = 1;
  }
  const double secs = std::chrono::duration<double>(Clock::now() - start).count();
  for (pid_t p : shards) {
    kill(p, SIGTERM);
    waitpid(p, nullptr, 0);
  }
  // Per shard: the samples in order of step.
  std::vector<std::vector<nlohmann::json>> by_shard(2);
  std::ifstream in(dir + "/samples0");
  uint64_t new_ids = 0;
  for (std::string line; std::getline(in, line);) {
    nlohmann::json j = nlohmann::json::parse(line);
    new_ids = std::max<uint64_t>(new_ids, j.at("new_ids").get<uint64_t>());
    by_shard.at(j.at("shard").get<size_t>()).push_back(j);
  }
  std::filesystem::remove_all(dir);
  if (rc != 0) {
    std::cerr << "ps_bench: the stream failed\n";
    return 1;
  }
  for (size_t shard = 0; shard < 2; ++shard) {
    for (const nlohmann::json& j : by_shard[shard]) {
      for (auto [metric, unit, key] : {std::tuple{"shard_rows_held", "rows", "rows"},
                                       std::tuple{"shard_rss_bytes", "B", "rss_bytes"}}) {
        nlohmann::json l = StreamLine(c, metric, unit, "point", j.at(key).get<double>());
        for (const char* k : {"shard", "step", "new_ids", "secs", "evicted_budget", "table_bytes"})
          l[k] = j.at(k);
        std::cout << l.dump() << "\n";
      }
    }
  }
  for (size_t shard = 0; shard < 2; ++shard) {
    const auto& samples = by_shard[shard];
    if (samples.empty()) continue;
    double most = 0;
    std::vector<double> warm;  // RSS from the first sample at the shard's budget on
    for (const nlohmann::json& j : samples) {
      most = std::max(most, j.at("rows").get<double>());
      if (!warm.empty() || j.at("rows").get<int64_t>() >= ShardBudget(c))
        warm.push_back(j.at("rss_bytes").get<double>());
    }
    nlohmann::json l = StreamLine(c, "shard_rows_held", "rows", "max", most);
    l["shard"] = shard;
    std::cout << l.dump() << "\n";
    if (warm.empty()) continue;
    const double first = warm.front(), last = warm.back();
    const bench::Spread spread = bench::SpreadOf(warm);
    for (auto [stat, v] :
         {std::pair{"min", spread.min}, {"max", spread.max}, {"median", spread.median}}) {
      l = StreamLine(c, "shard_rss_after_warmup_bytes", "B", stat, v);
      l["shard"] = shard;
      l["samples"] = warm.size();
      std::cout << l.dump() << "\n";
    }
    l = StreamLine(c, "shard_rss_after_warmup_max_over_min", "ratio", "point",
                   warm.back() / warm.front());
    l["shard"] = shard;
    std::cout << l.dump() << "\n";
    l = StreamLine(c, "shard_rss_last_over_warm", "ratio", "point", last / first);
    l["shard"] = shard;
    std::cout << l.dump() << "\n";
  }
  std::cout << StreamLine(c, "new_ids", "ids", "point", static_cast<double>(new_ids)).dump()
            << "\n";
  std::cout << StreamLine(c, "run_seconds", "s", "point", secs).dump() << std::endl;
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Config c;
  std::string role = "launcher", plan_file, endpoints, mode, dir;
  uint32_t worker = 0;
  CLI::App app{"PS throughput benchmark (workload W1)"};
  app.add_option("--role", role, "launcher (default) or worker (internal)");
  app.add_option("--rows", c.rows, "V: rows of the variable")->capture_default_str();
  app.add_option("--dim", c.dim, "D: floats per row")->capture_default_str();
  app.add_option("--k", c.k, "K: distinct rows per step")->capture_default_str();
  app.add_option("--warmup", c.warmup, "untimed steps")->capture_default_str();
  app.add_option("--steps", c.steps, "timed steps")->capture_default_str();
  app.add_option("--runs", c.runs, "runs per mode")->capture_default_str();
  app.add_option("--modes", c.modes, "comma-separated: pullpush,pushpull; or stream (alone)")
      ->capture_default_str();
  app.add_option("--transport", c.transport,
                 "ipc, tcp (loopback), or shm (ipc sockets for headers and ids, rows and gradients "
                 "in shared memory)")
      ->capture_default_str()
      ->check(CLI::IsMember({"ipc", "tcp", "shm"}));
  app.add_option("--ps-bin", c.ps_bin, "parallax-ps binary")->capture_default_str();
  app.add_option("--table", c.table,
                 "fixed: a table of --rows rows; dynamic: a dynamic table (no row count, admitted "
                 "at once, no budget) fed the same ids")
      ->check(CLI::IsMember({"fixed", "dynamic"}))
      ->capture_default_str();
  app.add_option("--scheme", c.scheme, "the fixed table's partitions: range or hash")
      ->check(CLI::IsMember({"range", "hash"}))
      ->capture_default_str();
  app.add_option("--ids", c.ids,
                 "zipf: W1's ids in [0, rows); u64: each mixed into the whole 64-bit range "
                 "(--table dynamic)")
      ->check(CLI::IsMember({"zipf", "u64"}))
      ->capture_default_str();
  app.add_option("--shard-recovery", c.shard_recovery,
                 "workers keep each request until answered, for a lost shard's next generation "
                 "(as async/ssp ranks do; not with --transport shm)")
      ->capture_default_str();
  app.add_option("--prefault-mb", c.prefault_mb,
                 "the shards' --prefault-mb (0: table pages committed on first touch)")
      ->capture_default_str();
  app.add_option("--tables", c.tables,
                 "tables sharing each step's K ids (id mod N; dim --dim each), every table's "
                 "request sent at once")
      ->capture_default_str()
      ->check(CLI::Range(1, 1024));
  app.add_option("--batch", c.batch,
                 "with --tables: a worker-step's calls as one batch (one message per shard, wire "
                 "version 2) instead of one request per table and partition")
      ->capture_default_str();
  app.add_option("--max-rows", c.max_rows,
                 "the dynamic table's max_rows (LRU; default: 10^6 for the stream, none otherwise)")
      ->capture_default_str();
  app.add_option("--hot", c.hot, "stream: ids in the hot set")->capture_default_str();
  app.add_option("--hot-drift", c.hot_drift, "stream: how far the hot set moves a step")
      ->capture_default_str();
  app.add_option("--stream-ids", c.stream_ids, "stream: new ids in all (both workers)")
      ->capture_default_str();
  app.add_option("--every", c.every, "stream: steps between samples")->capture_default_str();
  app.add_option("--shard-pids", c.shard_pids);
  app.add_option("--plan", plan_file);
  app.add_option("--endpoints", endpoints);
  app.add_option("--worker", worker);
  app.add_option("--mode", mode);
  app.add_option("--dir", dir);
  CLI11_PARSE(app, argc, argv);
  if (c.rows > (int64_t{1} << 20) || c.rows < 2 * int64_t{c.k}) {
    std::cerr << "ps_bench: --rows must be at most 2^20 (the id scrambler's domain) and at least 2 × --k\n";
    return 2;
  }
  if (c.ids == "u64" && c.table != "dynamic") {
    std::cerr << "ps_bench: --ids u64 needs --table dynamic (a fixed table's ids are 0..rows-1)\n";
    return 2;
  }
  if (IsStream(c)) c.table = "dynamic";
  if (c.max_rows < 0) c.max_rows = IsStream(c) ? 1'000'000 : 0;
  if (c.tables > static_cast<int>(c.k) || (IsStream(c) && c.tables != 1)) {
    std::cerr << "ps_bench: --tables must be at most --k (each table gets ids), and 1 with --modes "
                 "stream\n";
    return 2;
  }
  if (c.batch && c.tables < 2) {
    std::cerr << "ps_bench: --batch needs --tables 2 or more (one table sends one request per "
                 "shard already)\n";
    return 2;
  }
  if (IsStream(c) && (c.max_rows < 1 || c.hot < 1 || c.every < 1 || c.k < 2)) {
    std::cerr << "ps_bench: --modes stream needs --max-rows, --hot, --every >= 1 and --k >= 2\n";
    return 2;
  }
  if (role == "worker") return RunWorker(c, plan_file, endpoints, worker, mode, dir);

  const std::string self = std::filesystem::read_symlink("/proc/self/exe").string();
  if (IsStream(c)) return RunStream(c, self);
  std::stringstream ss(c.modes);
  for (std::string m; std::getline(ss, m, ',');) {
    std::vector<double> rates, cpu_ns, socket_bytes, requests;
    for (int r = 0; r < c.runs; ++r) {
      const RunResult run = RunOnce(c, self, m, r);
      if (run.secs <= 0) {
        std::cerr << "ps_bench: run " << r << " of mode " << m << " failed\n";
        return 1;
      }
      const double rows = 2.0 * 2.0 * c.k * c.steps;  // 2 workers × (pull + push) rows
      rates.push_back(rows / run.secs);
      cpu_ns.push_back(run.cpu * 1e9 / rows);
      // Over warm-up and timed steps: bytes per row moved.
      socket_bytes.push_back(run.socket_bytes / (2.0 * 2.0 * c.k * (c.steps + c.warmup)));
      // Requests a shard receives per worker-step (2 shards, 2 workers).
      requests.push_back(run.shard_requests / (2.0 * 2.0 * (c.steps + c.warmup)));
      std::cerr << "ps_bench: mode " << m << " run " << r << ": " << rates.back() << " rows/s, "
                << cpu_ns.back() << " CPU ns/row (shards " << run.shard_cpu * 1e9 / rows
                << ", workers " << (run.cpu - run.shard_cpu) * 1e9 / rows << ")\n";
    }
    const bench::Spread rate = bench::SpreadOf(rates), cpu = bench::SpreadOf(cpu_ns);
    const double row_bytes = 4.0 * c.dim;
    for (auto [stat, v] : {std::pair{"median", rate.median}, {"min", rate.min}, {"max", rate.max}}) {
      Emit("rows_per_s", "rows/s", stat, c.runs, v, m, c);
    }
    for (auto [stat, v] : {std::pair{"median", rate.median}, {"min", rate.min}, {"max", rate.max}}) {
      Emit("row_values_gb_per_s", "GB/s", stat, c.runs, v * row_bytes / 1e9, m, c);
    }
    for (auto [stat, v] : {std::pair{"median", cpu.median}, {"min", cpu.min}, {"max", cpu.max}}) {
      Emit("cpu_ns_per_row", "ns", stat, c.runs, v, m, c);
    }
    Emit("socket_bytes_per_row", "B", "median", c.runs, bench::Median(socket_bytes), m, c);
    Emit("shard_requests_per_worker_step", "requests", "median", c.runs, bench::Median(requests), m,
         c);
  }
  return 0;
}
