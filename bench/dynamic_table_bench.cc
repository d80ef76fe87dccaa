// dynamic_table_bench: the dynamic table (core/ps/dynamic_table.h) against
// the fixed table a shard keeps today (ps/variable_table.h), in one process
// on the same key stream, and the dynamic table's memory under an unbounded
// stream of new ids.
//
// --mode throughput: K distinct ids a step (default 8192) drawn from
//   Zipf(1.05) over V (default 1,000,000) rows, scrambled as W1's
//   (bench/ps_bench.cc), or from the whole 64-bit space (--ids u64; the fixed
//   table then takes id mod V, as a model that hashes into a fixed table
//   does). Per step each table touches (creates) the step's rows, reads
//   them, and applies one SGD gradient to each: the shard's work for a pull
//   and a push. rows_per_s = 2·K·steps / time. Runs alternate fixed,
//   dynamic; prints the median, min and max rows/s of each and the median
//   of the per-run ratio dynamic / fixed.
// --mode stream: --steps steps of K ids each, from a stream with drift:
//   half the ids from a hot set of --hot ids that moves by --hot-drift ids a
//   step, half never seen before (a counter through a bijection, so 10^8
//   distinct ids cost no memory to generate), into one dynamic table with
//   max_rows = --max-rows (LRU). Prints rows held and the process's RSS
//   every --every steps, then the largest rows held and the RSS after warm-up
//   against the last.
//
// One JSON object per line and statistic (docs/PERFORMANCE.md).
#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "bench/bench_stats.h"
#include "core/ps/dynamic_table.h"
#include "ps/variable_table.h"

