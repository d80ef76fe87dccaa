// parallax-data: writes the datasets of the built-in models (docs/DATA.md).
// scripts/fetch-data downloads the sources and runs it.
#include <CLI/CLI.hpp>
#include <cstdio>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>

#include "core/base/daemon.h"
#include "core/data/brown.h"
#include "core/data/synthetic_ctr.h"
#include "core/data/token_reader.h"

namespace {

struct BatchesOptions {
  std::string tokens, out;
  uint32_t context = 4, batch = 256, workers = 2, steps = 310;
  uint64_t seed = 1;
};

void PutLe(std::string* out, uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) out->push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}

// Writes the batches file of docs/DATA.md ("Batches file"): every rank's batches, step-major,
// read exactly as rank r of `workers` reads them (TokenReader, shard r, shuffled, same seed).
parallax::Status WriteBatches(const BatchesOptions& o) {
  using namespace parallax::data;
  std::vector<std::unique_ptr<TokenReader>> readers;
  for (uint32_t r = 0; r < o.workers; ++r) {
    TokenReaderOptions options;
    options.shard = static_cast<int>(r);
    options.num_shards = static_cast<int>(o.workers);
    options.seed = o.seed;
    options.context = o.context;
    PX_ASSIGN_OR_RETURN(auto reader, TokenReader::Open(o.tokens, options));
    readers.push_back(std::move(reader));
  }
  std::string bytes = "PXBAT001";
  bytes.reserve(32 + size_t{4} * o.steps * o.workers * o.batch * (o.context + 1));
  for (uint32_t v : {o.workers, o.steps, o.batch, o.context}) PutLe(&bytes, v, 4);
  PutLe(&bytes, o.seed, 8);
  TokenBatch batch;
  for (uint32_t step = 0; step < o.steps; ++step) {
    for (auto& reader : readers) {
      reader->Next(o.batch, &batch);
      for (uint32_t id : batch.context) PutLe(&bytes, id, 4);
      for (uint32_t id : batch.targets) PutLe(&bytes, id, 4);
    }
  }
  return parallax::WriteFileAtomically(o.out, bytes);
}

// `brown SRC_DIR OUT_DIR`: the Brown corpus into token files.
void AddBrown(CLI::App& app, int* result) {
  struct Args {
    std::string src_dir, out;
    parallax::data::BrownOptions brown;
  };
  auto args = std::make_shared<Args>();
  auto* cmd = app.add_subcommand(
      "brown",
      "Converts the Brown corpus in SRC_DIR (files ca01..cr09 of word/TAG tokens) into "
      "OUT_DIR/{train.tok, heldout.tok, vocab.tsv, stats.json}: tags stripped, lowercased, "
      "punctuation kept; prints the statistics as one JSON line");
  cmd->add_option("SRC_DIR", args->src_dir, "Directory of the corpus files")->required();
  cmd->add_option("OUT_DIR", args->out, "Output directory (created)")->required();
  cmd->add_option("--vocab", args->brown.vocab_size,
                  "Vocabulary size V: the top V-1 training words by count, plus <unk> (id 0)")
      ->capture_default_str()
      ->check(CLI::Range(uint64_t{2}, uint64_t{1} << 31));
  cmd->add_option("--heldout-every", args->brown.heldout_every,
                  "Hold out every K-th document (by file name): the K-th, 2K-th, ...")
      ->capture_default_str()
      ->check(CLI::Range(2, 1 << 20));
  cmd->add_option("--min-count", args->brown.min_count,
                  "Leave out (map to <unk>) training words seen fewer than N times, even when "
                  "the vocabulary has room")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  cmd->callback([args, result] {
    auto stats = parallax::data::ConvertBrown(args->src_dir, args->out, args->brown);
    if (!stats.ok()) {
      std::cerr << "parallax-data brown: " << stats.status().ToString() << "\n";
      *result = 1;
      return;
    }
    std::cout << stats->ToJson() << std::endl;
  });
}

