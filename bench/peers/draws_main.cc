// px-draws: Parallax's own randomness printed, for checking a port of it
// (bench/peers/parallax_draws.py, which the PyTorch peer draws with) against
// the C++ it ports. Each subcommand prints one JSON line; 64-bit values as
// integers, floats as their IEEE bit patterns (uint32), so a comparison is
// exact.
//
//   px-draws mix X...                     {"mix64":[..],"finalize64":[..]}
//   px-draws hash A B [C]                 {"hash":..}
//   px-draws rng --key K --count N        {"next":[..]}  (HashRng(K).Next())
//   px-draws alias --weights FILE --key K --count N
//                                         {"ids":[..]}   (AliasTable(weights)
//                                          .Sample of HashRng(K)'s draws)
//   px-draws init --seed S --var V --first R --rows N --dim D --scale X
//                                         {"bits":[..]}  (InitializeRow)
//   px-draws dense --seed S --var V --size N --scale X
//                                         {"bits":[..]}  (InitialDenseValues)
#include <CLI/CLI.hpp>
#include <bit>
#include <cstdint>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/ps/initializer.h"
#include "core/ps/plan.h"
#include "parallax/session.h"
#include "trainer/models/sampling.h"

namespace {

using nlohmann::json;

json Bits(const std::vector<float>& values) {
  json out = json::array();
  for (float v : values) out.push_back(std::bit_cast<uint32_t>(v));
  return out;
}

void AddMix(CLI::App& app) {
  auto xs = std::make_shared<std::vector<uint64_t>>();
  auto* cmd = app.add_subcommand("mix", "The models' Mix64 (SplitMix64 step) and core/ps's "
                                        "Mix64 (its finaliser) of each X");
  cmd->add_option("X", *xs)->required();
  cmd->callback([xs] {
    json mix = json::array(), fin = json::array();
    for (uint64_t x : *xs) {
      mix.push_back(parallax::models::Mix64(x));
      fin.push_back(parallax::ps::Mix64(x));
    }
    std::cout << json{{"mix64", mix}, {"finalize64", fin}}.dump() << "\n";
  });
}

void AddHash(CLI::App& app) {
  auto xs = std::make_shared<std::vector<uint64_t>>();
  auto* cmd = app.add_subcommand("hash", "Hash(A, B) or Hash(A, B, C)");
  cmd->add_option("A B [C]", *xs)->required()->expected(2, 3);
  cmd->callback([xs] {
    const std::vector<uint64_t>& v = *xs;
    const uint64_t h = v.size() == 2 ? parallax::models::Hash(v[0], v[1])
                                     : parallax::models::Hash(v[0], v[1], v[2]);
    std::cout << json{{"hash", h}}.dump() << "\n";
  });
}

void AddRng(CLI::App& app) {
  struct Args {
    uint64_t key = 0;
    int count = 1;
    std::string weights;
  };
  auto args = std::make_shared<Args>();
  auto* rng = app.add_subcommand("rng", "HashRng(K).Next(), N times");
  rng->add_option("--key", args->key)->required();
  rng->add_option("--count", args->count)->required()->check(CLI::Range(1, 1 << 24));
  rng->callback([args] {
    parallax::models::HashRng r(args->key);
    json next = json::array();
    for (int i = 0; i < args->count; ++i) next.push_back(r.Next());
    std::cout << json{{"next", next}}.dump() << "\n";
  });
  auto* alias = app.add_subcommand(
      "alias", "Walker's alias table over the weights in FILE (one per line) sampled with N of "
               "HashRng(K)'s draws");
  alias->add_option("--weights", args->weights)->required()->check(CLI::ExistingFile);
  alias->add_option("--key", args->key)->required();
  alias->add_option("--count", args->count)->required()->check(CLI::Range(1, 1 << 24));
  alias->callback([args] {
    std::ifstream in(args->weights);
    std::vector<double> w;
    for (double x; in >> x;) w.push_back(x);
    parallax::models::AliasTable table(w);
    parallax::models::HashRng r(args->key);
    json ids = json::array();
    for (int i = 0; i < args->count; ++i) ids.push_back(table.Sample(r.Next()));
    std::cout << json{{"ids", ids}}.dump() << "\n";
  });
}

void AddInit(CLI::App& app) {
  struct Args {
    parallax::Initializer init;
    uint32_t var = 0, dim = 1;
    int64_t first = 0, rows = 1;
    size_t size = 1;
  };
  auto args = std::make_shared<Args>();
  args->init.type = parallax::Initializer::Type::kUniform;
  auto* init = app.add_subcommand("init", "InitializeRow (uniform) of rows R .. R+N-1");
  auto* dense = app.add_subcommand("dense", "InitialDenseValues (uniform) of N values");
  for (CLI::App* cmd : {init, dense}) {
    cmd->add_option("--seed", args->init.seed)->required();
    cmd->add_option("--var", args->var)->required();
    cmd->add_option("--scale", args->init.scale)->required();
  }
  init->add_option("--first", args->first)->required();
  init->add_option("--rows", args->rows)->required()->check(CLI::Range(1, 1 << 20));
  init->add_option("--dim", args->dim)->required()->check(CLI::Range(1, 1 << 16));
  dense->add_option("--size", args->size)->required()->check(CLI::Range(1, 1 << 24));
  init->callback([args] {
    std::vector<float> values(static_cast<size_t>(args->rows) * args->dim);
    for (int64_t r = 0; r < args->rows; ++r) {
      parallax::ps::InitializeRow(args->init, args->var, args->first + r, args->dim,
                                  values.data() + static_cast<size_t>(r) * args->dim);
    }
    std::cout << json{{"bits", Bits(values)}}.dump() << "\n";
  });
  dense->callback([args] {
    std::cout << json{{"bits", Bits(parallax::InitialDenseValues(args->init, args->var,
                                                                 args->size))}}.dump()
              << "\n";
  });
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"px-draws: Parallax's hashes, alias table and initial values, as JSON"};
  app.require_subcommand(1);
  AddMix(app);
  AddHash(app);
  AddRng(app);
  AddInit(app);
  CLI11_PARSE(app, argc, argv);
  return 0;
}