namespace {

using parallax::OptimizerType;
using parallax::ps::DynamicTable;
using parallax::ps::DynamicTableOptions;
using parallax::ps::Mix64;  // splitmix64's finalizer (core/ps/plan.h)
using parallax::ps::VariableSpec;
using parallax::ps::VariableTable;
using Clock = std::chrono::steady_clock;

struct Config {
  std::string mode = "throughput";
  std::string ids = "zipf";
  int64_t rows = 1'000'000;
  uint32_t dim = 64;
  uint32_t k = 8192;
  int steps = 100;
  int runs = 5;
  double zipf_s = 1.05;
  int64_t max_rows = 1'000'000;
  int64_t hot = 100'000;
  int64_t hot_drift = 100;
  int every = 1000;
};

VariableSpec Spec(const Config& c) {
  VariableSpec v;
  v.id = 1;
  v.name = "emb";
  v.rows = c.rows;
  v.dim = c.dim;
  v.optimizer.type = OptimizerType::kSgd;
  v.optimizer.lr = 0.01f;
  return v;
}

// K distinct ids a step: Zipf over [0, rows) scrambled, or uniform 64-bit.
std::vector<std::vector<uint64_t>> MakeStream(const Config& c) {
  std::mt19937_64 rng(1234);
  std::vector<std::vector<uint64_t>> stream(c.steps);
  if (c.ids == "u64") {
    for (auto& ids : stream) {
      for (uint32_t i = 0; i < c.k; ++i) ids.push_back(rng());
    }
    return stream;
  }
  std::vector<double> cdf(c.rows);
  double sum = 0;
  for (int64_t i = 0; i < c.rows; ++i) {
    sum += 1.0 / std::pow(static_cast<double>(i + 1), c.zipf_s);
    cdf[i] = sum;
  }
  std::uniform_real_distribution<double> u(0.0, sum);
  std::vector<int> seen(c.rows, -1);
  for (int s = 0; s < c.steps; ++s) {
    while (stream[s].size() < c.k) {
      const int64_t r = std::min<int64_t>(
          std::lower_bound(cdf.begin(), cdf.end(), u(rng)) - cdf.begin(), c.rows - 1);
      if (seen[r] == s) continue;
      seen[r] = s;
      stream[s].push_back(Mix64(static_cast<uint64_t>(r)) % static_cast<uint64_t>(c.rows));
    }
  }
  return stream;
}

double RunFixed(const Config& c, const std::vector<std::vector<uint64_t>>& stream) {
  // As a shard makes it (ShardOptions::prefault_bytes): arrays committed at
  // start on huge pages, before the clock starts.
  VariableTable table(Spec(c), c.rows, size_t{256} << 20);
  std::vector<int64_t> ids(c.k);
  std::vector<uint32_t> idx(c.k);
  std::vector<float> out(size_t{c.k} * c.dim), g(c.dim, 0.5f);
  const auto start = Clock::now();
  for (const auto& step : stream) {
    for (uint32_t i = 0; i < c.k; ++i) ids[i] = static_cast<int64_t>(step[i] % c.rows);
    table.TouchAll(ids.data(), c.k, idx.data());
    for (uint32_t i = 0; i < c.k; ++i) {
      std::copy_n(table.weights(idx[i]), c.dim, &out[size_t{i} * c.dim]);
    }
    for (uint32_t i = 0; i < c.k; ++i) table.Apply(idx[i], g.data(), 1.0f);
  }
  const double s = std::chrono::duration<double>(Clock::now() - start).count();
  return 2.0 * c.k * stream.size() / s;
}

double RunDynamic(const Config& c, const std::vector<std::vector<uint64_t>>& stream) {
  DynamicTableOptions o;
  o.var = Spec(c);
  auto table = DynamicTable::Create(o).value();
  std::vector<int64_t> slots(c.k);
  std::vector<float> out(size_t{c.k} * c.dim), g(c.dim, 0.5f);
  const auto start = Clock::now();
  int64_t step_no = 0;
  for (const auto& step : stream) {
    table->AdvanceTo(++step_no);
    if (!table->AdmitAll(step.data(), c.k, slots.data()).ok()) std::abort();
    for (uint32_t i = 0; i < c.k; ++i) {
      std::copy_n(table->weights(slots[i]), c.dim, &out[size_t{i} * c.dim]);
    }
    for (uint32_t i = 0; i < c.k; ++i) table->Apply(slots[i], g.data());
  }
  const double s = std::chrono::duration<double>(Clock::now() - start).count();
  return 2.0 * c.k * stream.size() / s;
}

nlohmann::json Line(const Config& c, const std::string& impl, const std::string& metric,
                    const std::string& unit, const std::string& stat, double value) {
  return {{"bench", "dynamic_table"},
          {"impl", impl},
          {"metric", metric},
          {"unit", unit},
          {"stat", stat},
          {"runs", c.runs},
          {"value", value},
          {"ids", c.ids},
          {"rows", c.rows},
          {"dim", c.dim},
          {"k", c.k},
          {"steps", c.steps}};
}

using ::parallax::bench::Median;

void Throughput(const Config& c) {
  const auto stream = MakeStream(c);
  std::vector<double> fixed, dynamic, ratio;
  for (int r = 0; r < c.runs; ++r) {
    fixed.push_back(RunFixed(c, stream));
    dynamic.push_back(RunDynamic(c, stream));
    ratio.push_back(dynamic.back() / fixed.back());
  }
  for (auto [impl, v] : {std::pair{"fixed", &fixed}, std::pair{"dynamic", &dynamic}}) {
    std::cout << Line(c, impl, "rows_per_s", "rows/s", "median", Median(*v)).dump() << "\n";
    std::cout << Line(c, impl, "rows_per_s", "rows/s", "min",
                      *std::min_element(v->begin(), v->end()))
                     .dump()
              << "\n";
    std::cout << Line(c, impl, "rows_per_s", "rows/s", "max",
                      *std::max_element(v->begin(), v->end()))
                     .dump()
              << "\n";
  }
  std::cout << Line(c, "dynamic", "rows_per_s_over_fixed", "ratio", "median", Median(ratio)).dump()
            << std::endl;
}

int64_t ResidentBytes() {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind("VmRSS:", 0) == 0) return std::stoll(line.substr(6)) * 1024;
  }
  return 0;
}