// `synthetic-ctr OUT_DIR`: Criteo-format data from a hidden logistic model.
void AddSyntheticCtr(CLI::App& app, int* result) {
  struct Args {
    std::string out;
    parallax::data::SyntheticCtrOptions ctr;
  };
  auto args = std::make_shared<Args>();
  parallax::data::SyntheticCtrOptions& ctr = args->ctr;
  auto* cmd = app.add_subcommand(
      "synthetic-ctr",
      "Writes OUT_DIR/{train.tsv, heldout.tsv} in the Criteo format, drawn from a hidden "
      "logistic model over Zipf-distributed categorical ids (one stable 64-bit hex value per "
      "table row; optionally drifting) and 13 dense features, and "
      "OUT_DIR/generator.json with its parameters and its Bayes AUC on the held-out split");
  cmd->add_option("OUT_DIR", args->out, "Output directory (created)")->required();
  cmd->add_option("--train", ctr.train_examples, "Training examples")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  cmd->add_option("--heldout", ctr.heldout_examples, "Held-out examples")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  cmd->add_option("--seed", ctr.seed, "Seed of the model parameters and of both splits")
      ->capture_default_str();
  cmd->add_option("--table-sizes", ctr.table_sizes,
                  "26 table sizes (rows per categorical feature, each >= 2); default: two of "
                  "1,000,000 rows, most far smaller (docs/DATA.md)")
      ->expected(parallax::data::kCriteoCategorical);
  cmd->add_option("--zipf", ctr.zipf_exponent, "Zipf exponent of the categorical ids")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  cmd->add_option("--categorical-scale", ctr.categorical_scale,
                  "Std dev of each table row's weight in the hidden model")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--dense-scale", ctr.dense_scale,
                  "Std dev of each dense feature's weight in the hidden model")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--base-logit", ctr.base_logit, "Bias of the hidden model")
      ->capture_default_str();
  cmd->add_option("--drift-shift", ctr.drift_shift,
                  "Drift: over the training split each table's Zipf ranking rotates by this "
                  "fraction of its rows (the hot set moves onto new values; the held-out split "
                  "is drawn as of the end)")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 1000.0));
  cmd->add_option("--drift-new", ctr.drift_new,
                  "Drift: chance that a categorical value is a fresh one, written once "
                  "(weight 0 in the hidden model)")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 0.999));
  cmd->callback([args, result] {
    auto r = parallax::data::WriteSyntheticCtr(args->out, args->ctr);
    if (!r.ok()) {
      std::cerr << "parallax-data synthetic-ctr: " << r.status().ToString() << "\n";
      *result = 1;
      return;
    }
    nlohmann::json line = {{"bayes_auc", r->bayes_auc},
                           {"seen_rows_auc", r->seen_rows_auc},
                           {"train_positive_rate", r->train_positive_rate},
                           {"heldout_positive_rate", r->heldout_positive_rate},
                           {"train_distinct_values", r->train_distinct_values},
                           {"heldout_unseen_values", r->heldout_unseen_values}};
    std::cout << line.dump() << std::endl;
  });
}

// `batches TOKENS --out FILE`: every rank's batches in the order training reads them.
void AddBatches(CLI::App& app, int* result) {
  auto batches = std::make_shared<BatchesOptions>();
  auto* cmd = app.add_subcommand(
      "batches",
      "Writes to FILE the (context, target) ids of every step of every rank, as rank r of "
      "--workers ranks reads TOKENS in training (shard r, shuffled with --seed), for running "
      "another framework on the same data order (docs/DATA.md, \"Batches file\")");
  cmd->add_option("TOKENS", batches->tokens, "Token file (train.tok)")->required();
  cmd->add_option("--out", batches->out, "Output file (written atomically)")->required();
  cmd->add_option("--context", batches->context, "Tokens of context before each target")
      ->capture_default_str()
      ->check(CLI::Range(1, 1024));
  cmd->add_option("--batch", batches->batch, "Examples per rank per step")
      ->capture_default_str()
      ->check(CLI::Range(1, 1 << 20));
  cmd->add_option("--workers", batches->workers, "Ranks (shards of the data)")
      ->capture_default_str()
      ->check(CLI::Range(1, 4096));
  cmd->add_option("--steps", batches->steps, "Steps")->capture_default_str()->check(CLI::Range(1, 1 << 24));
  cmd->add_option("--seed", batches->seed, "Shuffling seed of the token reader")->capture_default_str();
  cmd->callback([batches, result] {
    const BatchesOptions& b = *batches;
    const uint64_t total = uint64_t{4} * b.steps * b.workers * b.batch * (b.context + 1);
    if (total > (uint64_t{1} << 32)) {
      std::cerr << "parallax-data batches: the file would hold " << total
                << " bytes (over 4 GiB); ask for fewer --steps, --workers or --batch\n";
      *result = 1;
      return;
    }
    auto status = WriteBatches(b);
    if (!status.ok()) {
      std::cerr << "parallax-data batches: " << status.ToString() << "\n";
      *result = 1;
    }
  });
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"parallax-data: writes the datasets of Parallax's built-in models (docs/DATA.md)"};
  app.require_subcommand(1);
  int result = 0;
  AddBrown(app, &result);
  AddSyntheticCtr(app, &result);
  AddBatches(app, &result);
  CLI11_PARSE(app, argc, argv);
  return result;
}
