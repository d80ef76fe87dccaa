// parallax-data: writes the datasets of the built-in models (docs/DATA.md).
// scripts/fetch-data downloads the sources and runs it.
#include <cstdio>
#include <iostream>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "core/data/brown.h"
#include "core/data/synthetic_ctr.h"

int main(int argc, char** argv) {
  using namespace parallax::data;
  CLI::App app{"parallax-data: writes the datasets of Parallax's built-in models (docs/DATA.md)"};
  app.require_subcommand(1);

  std::string src_dir, brown_out;
  BrownOptions brown;
  auto* brown_cmd = app.add_subcommand(
      "brown",
      "Converts the Brown corpus in SRC_DIR (files ca01..cr09 of word/TAG tokens) into "
      "OUT_DIR/{train.tok, heldout.tok, vocab.tsv, stats.json}: tags stripped, lowercased, "
      "punctuation kept; prints the statistics as one JSON line");
  brown_cmd->add_option("SRC_DIR", src_dir, "Directory of the corpus files")->required();
  brown_cmd->add_option("OUT_DIR", brown_out, "Output directory (created)")->required();
  brown_cmd
      ->add_option("--vocab", brown.vocab_size,
                   "Vocabulary size V: the top V-1 training words by count, plus <unk> (id 0)")
      ->capture_default_str()
      ->check(CLI::Range(uint64_t{2}, uint64_t{1} << 31));
  brown_cmd
      ->add_option("--heldout-every", brown.heldout_every,
                   "Hold out every K-th document (by file name): the K-th, 2K-th, ...")
      ->capture_default_str()
      ->check(CLI::Range(2, 1 << 20));
  brown_cmd
      ->add_option("--min-count", brown.min_count,
                   "Leave out (map to <unk>) training words seen fewer than N times, even when "
                   "the vocabulary has room")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);

  std::string ctr_out;
  SyntheticCtrOptions ctr;
  auto* ctr_cmd = app.add_subcommand(
      "synthetic-ctr",
      "Writes OUT_DIR/{train.tsv, heldout.tsv} in the Criteo format, drawn from a hidden "
      "logistic model over Zipf-distributed categorical ids and 13 dense features, and "
      "OUT_DIR/generator.json with its parameters and its Bayes AUC on the held-out split");
  ctr_cmd->add_option("OUT_DIR", ctr_out, "Output directory (created)")->required();
  ctr_cmd->add_option("--train", ctr.train_examples, "Training examples")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  ctr_cmd->add_option("--heldout", ctr.heldout_examples, "Held-out examples")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  ctr_cmd->add_option("--seed", ctr.seed, "Seed of the model parameters and of both splits")
      ->capture_default_str();
  ctr_cmd
      ->add_option("--table-sizes", ctr.table_sizes,
                   "26 table sizes (rows per categorical feature, each >= 2); default: two of "
                   "1,000,000 rows, most far smaller (docs/DATA.md)")
      ->expected(kCriteoCategorical);
  ctr_cmd->add_option("--zipf", ctr.zipf_exponent, "Zipf exponent of the categorical ids")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  ctr_cmd->add_option("--categorical-scale", ctr.categorical_scale,
                      "Std dev of each table row's weight in the hidden model")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  ctr_cmd->add_option("--dense-scale", ctr.dense_scale,
                      "Std dev of each dense feature's weight in the hidden model")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  ctr_cmd->add_option("--base-logit", ctr.base_logit, "Bias of the hidden model")
      ->capture_default_str();

  CLI11_PARSE(app, argc, argv);

  if (*brown_cmd) {
    auto stats = ConvertBrown(src_dir, brown_out, brown);
    if (!stats.ok()) {
      std::cerr << "parallax-data brown: " << stats.status().ToString() << "\n";
      return 1;
    }
    std::cout << stats->ToJson() << std::endl;
    return 0;
  }
  auto result = WriteSyntheticCtr(ctr_out, ctr);
  if (!result.ok()) {
    std::cerr << "parallax-data synthetic-ctr: " << result.status().ToString() << "\n";
    return 1;
  }
  nlohmann::json line = {{"bayes_auc", result->bayes_auc},
                         {"seen_rows_auc", result->seen_rows_auc},
                         {"train_positive_rate", result->train_positive_rate},
                         {"heldout_positive_rate", result->heldout_positive_rate}};
  std::cout << line.dump() << std::endl;
  return 0;
}
