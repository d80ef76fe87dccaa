// model_bench: how fast the built-in models compute on one process, with no
// communication: one rank, a Session without coordinator (sparse variables
// in a local replica, dense all-reduce a no-op), synthetic data with
// Zipf-distributed ids (as in natural text and click logs). The figure a
// distributed run's throughput is judged against.
//
//   model_bench [--runs 5] [--steps 100] [--warmup 10] [--config lm|w3|ctr|mlp ...]
//
// Prints one JSON object per statistic (median, min, max over --runs):
//   {"bench":"model","impl":"parallax","metric":"tokens_per_s","unit":"tokens/s",
//    "stat":"median","runs":5,"value":...,"model":"lm","config":"w3",...}
#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <iostream>
#include <nlohmann/json.hpp>

#include "bench/bench_stats.h"
#include "trainer/models/model.h"
#include "trainer/models/sampling.h"

namespace parallax::models {
namespace {

// Ids in [0, n) with P(rank r) ∝ 1 / (r + 1)^s.
class Zipf {
 public:
  Zipf(int64_t n, double s) {
    std::vector<double> w(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) w[static_cast<size_t>(i)] = 1.0 / std::pow(i + 1.0, s);
    table_ = AliasTable(w);
  }
  uint32_t Draw(HashRng& rng) const { return table_.Sample(rng.Next()); }
  std::vector<uint64_t> Counts(int64_t n, double s) const {
    std::vector<uint64_t> c(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) c[static_cast<size_t>(i)] = static_cast<uint64_t>(1e9 / std::pow(i + 1.0, s)) + 1;
    return c;
  }

 private:
  AliasTable table_;
};

class ZipfTokens final : public TokenSource {
 public:
  ZipfTokens(int64_t vocab, uint32_t context) : zipf_(vocab, 1.0), context_(context) {}
  void Next(size_t batch, TokenBatch* out) override {
    out->context.resize(batch * context_);
    out->targets.resize(batch);
    for (auto& t : out->context) t = zipf_.Draw(rng_);
    for (auto& t : out->targets) t = zipf_.Draw(rng_);
  }
  std::string SavePosition() const override { return ""; }
  Status RestorePosition(std::string_view) override { return Status::Ok(); }

 private:
  Zipf zipf_;
  uint32_t context_;
  HashRng rng_{7};
};

class ZipfCtr final : public CtrSource {
 public:
  explicit ZipfCtr(const std::vector<int64_t>& tables) {
    for (int64_t n : tables) zipf_.emplace_back(n, 1.1);
  }
  void Next(size_t batch, CtrBatch* out) override {
    const size_t t = zipf_.size();
    out->labels.resize(batch);
    out->dense.resize(batch * 13);
    out->categorical.resize(batch * t);
    for (auto& l : out->labels) l = static_cast<float>(rng_.Next() % 2);
    for (auto& d : out->dense) d = static_cast<float>(rng_.Uniform() * 3);
    for (size_t i = 0; i < batch; ++i)
      for (size_t f = 0; f < t; ++f) out->categorical[i * t + f] = zipf_[f].Draw(rng_);
  }
  std::string SavePosition() const override { return ""; }
  Status RestorePosition(std::string_view) override { return Status::Ok(); }

