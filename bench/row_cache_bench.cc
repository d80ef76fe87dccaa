// row_cache_bench: what a worker's row cache (core/ps/row_cache.h) costs its
// training thread a step, alone, on a stream shaped like the `ctr` model's.
//
// Per step and table (the 26 of core/data's synthetic CTR data by default),
// --batch ids drawn as the generator draws them (its Zipf sampler and row
// scatter, exponent --zipf; row 0 for a missing value), deduplicated; then
// what SparseSync does with a cache: Plan (the rows to pull, with the
// versions held), Insert (the shard's answer), Read (the lookup), and
// AddGradients and TakeDue (the push), each call for every table in turn
// as a training step makes them, with --between-kb of other memory touched
// between them as the model's work would (untimed). The shard is simulated in the
// process: a version per row that every push advances, the worker's own
// and those of --workers − 1 others drawing from the same distribution; a
// version check answers "fresh" while the copy took at most --staleness of
// them (schemas/ps_wire.md, "Row versions"). Only the cache's calls are
// timed. Prints the median over --runs of the nanoseconds per distinct id a
// step looks up, and the hit rate (hits over distinct ids) as a check that
// the stream behaves as the model's (bench/e2e/ctr_cache.py reports 0.668
// with cache_staleness 4 and cache_rule "version").
//
// One JSON object per line and statistic (docs/PERFORMANCE.md).
#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <iostream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "bench/bench_stats.h"
#include "core/data/bytes.h"
#include "core/data/synthetic_ctr.h"
#include "core/ps/aggregate.h"
#include "core/ps/plan.h"
#include "core/ps/row_cache.h"
#include "core/ps/row_versions.h"

namespace {

using parallax::data::internal::SplitMix64;
using parallax::ps::RowCache;
using parallax::ps::RowsToPush;
using parallax::ps::VariableSpec;
using Clock = std::chrono::steady_clock;

struct Config {
  std::string rule = "version";
  int64_t staleness = 4;
  int64_t capacity = 100'000;
  uint32_t dim = 16;
  int batch = 256;
  int workers = 2;
  int steps = 1000;
  int runs = 5;
  double zipf = parallax::data::SyntheticCtrOptions{}.zipf_exponent;
  int between_kb = 2048;
};

// Draws a table's rows as the synthetic CTR generator does without drift
// (core/data/synthetic_ctr.h): a Zipf rank placed on a row by the
// generator's scatter; row 0 (missing) at its default rate.
class RowDraw {
 public:
  RowDraw(int64_t size, double s, double missing)
      : zipf_(size, s), scatter_(size), missing_(missing) {}
  int64_t operator()(SplitMix64& rng) const {
    if (rng.Uniform() < missing_) return 0;
    return scatter_.Row(zipf_.Sample(rng));
  }

 private:
  parallax::data::ZipfSampler zipf_;
  parallax::data::RankScatter scatter_;
  double missing_;
};

// Distinct ids of `ids` in first-seen order, as the PS client dedupes them.
std::vector<int64_t> Distinct(const std::vector<int64_t>& ids) {
  std::vector<uint32_t> first_pos;
  return parallax::ps::DedupeIdsFirstSeen(ids, &first_pos).unique;
}

struct Result {
  double ns_per_id;
  double hit_rate;
};

Result Run(const Config& c, const std::vector<int64_t>& sizes, const std::vector<RowDraw>& draws,
           uint64_t seed) {
  SplitMix64 rng(seed);
  const size_t tables = sizes.size();
  std::vector<RowCache> caches;
  std::vector<absl::flat_hash_map<int64_t, uint32_t>> shard(tables);  // id → version
  caches.reserve(tables);
  for (size_t t = 0; t < tables; ++t) {
    VariableSpec v;
    v.id = static_cast<uint32_t>(t);
    v.name = "table" + std::to_string(t);
    v.rows = sizes[t];
    v.dim = c.dim;
    v.partitions = 1;
    v.partition_shards = {0};
    caches.emplace_back(v, c.staleness, static_cast<size_t>(c.capacity), 4, false,
                        c.rule == "version");
  }
  const size_t dim = c.dim;
  std::vector<std::vector<int64_t>> unique(tables), to_pull(tables);
  std::vector<std::vector<uint32_t>> held(tables);
  std::vector<int64_t> ids(static_cast<size_t>(c.batch));
  std::vector<uint32_t> versions;
  std::vector<float> rows, out, grads;
  std::vector<size_t> unserved;
  std::vector<RowsToPush> push(tables);
  std::vector<char> other(static_cast<size_t>(c.between_kb) << 10);
  // The model's work between the cache's calls, which leaves other data in
  // the processor's caches (not timed).
  auto work_between = [&] {
    for (size_t i = 0; i < other.size(); i += 64) other[i] = static_cast<char>(other[i] + 1);
    asm volatile("" : : "r"(other.data()) : "memory");  // the stores happen
  };
  double seconds = 0;
  int64_t looked = 0;
  auto timed = [&](auto&& f) {
    const auto start = Clock::now();
    f();
    seconds += std::chrono::duration<double>(Clock::now() - start).count();
  };
  for (int step = 0; step < c.steps; ++step) {
    for (size_t t = 0; t < tables; ++t) {
      for (int64_t& id : ids) id = draws[t](rng);
      unique[t] = Distinct(ids);
      to_pull[t].clear();
      held[t].clear();
      looked += static_cast<int64_t>(unique[t].size());
    }
    // The step's prefetch: what to pull, every table.
    timed([&] {
      for (size_t t = 0; t < tables; ++t) {
        caches[t].Plan(unique[t], step, &to_pull[t],
                       caches[t].check_versions() ? &held[t] : nullptr);
      }
    });
    work_between();
    // The shard's answers, then the lookups, table by table.
    for (size_t t = 0; t < tables; ++t) {
      RowCache& cache = caches[t];
      rows.assign(to_pull[t].size() * dim, 0.5f);
      versions.clear();
      for (size_t i = 0; i < to_pull[t].size() && cache.check_versions(); ++i) {
        versions.push_back(parallax::ps::VersionAnswer(shard[t][to_pull[t][i]], held[t][i],
                                                       static_cast<uint64_t>(c.staleness)));
      }
      out.resize(unique[t].size() * dim);
      unserved.clear();
      timed([&] {
        cache.Insert(to_pull[t], rows, step, versions);
        cache.Read(unique[t], step, out.data(), &unserved);
      });
      if (!unserved.empty()) {
        std::cerr << "row_cache_bench: a lookup left " << unserved.size() << " rows unserved\n";
        std::exit(1);
      }
    }
    work_between();
    // The push.
    for (size_t t = 0; t < tables; ++t) {
      grads.assign(unique[t].size() * dim, 0.25f);
      push[t].ids.clear();
      push[t].grads.clear();
      timed([&] {
        caches[t].AddGradients(unique[t], grads, step, &push[t]);
        caches[t].TakeDue(step, &push[t]);
      });
    }
    work_between();
    // The pushes reach the shard: this worker's, and the others'.
    for (size_t t = 0; t < tables; ++t) {
      auto update = [&](int64_t id) {
        uint32_t& v = shard[t][id];
        v = parallax::ps::NextRowVersion(v);
      };
      for (int64_t id : push[t].ids) update(id);
      for (int w = 1; w < c.workers; ++w) {
        for (int64_t& id : ids) id = draws[t](rng);
        for (int64_t id : Distinct(ids)) update(id);
      }
    }
  }
  int64_t hits = 0;
  for (const RowCache& cache : caches) hits += cache.counters().hits;
  return {seconds * 1e9 / static_cast<double>(looked),
          static_cast<double>(hits) / static_cast<double>(looked)};
}

using ::parallax::bench::Median;

}  // namespace

