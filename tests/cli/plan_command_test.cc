// `parallax plan` on a small lm job: the model declares its variables, its
// own batches measure α, and the cost model picks a path per variable.
#include "cli/plan_command.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <regex>
#include <nlohmann/json.hpp>
#include <sstream>

#include "core/data/token_file.h"
#include "core/data/vocabulary.h"
#include "core/plan/cost_model.h"
#include "tests/cli/plan_json.h"
#include "tests/testing/build_paths.h"
#include "tests/testing/temp_dir.h"

namespace parallax::cli {
namespace {

class PlanCommandTest : public ::testing::Test {
 protected:
  void SetUp() override {
    // 2,000 words, a token stream skewed toward small ids.
    std::vector<std::string> words;
    std::vector<uint64_t> counts;
    for (int i = 0; i < 2000; ++i) {
      words.push_back(i == 0 ? "<unk>" : "w" + std::to_string(i));
      counts.push_back(1 + 100000 / (i + 1));
    }
    ASSERT_TRUE(data::Vocabulary::FromWords(words, counts).Save(dir_.File("vocab.tsv")).ok());
    std::vector<uint32_t> tokens;
    uint64_t x = 12345;
    for (int i = 0; i < 50'000; ++i) {
      x = x * 6364136223846793005ULL + 1442695040888963407ULL;
      const uint32_t a = (x >> 33) % 2000, b = (x >> 13) % 2000;
      tokens.push_back(a * b / 2000);
    }
    ASSERT_TRUE(data::WriteTokenFile(dir_.File("train.tok"), tokens).ok());
    ASSERT_TRUE(data::WriteTokenFile(dir_.File("heldout.tok"), tokens).ok());
  }

  std::string Job(int workers, const std::string& extra = "") {
    const std::string path = dir_.File("job.toml");
    std::ofstream(path) << "[job]\nname = \"plan\"\nworkers = " << workers
                        << "\n[trainer]\nmodel = \"lm\"\nbatch_size = 64\n"
                           "[model]\ndata = \"train.tok\"\nvocab = 2000\ndim = 16\n"
                           "hidden = 32\n"
                        << extra;
    return path;
  }

  static const nlohmann::json& Var(const nlohmann::json& doc, const std::string& name) {
    for (const auto& v : doc["variables"]) {
      if (v["name"] == name) return v;
    }
    static const nlohmann::json none;
    return none;
  }

