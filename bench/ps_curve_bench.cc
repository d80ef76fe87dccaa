// ps_curve_bench: what ZeroMQ CURVE costs the PS data plane. One shard
// (ShardServer, in this process) and one PsClient over loopback TCP, async
// SGD; each step is one PUSH_PULL of K distinct rows of D floats (K rows of
// gradients out, K rows back). Runs plain and CURVE (every client admitted,
// so only the encryption is measured) alternately, --runs times each, and
// prints one JSON object per line and statistic (median over runs).
#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <iostream>
#include <nlohmann/json.hpp>
#include <numeric>

#include "bench/bench_stats.h"
#include "core/ps/client.h"
#include "ps/shard_server.h"

namespace parallax::ps {
namespace {

struct Args {
  int64_t rows = 200'000;
  uint32_t dim = 64;
  int k = 8192;
  int warmup = 5;
  int steps = 100;
  int runs = 5;
};

// Seconds per step of one run, or a negative value on error.
double Run(const Args& a, bool curve) {
  PsPlan plan;
  plan.consistency = Consistency::kAsync;
  plan.num_shards = 1;
  plan.num_workers = 1;
  VariableSpec v;
  v.name = "emb";
  v.rows = a.rows;
  v.dim = a.dim;
  v.partitions = 1;
  v.partition_shards = {0};
  v.init.type = Initializer::Type::kZeros;
  plan.variables.push_back(v);
  ShardServerOptions so;
  so.shard.plan = plan;
  so.listen = "tcp://127.0.0.1:0";
  so.curve.enabled = curve;
  so.curve.authorize = [](const std::string&) { return true; };
  auto server = ShardServer::Start(so);
  if (!server.ok()) {
    std::cerr << "ps_curve_bench: " << server.status().ToString() << "\n";
    return -1;
  }
  PsClientOptions o;
  o.plan = plan;
  o.shard_endpoints = {(*server)->endpoint()};
  if (curve) {
    auto keys = NewCurveKeyPair();
    if (!keys.ok()) {
      std::cerr << "ps_curve_bench: " << keys.status().ToString() << "\n";
      return -1;
    }
    o.curve_keys = *keys;
    o.shard_curve_keys = {(*server)->curve_public_key()};
  }
  auto client = PsClient::Create(o);
  if (!client.ok()) return -1;
  std::vector<int64_t> ids(static_cast<size_t>(a.k));
  std::iota(ids.begin(), ids.end(), 0);
  std::vector<float> rows, grads(ids.size() * a.dim, 0.01f);
  auto step = [&](int i) {
    auto t = (*client)->PushPull(0, ids, grads, i, &rows);
    return t.ok() && (*client)->Wait(*t, DeadlineIn(30'000)).ok();
  };
  for (int i = 0; i < a.warmup; ++i) {
    if (!step(i)) return -1;
  }
  auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < a.steps; ++i) {
    if (!step(a.warmup + i)) return -1;
  }
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / a.steps;
}

using ::parallax::bench::Median;

int Main(int argc, char** argv) {
  Args a;
  CLI::App app{"PS throughput with and without ZeroMQ CURVE (JSON lines on stdout)"};
  app.add_option("--rows", a.rows, "rows of the variable")->capture_default_str();
  app.add_option("--dim", a.dim, "floats per row")->capture_default_str();
  app.add_option("--k", a.k, "distinct rows per step")->capture_default_str();
  app.add_option("--steps", a.steps, "timed steps per run")->capture_default_str();
  app.add_option("--runs", a.runs, "runs per mode")->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  std::vector<double> plain, curve;
  for (int r = 0; r < a.runs; ++r) {
    for (bool c : {false, true}) {
      double s = Run(a, c);
      if (s < 0) return 1;
      (c ? curve : plain).push_back(s);
    }
  }
  const double bytes = 2.0 * a.k * a.dim * 4;  // gradients out + rows back
  for (bool c : {false, true}) {
    double s = Median(c ? curve : plain);
    nlohmann::json o = {{"bench", "ps_curve"}, {"security", c ? "curve" : "plain"},
                        {"stat", "median"},   {"runs", a.runs},
                        {"k", a.k},           {"dim", a.dim},
                        {"ms_per_step", s * 1e3}, {"gb_per_s", bytes / s / 1e9}};
    std::cout << o.dump() << std::endl;
  }
  return 0;
}

}  // namespace
}  // namespace parallax::ps

int main(int argc, char** argv) { return parallax::ps::Main(argc, argv); }