int main(int argc, char** argv) {
  Config c;
  CLI::App app{"The row cache's CPU a step on a ctr-shaped stream"};
  app.add_option("--rule", c.rule, "clock or version (the job's [ps] cache_rule)")
      ->check(CLI::IsMember({"clock", "version"}));
  app.add_option("--staleness", c.staleness, "[ps] cache_staleness")->check(CLI::Range(1, 1000));
  app.add_option("--capacity", c.capacity, "[ps] cache_rows (rows per table)")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 30));
  app.add_option("--dim", c.dim, "floats per row")->check(CLI::Range(1, 4096));
  app.add_option("--batch", c.batch, "examples a step (ids per table)")
      ->check(CLI::Range(1, 1 << 20));
  app.add_option("--workers", c.workers, "workers pushing to the simulated shard")
      ->check(CLI::Range(1, 1024));
  app.add_option("--steps", c.steps, "steps a run")->check(CLI::Range(1, 1 << 24));
  app.add_option("--runs", c.runs, "runs (the median is printed)")->check(CLI::Range(1, 1000));
  app.add_option("--zipf", c.zipf, "the rows' Zipf exponent")->check(CLI::Range(0.5, 3.0));
  app.add_option("--between-kb", c.between_kb,
                 "memory the model's work touches between the cache's calls (not timed)")
      ->check(CLI::Range(0, 1 << 22));
  CLI11_PARSE(app, argc, argv);

  const parallax::data::SyntheticCtrOptions generator;  // its defaults: the tables, missing rate
  const std::vector<int64_t>& sizes = generator.table_sizes;
  std::vector<RowDraw> draws;
  for (int64_t size : sizes) draws.emplace_back(size, c.zipf, generator.categorical_missing);
  std::vector<double> ns, hit_rate;
  for (int r = 0; r < c.runs; ++r) {
    const Result result = Run(c, sizes, draws, 1000 + static_cast<uint64_t>(r));
    ns.push_back(result.ns_per_id);
    hit_rate.push_back(result.hit_rate);
  }
  const nlohmann::json params = {{"rule", c.rule},         {"staleness", c.staleness},
                                 {"capacity", c.capacity}, {"dim", c.dim},
                                 {"batch", c.batch},       {"workers", c.workers},
                                 {"steps", c.steps},       {"tables", sizes.size()},
                                 {"zipf", c.zipf},         {"between_kb", c.between_kb}};
  for (auto [metric, unit, values] :
       {std::tuple{"ns_per_id", "ns", &ns}, std::tuple{"hit_rate", "", &hit_rate}}) {
    for (auto [stat, value] :
         {std::pair{"median", Median(*values)},
          std::pair{"min", *std::min_element(values->begin(), values->end())},
          std::pair{"max", *std::max_element(values->begin(), values->end())}}) {
      nlohmann::json line = {{"bench", "row_cache"}, {"impl", "parallax"}, {"metric", metric},
                             {"unit", unit},         {"stat", stat},       {"runs", c.runs},
                             {"value", value}};
      line.update(params);
      std::cout << line.dump() << "\n";
    }
  }
  return 0;
}