  testing::TempDir dir_;
};

TEST_F(PlanCommandTest, MeasuresAlphaAndChoosesPerVariable) {
  // Figures without a per-operation cost: the choice is by link bytes. One
  // worker per host, so that the all-reduce is Gloo's ring over the link
  // (SharedMemoryAllReduceOnOneHost has ranks sharing a host).
  const std::string bytes_only =
      "[plan]\nlink_bytes_per_s = 1e9\ncollective_latency_us = 0\nps_rtt_us = 0\n";
  auto two = PlanJson(Job(2, bytes_only), 2, /*hosts=*/2);
  ASSERT_TRUE(two.ok()) << two.status().ToString();
  const auto& emb = Var(*two, "lm/input_embedding");
  ASSERT_FALSE(emb.is_null()) << two->dump(2);
  EXPECT_EQ(emb["rows"], 2000);
  // 64 examples × 4 context tokens touch at most 256 of 2,000 rows.
  EXPECT_GT(emb["alpha"].get<double>(), 0.0);
  EXPECT_LE(emb["alpha"].get<double>(), 256.0 / 2000);
  EXPECT_EQ(emb["path"], "allgather");  // 2 workers: about half of PS's bytes
  EXPECT_EQ(Var(*two, "lm/hidden/weights")["path"], "allreduce");
  // Eight workers: all-gather's (N−1)-fold rows cost more than PS.
  auto eight = PlanJson(Job(2, bytes_only), 8, /*hosts=*/8);
  ASSERT_TRUE(eight.ok()) << eight.status().ToString();
  EXPECT_EQ(Var(*eight, "lm/input_embedding")["path"], "ps");
  const auto& totals = (*eight)["total_bytes_per_host_link"];
  EXPECT_LT(totals["plan"].get<double>(), totals["allreduce"].get<double>());
  EXPECT_LE(totals["plan"].get<double>(), totals["ps"].get<double>());
  EXPECT_LE(totals["plan"].get<double>(), totals["allgather"].get<double>());
  // A collective call that costs 5 ms (3 a step for all-gather) against a
  // 1 ms PS round trip (2 a step): PS already at 2 workers, and the reason
  // shows the predicted times.
  auto slow =
      PlanJson(Job(2, "[plan]\ncollective_latency_us = 5000\nps_rtt_us = 1000\n"), 2, /*hosts=*/2);
  ASSERT_TRUE(slow.ok()) << slow.status().ToString();
  const auto& slow_emb = Var(*slow, "lm/input_embedding");
  EXPECT_EQ(slow_emb["path"], "ps");
  EXPECT_NE(slow_emb["reason"].get<std::string>().find("ms/step"), std::string::npos)
      << slow_emb["reason"];
  const auto& t = slow_emb["predicted_seconds_per_step"];
  EXPECT_LE(t["ps"].get<double>(), t["allgather"].get<double>());
  EXPECT_LE(t["ps"].get<double>(), t["allreduce"].get<double>());
  const auto& totals_s = (*slow)["predicted_seconds_per_step"];
  EXPECT_LE(totals_s["plan"].get<double>(), totals_s["allgather"].get<double>());
  // All-reduce only: every gradient, the whole tables' too, fits one 64 MiB
  // fusion bucket, so one call a step (1.5 · (N−1) · 5 ms), not one per
  // variable. (Each table's choice charges it a call of its own, so here the
  // plan's PS round trips predict more than that one shared call.)
  const auto& link = (*slow)["total_bytes_per_host_link"];
  EXPECT_NEAR(totals_s["allreduce"].get<double>(),
              link["allreduce"].get<double>() / plan::kDefaultLinkBytesPerS + 1.5 * 5e-3, 1e-9);
  EXPECT_NEAR(slow_emb["predicted_seconds_per_step"]["allgather"].get<double>() -
                  slow_emb["predicted_seconds_per_step"]["ps"].get<double>(),
              2 * 5e-3 - 2 * 1e-3, 1e-3);  // the bytes differ by well under 1 ms at 1 GB/s
}

// Ranks that share a host all-reduce through shared memory (the trainer's
// communicator does): nothing on the link, one call of about 20 us, so with
// this machine's default figures (a collective call over the network 9 ms, a
// PS round trip 1.44 ms) the small tables are all-reduced whole; the header
// says how the all-reduce runs.
TEST_F(PlanCommandTest, SharedMemoryAllReduceOnOneHost) {
  auto one = PlanJson(Job(2), 2, /*hosts=*/1);
  ASSERT_TRUE(one.ok()) << one.status().ToString();
  EXPECT_EQ(Var(*one, "lm/input_embedding")["path"], "allreduce") << one->dump(2);
  EXPECT_DOUBLE_EQ((*one)["total_bytes_per_host_link"]["allreduce"].get<double>(), 0);
  EXPECT_EQ((*one)["allreduce_shared_memory"], true);
  auto spread = PlanJson(Job(2), 2, /*hosts=*/2);  // one rank per host: the ring
  ASSERT_TRUE(spread.ok()) << spread.status().ToString();
  EXPECT_EQ(Var(*spread, "lm/input_embedding")["path"], "ps") << spread->dump(2);
  EXPECT_EQ((*spread)["allreduce_shared_memory"], false);
  PlanCommandOptions o;
  o.job_file = Job(4);
  o.hosts = 2;
  std::ostringstream out;
  ASSERT_TRUE(RunPlanCommand(o, out).ok());
  EXPECT_NE(out.str().find("all-reduce: through shared memory among a host's 2 ranks, "
                           "hierarchical across the 2 hosts"),
            std::string::npos)
      << out.str();
}

TEST_F(PlanCommandTest, TableAndOverrides) {
  PlanCommandOptions o;
  o.job_file = Job(4, "[[variable]]\nname = \"lm/output_embedding\"\npath = \"allreduce\"\n");
  std::ostringstream out;
  Status st = RunPlanCommand(o, out);
  ASSERT_TRUE(st.ok()) << st.ToString();
  EXPECT_NE(out.str().find("lm/output_embedding"), std::string::npos) << out.str();
  EXPECT_NE(out.str().find("[[variable]] in the job file"), std::string::npos) << out.str();
  EXPECT_NE(out.str().find("per host link"), std::string::npos) << out.str();
}

TEST_F(PlanCommandTest, ClearErrors) {
  PlanCommandOptions o;
  o.job_file = Job(2, "[[variable]]\nname = \"lm/nope\"\npath = \"ps\"\n");
  std::ostringstream out;
  Status st = RunPlanCommand(o, out);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("\"lm/nope\""), std::string::npos) << st.message();
  EXPECT_NE(st.message().find("lm/input_embedding"), std::string::npos) << st.message();

  const std::string custom = dir_.File("custom.toml");
  std::ofstream(custom) << "[job]\nname = \"c\"\n[trainer]\ncommand = [\"./t\"]\n";
  o.job_file = custom;
  st = RunPlanCommand(o, out);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("parallax status"), std::string::npos) << st.message();

