// presence_bench: what re-measuring hot rows costs trainer rank 0 a step
// (core/plan/hot_presence.h: PresenceCounter::AddStep on every sparse PS
// table's gradient rows), side by side with what the PS client already does
// to the same rows every step (ps::DedupeIdsFirstSeen, the dedupe before a
// push), in one process on the same ids.
//
// --tables T tables, each with --ids N ids a step (repeats included) drawn
// from Zipf(--zipf) over --rows rows; --capacity rows kept a table (the
// trainer keeps 30,000 / T, at least 64); one step in --every counted (the
// trainer: 4). Runs alternate counter, dedupe;
// prints the median ns per step of each and the median per-run ratio.
//
// One JSON object per line and statistic (docs/PERFORMANCE.md).
#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <iostream>
#include <nlohmann/json.hpp>
#include <random>
#include <vector>

#include "bench/bench_stats.h"
#include "core/plan/hot_presence.h"
#include "core/ps/aggregate.h"

namespace {

using Clock = std::chrono::steady_clock;

using ::parallax::bench::Median;

}  // namespace

int main(int argc, char** argv) {
  CLI::App app("presence_bench: PresenceCounter::AddStep against the push's dedupe of the same ids");
  int tables = 26, runs = 5, steps = 200, every = 4;
  int64_t ids = 2048, rows = 1'000'000, capacity = 0;
  double zipf = 1.05;
  app.add_option("--tables", tables, "tables a step")->check(CLI::Range(1, 1000));
  app.add_option("--ids", ids, "ids a table a step, repeats included")->check(CLI::Range(1, 1 << 24));
  app.add_option("--rows", rows, "rows a table")->check(CLI::Range(1, 1 << 30));
  app.add_option("--zipf", zipf, "Zipf exponent of the ids")->check(CLI::Range(0.0, 4.0));
  app.add_option("--capacity", capacity, "rows a counter keeps (0: 30,000 / tables, at least 64)");
  app.add_option("--steps", steps, "steps a run")->check(CLI::Range(1, 100000));
  app.add_option("--every", every, "count one step in this many (the trainer: 4)")->check(CLI::Range(1, 1000));
  app.add_option("--runs", runs, "runs (median)")->check(CLI::Range(1, 1000));
  CLI11_PARSE(app, argc, argv);
  if (capacity <= 0) capacity = std::max<int64_t>(64, 30'000 / tables);

  // Zipf by inverse CDF over the rows, scrambled so that hot rows spread.
  std::vector<double> cdf(static_cast<size_t>(rows));
  double sum = 0;
  for (int64_t r = 0; r < rows; ++r) cdf[static_cast<size_t>(r)] = sum += std::pow(r + 1.0, -zipf);
  std::mt19937_64 rng(7);
  std::uniform_real_distribution<double> u(0, sum);
  auto draw = [&] {
    const int64_t r = std::lower_bound(cdf.begin(), cdf.end(), u(rng)) - cdf.begin();
    return static_cast<int64_t>((static_cast<uint64_t>(r) * 0x9E3779B97F4A7C15ull) % static_cast<uint64_t>(rows));
  };
  // Distinct batches for the whole run, made before timing.
  std::vector<std::vector<std::vector<int64_t>>> batches(
      static_cast<size_t>(steps), std::vector<std::vector<int64_t>>(static_cast<size_t>(tables)));
  for (auto& step : batches)
    for (auto& t : step) {
      t.resize(static_cast<size_t>(ids));
      for (int64_t& id : t) id = draw();
    }

  std::vector<double> count_ns, dedupe_ns, ratio;
  std::vector<uint32_t> first_pos;
  size_t sink = 0;
  for (int run = 0; run < runs; ++run) {
    std::vector<parallax::plan::PresenceCounter> counters(static_cast<size_t>(tables),
                                                parallax::plan::PresenceCounter(static_cast<size_t>(capacity), every));
    auto t0 = Clock::now();
    for (const auto& step : batches)
      for (int t = 0; t < tables; ++t) counters[static_cast<size_t>(t)].AddStep(step[static_cast<size_t>(t)]);
    auto t1 = Clock::now();
    for (const auto& step : batches)
      for (const auto& t : step) sink += parallax::ps::DedupeIdsFirstSeen(t, &first_pos).unique.size();
    auto t2 = Clock::now();
    const double c = std::chrono::duration<double, std::nano>(t1 - t0).count() / steps;
    const double d = std::chrono::duration<double, std::nano>(t2 - t1).count() / steps;
    count_ns.push_back(c);
    dedupe_ns.push_back(d);
    ratio.push_back(c / d);
    sink += static_cast<size_t>(counters[0].Take().row_steps.size());
  }
  auto line = [&](const char* impl, const char* metric, const char* unit, double value) {
    nlohmann::json j = {{"bench", "presence"}, {"impl", impl},        {"metric", metric},
                        {"unit", unit},        {"stat", "median"},    {"runs", runs},
                        {"value", value},      {"tables", tables},    {"ids", ids},
                        {"rows", rows},        {"zipf", zipf},        {"capacity", capacity},
                        {"steps", steps},      {"every", every}};
    std::cout << j.dump() << "\n";
  };
  line("presence_counter", "ns_per_step", "ns", Median(count_ns));
  line("push_dedupe", "ns_per_step", "ns", Median(dedupe_ns));
  line("presence_counter/push_dedupe", "ratio", "x", Median(ratio));
  return sink == 0 ? 1 : 0;
}