 private:
  std::vector<Zipf> zipf_;
  HashRng rng_{9};
};

struct Config {
  std::string name, model, toml;
  int batch;
  OptimizerSettings dense, sparse;
};

std::vector<Config> Configs() {
  OptimizerSettings sgd;
  sgd.type = OptimizerType::kSgd;
  sgd.lr = 0.5;
  OptimizerSettings adam;
  adam.type = OptimizerType::kAdam;
  adam.lr = 1e-3;
  OptimizerSettings adagrad;
  adagrad.type = OptimizerType::kAdagrad;
  adagrad.lr = 0.05;
  const std::string tables =
      "tables = [1000000, 1000000, 300000, 100000, 100000, 30000, 10000, 10000, 10000, 3000, 3000, "
      "1000, 1000, 1000, 300, 300, 100, 100, 100, 30, 30, 10, 10, 10, 4, 3]\n";
  return {
      {"lm", "lm", "", 256, adam, adagrad},
      {"w3", "lm", "context_mode = \"mean\"\n", 256, sgd, sgd},
      {"ctr", "ctr", tables, 256, adam, adagrad},
      {"mlp", "mlp", "", 256, sgd, sgd},
  };
}

StatusOr<double> RunOnce(const Config& c, int warmup, int steps) {
  ModelOptions mo;
  mo.batch_size = c.batch;
  PX_ASSIGN_OR_RETURN(auto model, CreateModel(c.model, c.toml, mo));
  ModelData d;
  const auto& vars = model->Variables();
  if (c.model == "lm") {
    const int64_t vocab = vars[0].rows;
    const uint32_t context = 4;
    Zipf z(1, 1.0);
    d.counts.resize(static_cast<size_t>(vocab));
    for (int64_t i = 0; i < vocab; ++i) d.counts[static_cast<size_t>(i)] = static_cast<uint64_t>(1e9 / (i + 1.0)) + 1;
    d.tokens = std::make_unique<ZipfTokens>(vocab, context);
    d.heldout_tokens = {1, 2, 3, 4, 5, 6};
  } else if (c.model == "ctr") {
    std::vector<int64_t> tables;
    for (const auto& v : vars)
      if (v.sparse) tables.push_back(v.rows);
    d.ctr = std::make_unique<ZipfCtr>(tables);
  }
  PX_RETURN_IF_ERROR(model->SetData(std::move(d)));
  SessionOptions so;
  so.config.dense_optimizer = c.dense;
  so.config.sparse_optimizer = c.sparse;
  PX_ASSIGN_OR_RETURN(auto session, Session::Create(so));
  PX_RETURN_IF_ERROR(model->Register(session.get(), 0));
  PX_RETURN_IF_ERROR(session->Start());
  StepStats st;
  for (int i = 0; i < warmup; ++i) PX_RETURN_IF_ERROR(model->TrainStep(session.get(), &st));
  int64_t units = 0;
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < steps; ++i) {
    PX_RETURN_IF_ERROR(model->TrainStep(session.get(), &st));
    units += st.units;
  }
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return static_cast<double>(units) / s;
}

}  // namespace
}  // namespace parallax::models

int main(int argc, char** argv) {
  using namespace parallax::models;
  CLI::App app{"Single-process compute throughput of the built-in models"};
  int runs = 5, steps = 100, warmup = 10;
  std::vector<std::string> which = {"lm", "w3", "ctr", "mlp"};
  app.add_option("--runs", runs, "runs per configuration")->check(CLI::PositiveNumber);
  app.add_option("--steps", steps, "timed steps per run")->check(CLI::PositiveNumber);
  app.add_option("--warmup", warmup, "untimed steps first");
  app.add_option("--config", which, "configurations: lm (defaults), w3, ctr, mlp");
  CLI11_PARSE(app, argc, argv);
  for (const Config& c : Configs()) {
    if (std::find(which.begin(), which.end(), c.name) == which.end()) continue;
    std::vector<double> rates;
    for (int r = 0; r < runs; ++r) {
      auto rate = RunOnce(c, warmup, steps);
      if (!rate.ok()) {
        std::cerr << "model_bench " << c.name << ": " << rate.status().ToString() << "\n";
        return 1;
      }
      rates.push_back(*rate);
    }
    const ::parallax::bench::Spread spread = ::parallax::bench::SpreadOf(rates);
    const bool tokens = c.model == "lm";
    for (const auto& [stat, value] : {std::pair<const char*, double>{"median", spread.median},
                                      {"min", spread.min},
                                      {"max", spread.max}}) {
      nlohmann::json j = {{"bench", "model"},
                          {"impl", "parallax"},
                          {"metric", tokens ? "tokens_per_s" : "samples_per_s"},
                          {"unit", tokens ? "tokens/s" : "samples/s"},
                          {"stat", stat},
                          {"runs", runs},
                          {"value", value},
                          {"model", c.model},
                          {"config", c.name},
                          {"batch", c.batch},
                          {"steps", steps},
                          {"threads", 1}};
      std::cout << j.dump() << std::endl;
    }
  }
  return 0;
}
