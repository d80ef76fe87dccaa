// The plan is the cheapest of what `parallax plan` prints: for every example
// job with a built-in model, at several worker and host counts, with the
// default figures and with a fast network's, the chosen plan's predicted
// time is at or below every single-path plan's. The examples' data files are
// replaced by small ones of the same shape (the examples' [model] tables
// are otherwise unchanged).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <regex>
#include <sstream>

#include "core/data/synthetic_ctr.h"
#include "core/data/token_file.h"
#include "core/data/vocabulary.h"
#include "tests/cli/plan_json.h"
#include "tests/testing/build_paths.h"
#include "tests/testing/temp_dir.h"

namespace parallax::cli {
namespace {

namespace fs = std::filesystem;

class CheapestPlanTest : public ::testing::Test {
 protected:
  void SetUp() override {
    // An lm corpus of 50,000 words (the examples' vocab), skewed to small ids.
    std::vector<std::string> words;
    std::vector<uint64_t> counts;
    for (int i = 0; i < 50'000; ++i) {
      words.push_back(i == 0 ? "<unk>" : "w" + std::to_string(i));
      counts.push_back(1 + 1'000'000 / (i + 1));
    }
    ASSERT_TRUE(data::Vocabulary::FromWords(words, counts).Save(dir_.File("vocab.tsv")).ok());
    std::vector<uint32_t> tokens;
    uint64_t x = 42;
    for (int i = 0; i < 100'000; ++i) {
      x = x * 6364136223846793005ULL + 1442695040888963407ULL;
      const uint64_t a = (x >> 33) % 50'000, b = (x >> 13) % 50'000;
      tokens.push_back(static_cast<uint32_t>(a * b / 50'000));
    }
    ASSERT_TRUE(data::WriteTokenFile(dir_.File("train.tok"), tokens).ok());
    ASSERT_TRUE(data::WriteTokenFile(dir_.File("heldout.tok"), tokens).ok());
    data::SyntheticCtrOptions ctr;
    ctr.train_examples = 4000;
    ctr.heldout_examples = 200;
    ASSERT_TRUE(data::WriteSyntheticCtr(dir_.File("ctr"), ctr).ok());
  }

  // The example's text with its data file replaced by this test's.
  std::string WithTestData(const fs::path& example) {
    std::ifstream in(example);
    std::stringstream text;
    text << in.rdbuf();
    const std::string data = text.str().find("model = \"ctr\"") != std::string::npos
                                 ? dir_.File("ctr/train.tsv")
                                 : dir_.File("train.tok");
    return std::regex_replace(text.str(), std::regex(R"(\ndata = "[^"]*")"),
                              "\ndata = \"" + data + "\"");
  }

  testing::TempDir dir_;
};

TEST_F(CheapestPlanTest, TheChosenPlanIsAtOrBelowEverySinglePathPlan) {
  const fs::path examples = fs::path(::parallax::testing::SourceDir()) / "examples";
  const std::string figures[] = {
      "",  // the defaults
      "[plan]\nlink_bytes_per_s = 1.25e9\ncollective_latency_us = 50\nps_rtt_us = 100\n"};
  int checked = 0;
  for (const auto& entry : fs::directory_iterator(examples)) {
    if (entry.path().extension() != ".toml") continue;
    const std::string text = WithTestData(entry.path());
    if (text.find("\nmodel = ") == std::string::npos) continue;  // a custom trainer
    for (size_t f = 0; f < std::size(figures); ++f) {
      const std::string job = dir_.File("job.toml");
      std::ofstream(job) << text << "\n" << figures[f];
      for (auto [workers, hosts] : {std::pair{2, 1}, {2, 2}, {4, 2}, {8, 8}, {8, 2}}) {
        StatusOr<nlohmann::json> planned = PlanJson(job, workers, hosts);
        ASSERT_TRUE(planned.ok()) << entry.path() << ": " << planned.status().ToString();
        const nlohmann::json& doc = *planned;
        if (doc["arch"] != "hybrid") continue;
        const auto& t = doc["predicted_seconds_per_step"];
        const double plan = t["plan"].get<double>();
        for (const char* column : {"allreduce", "allgather", "ps"}) {
          if (!doc["feasible"][column].get<bool>()) continue;
          EXPECT_LE(plan, t[column].get<double>() * (1 + 1e-9))
              << entry.path().filename() << " " << workers << " workers on " << hosts
              << " hosts, figures " << f << ": the plan against " << column;
        }
        ++checked;
      }
    }
  }
  // w3, brown-lm, ctr, ctr-hashed, mlp: 5 × 2 × 5 minus the forced arches.
  EXPECT_GE(checked, 40);
}

// examples/ctr-hashed.toml (ids = "hashed"): the 26 categorical tables are
// dynamic tables on the PS with the [model] section's settings, whatever the
// shape, and `parallax plan --json` shows those settings as the plan's JSON
// writes them; the MLPs are planned as in examples/ctr.toml. A single-path
// plan that puts the tables off the PS is infeasible, and says why.
TEST_F(CheapestPlanTest, HashedCtrPlansItsTablesAsDynamicPsTables) {
  const fs::path example = fs::path(::parallax::testing::SourceDir()) / "examples" / "ctr-hashed.toml";
  const std::string job = dir_.File("hashed.toml");
  std::ofstream(job) << WithTestData(example);
  for (auto [workers, hosts] : {std::pair{2, 1}, {8, 2}}) {
    StatusOr<nlohmann::json> planned = PlanJson(job, workers, hosts);
    ASSERT_TRUE(planned.ok()) << planned.status().ToString();
    const nlohmann::json& doc = *planned;
    int dynamic = 0;
    for (const auto& v : doc["variables"]) {
      const std::string name = v["name"];
      if (name.rfind("ctr/table", 0) != 0) {
        EXPECT_FALSE(v.contains("dynamic")) << name;
        continue;
      }
      ++dynamic;
      EXPECT_EQ(v["path"], "ps") << name;
      EXPECT_EQ(v["rows"], 0) << name;  // no row count
      const std::string reason = v["reason"];
      EXPECT_NE(reason.find("dynamic table"), std::string::npos) << reason;
      EXPECT_NE(reason.find("max_rows 200000"), std::string::npos) << reason;
      ASSERT_TRUE(v.contains("dynamic")) << name;
      EXPECT_EQ(v["dynamic"],
                nlohmann::json({{"admit_after", 1},
                                {"ttl_steps", 0},
                                {"max_rows", 200000},
                                {"eviction", "lfu"},
                                {"never_admit", {0}}}))  // the missing value
          << v["dynamic"].dump();
      // Off the PS it has no cost: the single-variable columns are null.
      EXPECT_TRUE(v["bytes_per_worker"]["allreduce"].is_null()) << name;
      EXPECT_TRUE(v["bytes_per_worker"]["allgather"].is_null()) << name;
      EXPECT_TRUE(v["predicted_seconds_per_step"]["allreduce"].is_null()) << name;
    }
    EXPECT_EQ(dynamic, 26);
    EXPECT_TRUE(doc["feasible"]["plan"].get<bool>());
    EXPECT_TRUE(doc["feasible"]["ps"].get<bool>());
    EXPECT_FALSE(doc["feasible"]["allreduce"].get<bool>());
    EXPECT_FALSE(doc["feasible"]["allgather"].get<bool>());
  }
  // The text says why those columns are n/a.
  PlanCommandOptions o;
  o.job_file = job;
  o.workers = 2;
  std::ostringstream text;
  ASSERT_TRUE(RunPlanCommand(o, text).ok());
  EXPECT_NE(text.str().find("on allreduce: a dynamic table (no row count, any 64-bit id) lives "
                            "only on the PS"),
            std::string::npos)
      << text.str();
  EXPECT_NE(text.str().find("dynamic x16"), std::string::npos) << text.str();
}

}  // namespace
}  // namespace parallax::cli
