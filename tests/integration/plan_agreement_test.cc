// `parallax plan` predicts the plan a job records. examples/brown-lm.toml,
// with fixed partitions (4 per table on 2 shards, so they are placed by the
// sampled load) and its data replaced by a synthetic token file of the same
// vocabulary, runs on a real coordinator and agents at 2 workers on one
// host, 2 workers on 2 hosts and 4 workers on 2 hosts (local aggregation on);
// for each, every variable's path, partitions, placement and reason in the
// plan rank 0 recorded equal what `parallax plan --workers N --hosts H
// --from-coordinator` prints for the same file: both plan with the figures
// the agents measured on their host when they started. Then: what the
// trainers measure at rendezvous reaches the next plan.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <cmath>
#include <cstdlib>
#include <fstream>
#include <regex>
#include <sstream>
#include <thread>

#include "core/data/token_file.h"
#include "tests/fault/fault_cluster.h"
#include "tests/testing/build_paths.h"
#include "tests/testing/subprocess.h"
#include "tests/testing/temp_dir.h"

namespace parallax {
namespace {

using testing::FaultCluster;

constexpr uint32_t kVocab = 50'000;  // examples/brown-lm.toml's [model] vocab

// dir/brown/{train.tok, heldout.tok, vocab.tsv}: Zipf-like ids over the
// example's vocabulary, so the embeddings' sampled rows are skewed as real
// words are.
void WriteSyntheticCorpus(const testing::TempDir& dir) {
  std::vector<uint32_t> tokens(40'000);
  uint64_t x = 11;
  for (uint32_t& t : tokens) {
    x = x * 6364136223846793005ull + 1442695040888963407ull;
    const double u = static_cast<double>(x >> 11) / 9007199254740992.0;  // [0, 1)
    t = static_cast<uint32_t>(std::pow(static_cast<double>(kVocab), u)) - 1;
  }
  ASSERT_EQ(mkdir(dir.File("brown").c_str(), 0755), 0);
  ASSERT_TRUE(data::WriteTokenFile(dir.File("brown/train.tok"),
                                   std::span<const uint32_t>(tokens.data(), 36'000))
                  .ok());
  ASSERT_TRUE(data::WriteTokenFile(dir.File("brown/heldout.tok"),
                                   std::span<const uint32_t>(tokens.data() + 36'000, 4'000))
                  .ok());
  std::ofstream vocab(dir.File("brown/vocab.tsv"));
  for (uint32_t i = 0; i < kVocab; ++i) {
    vocab << (i == 0 ? "<unk>" : "w" + std::to_string(i)) << "\t1\n";
  }
}

// examples/brown-lm.toml as written, but for the data, `workers`, a short
// run, and partitions = 4 instead of "auto".
std::string BrownJob(const testing::TempDir& dir, int workers, const std::string& extra = "") {
  const char* env = std::getenv("PARALLAX_SOURCE_DIR");
  std::ifstream in(std::string(env ? env : ::parallax::testing::SourceDir()) +
                   "/examples/brown-lm.toml");
  std::stringstream text;
  text << in.rdbuf();
  std::string job = text.str();
  auto replace = [&](const std::string& pattern, const std::string& with) {
    EXPECT_TRUE(std::regex_search(job, std::regex(pattern)))
        << "examples/brown-lm.toml has no " << pattern;
    job = std::regex_replace(job, std::regex(pattern), with);
  };
  replace(R"(data = "[^"]*")", "data = \"" + dir.File("brown/train.tok") + "\"");
  replace(R"(workers = \d+)", "workers = " + std::to_string(workers));
  replace(R"(steps = \d+)", "steps = 1000");
  replace(R"(partitions = "auto")", "partitions = 4");
  const std::string path = dir.File("brown-" + std::to_string(workers) + ".toml");
  std::ofstream(path) << job << extra;
  return path;
}

class PlanAgreementTest : public ::testing::Test {
 protected:
  void SetUp() override { WriteSyntheticCorpus(dir_); }

  // Runs `job` on `hosts` agents of `slots` slots, waits for rank 0's plan
  // and cancels the job; returns the recorded plan.
  nlohmann::json RecordedPlan(FaultCluster& cluster, const std::string& job) {
    testing::RunResult submit = cluster.Cli({"submit", job});
    EXPECT_EQ(submit.exit_code, 0) << submit.err;
    const std::string id = testing::LastLine(submit.out);
    nlohmann::json plan;
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(180);
    while (std::chrono::steady_clock::now() < deadline) {
      testing::RunResult st = cluster.Cli({"status", id, "--json"});
      if (st.exit_code == 0) {
        const nlohmann::json doc = nlohmann::json::parse(st.out, nullptr, false);
        if (!doc.is_discarded() && doc["jobs"][0].contains("plan")) {
          plan = doc["jobs"][0]["plan"];
          break;
        }
        const std::string state = doc.is_discarded() ? "" : doc["jobs"][0].value("state", "");
        if (state == "FAILED" || state == "SUCCEEDED") break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
    }
    cluster.Cli({"cancel", id});
    EXPECT_TRUE(plan.is_object()) << "job " << id << " recorded no plan\n" << cluster.Logs();
    return plan;
  }

  void ExpectAgreement(int workers, int hosts, int slots_per_agent, bool local_aggregation) {
    SCOPED_TRACE(std::to_string(workers) + " workers on " + std::to_string(hosts) + " host(s)");
    FaultCluster cluster(dir_);
    ASSERT_EQ(cluster.StartCoordinator(), "");
    for (int h = 0; h < hosts; ++h) {
      cluster.StartAgent(std::string(1, static_cast<char>('a' + h)), "", "127.0.0.1",
                         slots_per_agent);
    }
    // The per-call figures are the job file's: the job's trainers measure
    // their own at rendezvous and store them for the next plan, so a plan
    // made after that (`parallax plan` below) would use them where rank 0
    // could not. Local aggregation needs every PS variable sparse: a fast
    // network's collective call keeps the dense variables all-reduced (with
    // the default 9 ms call the cheapest plan puts them on the PS too).
    // Between "hosts" that are all this machine's loopback, the link figure
    // is what the agents measured on it, which load moves by tens of times:
    // at its fastest the tables went to the all-gather (once in a full run
    // at load 15). A 1 Gbit/s link keeps them on the PS. On one host the
    // shared-memory all-reduce's rate decides too, and the agents' figure
    // for it moves as much: at 22 GB/s (an idle machine) the all-reduce
    // beat the PS by 1% (3.42 against 3.46 ms a step) and the test failed;
    // the job file's default rate keeps the tables on the PS.
    const std::string job = BrownJob(
        dir_, workers,
        std::string("\n[plan]\nps_rtt_us = 1440\ncollective_latency_us = ") +
            (local_aggregation ? "100" : "9000") + "\nshm_bytes_per_s = 1.4e9\n" +
            (hosts > 1 ? "link_bytes_per_s = 1.25e8\n" : ""));
    const nlohmann::json recorded = RecordedPlan(cluster, job);
    ASSERT_TRUE(recorded.is_object());
    EXPECT_EQ(recorded["cluster"]["hosts"], hosts);
    EXPECT_EQ(recorded.value("local_aggregation", false), local_aggregation);
    // The agents measured their host when they started and left the figures
    // with the coordinator; rank 0 planned with them, and `parallax plan
    // --from-coordinator` reads the same (the reasons below show the
    // predicted times, so they agree only if the figures do).
    const std::string loopback = recorded["figure_sources"]["loopback"];
    EXPECT_EQ(loopback.rfind("measured on ", 0), 0u) << recorded["figure_sources"].dump()
                                                      << cluster.Logs();
    if (hosts == 1) {
      EXPECT_EQ(recorded["figure_sources"]["link"].get<std::string>().rfind("measured on ", 0), 0u)
          << recorded["figure_sources"].dump();
    }

    testing::RunResult predicted_run =
        cluster.Cli({"plan", job, "--workers", std::to_string(workers), "--hosts",
                     std::to_string(hosts), "--from-coordinator", "--json"},
                    120'000);
    ASSERT_EQ(predicted_run.exit_code, 0) << predicted_run.err;
    const nlohmann::json predicted = nlohmann::json::parse(predicted_run.out);
    ASSERT_EQ(predicted["variables"].size(), recorded["variables"].size());
    int on_ps = 0;
    for (size_t i = 0; i < recorded["variables"].size(); ++i) {
      const nlohmann::json& r = recorded["variables"][i];
      const nlohmann::json& p = predicted["variables"][i];
      const std::string name = r["name"];
      EXPECT_EQ(p["name"], name);
      EXPECT_EQ(p["path"], r["path"]) << name;
      EXPECT_EQ(p["reason"], r["reason"]) << name;
      int partitions = 0;
      nlohmann::json shards = nlohmann::json::array();
      for (const nlohmann::json& v : recorded["ps"]["variables"]) {
        if (v["id"] == r["id"]) {
          partitions = r["partitions"];
          shards = v["partition_shards"];
        }
      }
      EXPECT_EQ(p["partitions"], partitions) << name;
      EXPECT_EQ(p["partition_shards"], shards) << name;
      on_ps += r["path"] == "ps";
    }
    // The example's point: its tables are on the PS, 4 partitions placed
    // on the 2 shards by load.
    EXPECT_GE(on_ps, 1) << recorded.dump();
  }

  testing::TempDir dir_;
};

// The trainers time their calls at rendezvous and leave them, per host,
// for the next plan of the cluster: `parallax plan --from-coordinator`
// plans with them and says where they came from; the job file's [plan]
// still wins. The second agent binds another loopback address, so rank 0
// finds a shard on "another host" and measures the link toward it.
TEST_F(PlanAgreementTest, TrainersMeasureTheirCallsForTheNextPlan) {
  FaultCluster cluster(dir_);
  ASSERT_EQ(cluster.StartCoordinator(), "");
  cluster.StartAgent("a", "", "127.0.0.1", 1);
  cluster.StartAgent("b", "", "127.0.0.2", 1);
  const std::string job = BrownJob(dir_, 2);
  testing::RunResult submit = cluster.Cli({"submit", job});
  ASSERT_EQ(submit.exit_code, 0) << submit.err;
  const std::string id = testing::LastLine(submit.out);
  auto figures = [&](const std::string& file) {
    testing::RunResult r = cluster.Cli(
        {"plan", file, "--workers", "2", "--hosts", "2", "--from-coordinator", "--json"}, 120'000);
    EXPECT_EQ(r.exit_code, 0) << r.err;
    const nlohmann::json doc = nlohmann::json::parse(r.out, nullptr, false);
    return doc.is_object() ? doc["figures"] : nlohmann::json();
  };
  const std::string by_trainers = "measured by job " + id + "'s trainers on ";
  // The coordinator keeps the sync job's wait for its slowest rank, from
  // the steps the ranks reported (core/plan/straggler.h).
  const std::string by_coordinator = "measured by job " + id + " over ";
  nlohmann::json f;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(180);
  while (std::chrono::steady_clock::now() < deadline) {
    f = figures(job);
    if (f.is_object() && f["ps_rtt_s"]["source"].get<std::string>().rfind(by_trainers, 0) == 0 &&
        f["link_bytes_per_s"]["source"].get<std::string>().rfind(by_trainers, 0) == 0 &&
        f["sync_straggler_s"]["source"].get<std::string>().rfind(by_coordinator, 0) == 0) {
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
  }
  cluster.Cli({"cancel", id});
  ASSERT_TRUE(f.is_object());
  for (const char* figure : {"ps_rtt_s", "collective_latency_s", "link_bytes_per_s"}) {
    std::string source = f[figure]["source"];
    // The collective call is shown and not planned with (core/plan/host_figures.h).
    const std::string not_used = "default; ";
    if (source.rfind(not_used, 0) == 0) source = source.substr(not_used.size());
    EXPECT_EQ(source.rfind(by_trainers, 0), 0u) << figure << ": " << f.dump() << cluster.Logs();
    EXPECT_NE(source.find("2 workers on 2 hosts"), std::string::npos) << source;
    EXPECT_GT(f[figure]["value"].get<double>(), 0) << figure;
  }
  EXPECT_NE(f["link_bytes_per_s"]["source"].get<std::string>().find("toward 127.0.0.2"),
            std::string::npos)
      << f.dump();
  const std::string straggler = f["sync_straggler_s"]["source"];
  EXPECT_EQ(straggler.rfind(by_coordinator, 0), 0u) << f.dump() << cluster.Logs();
  EXPECT_NE(straggler.find("steps, 2 workers on 2 hosts"), std::string::npos) << straggler;
  EXPECT_GT(f["sync_straggler_s"]["value"].get<double>(), 0) << f.dump();

  const std::string pinned = BrownJob(dir_, 2, "\n[plan]\nps_rtt_us = 777\n");
  f = figures(pinned);
  ASSERT_TRUE(f.is_object());
  EXPECT_EQ(f["ps_rtt_s"]["source"], "job file [plan]");
  EXPECT_DOUBLE_EQ(f["ps_rtt_s"]["value"].get<double>(), 777e-6);
  EXPECT_EQ(f["link_bytes_per_s"]["source"].get<std::string>().rfind(by_trainers, 0), 0u);
}

TEST_F(PlanAgreementTest, TwoWorkersOnOneHost) { ExpectAgreement(2, 1, 2, false); }
TEST_F(PlanAgreementTest, TwoWorkersOnTwoHosts) { ExpectAgreement(2, 2, 1, false); }
TEST_F(PlanAgreementTest, FourWorkersOnTwoHostsAggregateLocally) {
  ExpectAgreement(4, 2, 2, true);
}

}  // namespace
}  // namespace parallax