void Stream(const Config& c) {
  DynamicTableOptions o;
  o.var = Spec(c);
  o.max_rows = c.max_rows;
  auto table = DynamicTable::Create(o).value();
  std::mt19937_64 rng(99);
  uint64_t fresh = 0;
  int64_t most = 0, rss_warm = 0, rss_last = 0;
  std::vector<float> g(c.dim, 0.5f);
  std::vector<uint64_t> ids;
  for (int s = 1; s <= c.steps; ++s) {
    table->AdvanceTo(s);
    ids.clear();
    const uint64_t hot_base = static_cast<uint64_t>(s) * static_cast<uint64_t>(c.hot_drift);
    for (uint32_t i = 0; i < c.k / 2; ++i) {
      ids.push_back(Mix64((1ULL << 62) | (hot_base + rng() % static_cast<uint64_t>(c.hot))));
    }
    for (uint32_t i = c.k / 2; i < c.k; ++i) ids.push_back(Mix64(fresh++));
    std::sort(ids.begin(), ids.end());
    ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
    for (uint64_t id : ids) table->Apply(table->Admit(id).value(), g.data());
    most = std::max(most, table->stats().rows);
    if (s % c.every == 0 || s == c.steps) {
      const int64_t rss = ResidentBytes();
      if (rss_warm == 0 && table->stats().rows >= c.max_rows) rss_warm = rss;
      rss_last = rss;
      nlohmann::json j = Line(c, "dynamic", "rows_held", "rows", "point",
                              static_cast<double>(table->stats().rows));
      j["step"] = s;
      j["distinct_ids"] = fresh + static_cast<uint64_t>(s) * static_cast<uint64_t>(c.hot_drift);
      j["rss_bytes"] = rss;
      j["table_bytes"] = table->stats().bytes;
      j["max_rows"] = c.max_rows;
      std::cout << j.dump() << std::endl;
    }
  }
  nlohmann::json peak = Line(c, "dynamic", "rows_held", "rows", "max", static_cast<double>(most));
  peak["max_rows"] = c.max_rows;
  std::cout << peak.dump() << "\n";
  nlohmann::json flat = Line(c, "dynamic", "rss_last_over_warm", "ratio", "point",
                             rss_warm > 0 ? static_cast<double>(rss_last) / rss_warm : 0.0);
  flat["rss_warm_bytes"] = rss_warm;
  flat["rss_last_bytes"] = rss_last;
  flat["distinct_ids"] = fresh;
  std::cout << flat.dump() << std::endl;
}

}  // namespace

int main(int argc, char** argv) {
  Config c;
  CLI::App app(
      "dynamic_table_bench: the dynamic table against the fixed one, and its memory "
      "under a stream of new ids");
  app.add_option("--mode", c.mode, "throughput or stream")
      ->check(CLI::IsMember({"throughput", "stream"}))
      ->capture_default_str();
  app.add_option("--ids", c.ids, "zipf (over --rows) or u64 (the whole 64-bit space)")
      ->check(CLI::IsMember({"zipf", "u64"}))
      ->capture_default_str();
  app.add_option("--rows", c.rows, "V: rows of the fixed table, the Zipf range")
      ->capture_default_str();
  app.add_option("--dim", c.dim, "floats a row")->capture_default_str();
  app.add_option("--k", c.k, "distinct ids a step")->capture_default_str();
  app.add_option("--steps", c.steps, "steps a run")->capture_default_str();
  app.add_option("--runs", c.runs, "runs of each table (throughput)")->capture_default_str();
  app.add_option("--max-rows", c.max_rows, "the dynamic table's budget (stream)")
      ->capture_default_str();
  app.add_option("--hot", c.hot, "hot ids (stream)")->capture_default_str();
  app.add_option("--hot-drift", c.hot_drift, "how far the hot set moves a step (stream)")
      ->capture_default_str();
  app.add_option("--every", c.every, "steps between points (stream)")->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  if (c.mode == "throughput") {
    Throughput(c);
  } else {
    Stream(c);
  }
  return 0;
}