  o.job_file = Job(2);
  o.hosts = 3;
  st = RunPlanCommand(o, out);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("--hosts 3"), std::string::npos) << st.message();
}

// Without a [plan] table the header says the figures are defaults and names
// the script that measures them; that script exists.
TEST_F(PlanCommandTest, TheDefaultsHintNamesAScriptThatExists) {
  PlanCommandOptions o;
  o.job_file = Job(2);
  std::ostringstream out;
  ASSERT_TRUE(RunPlanCommand(o, out).ok());
  std::smatch m;
  const std::string text = out.str();
  ASSERT_TRUE(std::regex_search(text, m, std::regex(R"(bench/[A-Za-z0-9_/.-]+)"))) << text;
  EXPECT_TRUE(std::filesystem::exists(std::string(::parallax::testing::SourceDir()) + "/" + m.str()))
      << m.str() << " named in: " << text;
}

// Measured figures (as an agent or --measure reports them) replace the
// defaults where the job's [plan] sets none, and the plan says where each
// figure came from; on one host the measured loopback is the link.
TEST_F(PlanCommandTest, MeasuredFiguresAndTheirSources) {
  plan::HostFigures slow{.host = "h1", .measured_unix_s = 1'795'000'000,
                         .link_bytes_per_s = 1.25e8, .loopback_bytes_per_s = 2e9,
                         .shm_bytes_per_s = 5e9};
  plan::HostFigures fast = slow;
  fast.host = "h2";
  fast.link_bytes_per_s = 1.25e9;
  fast.loopback_bytes_per_s = 3e9;
  PlanCommandOptions o;
  o.job_file = Job(2);
  o.hosts = 2;
  o.json = true;
  o.host_figures = {fast, slow};
  std::ostringstream out;
  ASSERT_TRUE(RunPlanCommand(o, out).ok());
  auto doc = nlohmann::json::parse(out.str());
  const auto& f = doc["figures"];
  EXPECT_DOUBLE_EQ(f["link_bytes_per_s"]["value"].get<double>(), 1.25e8);  // the slowest host
  EXPECT_EQ(f["link_bytes_per_s"]["source"], "measured on h1 at 2026-11-18 11:06 UTC");
  EXPECT_DOUBLE_EQ(f["loopback_bytes_per_s"]["value"].get<double>(), 2e9);
  EXPECT_EQ(f["collective_latency_s"]["source"], "default");
  // The job file wins.
  o.job_file = Job(2, "[plan]\nlink_bytes_per_s = 1e9\nps_rtt_us = 200\nshm_bytes_per_s = 1e10\n");
  out.str("");
  ASSERT_TRUE(RunPlanCommand(o, out).ok());
  doc = nlohmann::json::parse(out.str());
  EXPECT_DOUBLE_EQ(doc["figures"]["link_bytes_per_s"]["value"].get<double>(), 1e9);
  EXPECT_EQ(doc["figures"]["link_bytes_per_s"]["source"], "job file [plan]");
  EXPECT_EQ(doc["figures"]["ps_rtt_s"]["source"], "job file [plan]");
  EXPECT_EQ(doc["figures"]["shm_bytes_per_s"]["source"], "job file [plan]");
  EXPECT_DOUBLE_EQ(doc["figures"]["shm_bytes_per_s"]["value"].get<double>(), 1e10);
  EXPECT_EQ(doc["figures"]["loopback_bytes_per_s"]["source"],
            "measured on h1 at 2026-11-18 11:06 UTC");
  // One host: its loopback is the link; the table says so.
  o.job_file = Job(2);
  o.hosts = 1;
  o.json = false;
  out.str("");
  ASSERT_TRUE(RunPlanCommand(o, out).ok());
  EXPECT_NE(out.str().find("link 2 GB/s (measured on h1 at 2026-11-18 11:06 UTC (loopback: one "
                           "host))"),
            std::string::npos)
      << out.str();
  EXPECT_NE(out.str().find("collective call 9000 us (default)"), std::string::npos) << out.str();
}

// --measure probes this machine: loopback and shared memory come out measured.
TEST_F(PlanCommandTest, MeasureProbesThisMachine) {
  PlanCommandOptions o;
  o.job_file = Job(2);
  o.json = true;
  o.measure = true;
  std::ostringstream out;
  const Status st = RunPlanCommand(o, out);
  ASSERT_TRUE(st.ok()) << st.ToString();
  const auto doc = nlohmann::json::parse(out.str());
  EXPECT_EQ(doc["figures"]["loopback_bytes_per_s"]["source"].get<std::string>().rfind(
                "measured on ", 0),
            0u)
      << doc["figures"].dump();
  EXPECT_GT(doc["figures"]["shm_bytes_per_s"]["value"].get<double>(), 0);
}

}  // namespace
}  // namespace parallax::cli
