// Re-planning on evidence end to end (schemas/job.md, [plan] replan): a
// real coordinator, agent, PS shards and the tiny job (2 ranks, 30 steps,
// checkpoints every 10, metric points every 5), whose [plan] table makes the
// prediction deliberately wrong: links, loopback and shared memory at
// 1e15 bytes/s and collective calls and PS round trips free, so the plan
// predicts almost no communication while real sockets take real time.
//   - replan = false: the event fires with both figures, the job runs on.
//   - replan = true: the event fires, the attempt stops at its next
//     checkpoint, and attempt 2 (not a restart) resumes from it with a plan
//     made from the corrected model (an event says what changed); the job
//     SUCCEEDS. Attempt 1's ranks pause after step 20 (its checkpoint
//     committed), so that it cannot finish before the re-plan stops it.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <iostream>
#include <regex>

#include "core/plan/plan_correction.h"
#include "core/rpc/coordinator_client.h"
#include "schemas/kv_keys.h"
#include "tests/fault/fault_cluster.h"
#include "tests/testing/relative_difference.h"

namespace parallax::testing {
namespace {

std::string Joined(const std::vector<std::string>& v) {
  std::string out;
  for (const std::string& s : v) out += s + "\n";
  return out;
}

// A [plan] table under which the plan predicts next to no communication.
// Links of 1e12 bytes/s predict microseconds a step, far below what any
// run measures, while measured / predicted stays under the correction's
// 1e9 cap (core/plan/plan_correction.cc) up to seconds a step: at 1e15 a
// run that waited 17 ms under load was 2.8e9x, capped, and the corrected
// model no longer priced the plan at what was measured.
std::string WrongPrediction(bool replan) {
  return std::string("[plan]\nreplan = ") + (replan ? "true" : "false") +
         "\nreplan_factor = 2.0\nreplan_after_steps = 1\nreplan_window_steps = 5\n"
         "link_bytes_per_s = 1e12\nloopback_bytes_per_s = 1e12\nshm_bytes_per_s = 1e12\n"
         "collective_latency_us = 0\nps_rtt_us = 0\n";
}

// The disagreement event's figures: measured and predicted ms/step.
const std::regex kDisagreement(
    R"(measured communication ([0-9.e+-]+) ms/step, predicted ([0-9.e+-]+) ms/step \(([^)]*)\) over steps (\d+)-(\d+) on attempt 1)");

class ReplanTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_EQ(cluster_.StartCoordinator(), "");
    cluster_.StartAgent("a");
  }
  // Runs `reference` to its end, then checks that both ranks of job `tag`
  // ended with its model ("emb" and "w" within 1e-5, recorded per rank)
  // and, with `resumed` >= 0, resumed from that step.
  void ExpectTheModelOf(const std::string& tag, const TinyJob& reference, int resumed = -1) {
    const std::string id = cluster_.Submit(reference);
    ASSERT_FALSE(id.empty());
    const nlohmann::json end = cluster_.WaitForEnd(id, 90'000);
    ASSERT_EQ(end.value("state", ""), "SUCCEEDED") << end.dump() << cluster_.Logs();
    EXPECT_EQ(end.value("attempt", 0), 1);
    for (int r = 0; r < 2; ++r) {
      const Model got = ReadModel(cluster_.Output(tag, r));
      const Model want = ReadModel(cluster_.Output(reference.tag, r));
      if (resumed >= 0) {
        EXPECT_EQ(got.at("resumed"), std::vector<float>{static_cast<float>(resumed)}) << "rank " << r;
      }
      for (const char* var : {"emb", "w"}) {
        const double d = RelativeDifference(got.at(var), want.at(var));
        RecordProperty("rank" + std::to_string(r) + "_" + var + "_relative_difference", std::to_string(d));
        EXPECT_LT(d, 1e-5) << var << ", rank " << r;
      }
    }
  }

  TempDir dir_;
  FaultCluster cluster_{dir_};
};

TEST_F(ReplanTest, AWrongPredictionRecordsAnEventAndTheJobRunsOn) {
  TinyJob job;
  job.tag = "observe";
  job.job_extra = WrongPrediction(false);
  const std::string id = cluster_.Submit(job);
  ASSERT_FALSE(id.empty());
  const nlohmann::json end = cluster_.WaitForEnd(id, 60'000);
  const std::vector<std::string> events = cluster_.EventMessages(id);
  ASSERT_EQ(end.value("state", ""), "SUCCEEDED") << end.dump() << Joined(events)
                                                 << cluster_.Logs();
  EXPECT_EQ(end.value("attempt", 0), 1) << Joined(events);
  int found = 0;
  for (const std::string& e : events) {
    std::smatch m;
    if (!std::regex_search(e, m, kDisagreement)) continue;
    ++found;
    EXPECT_GT(std::stod(m[1]), 2 * std::stod(m[2])) << e;
    EXPECT_GE(std::stoi(m[4]), 1) << "warm-up: step 0 is not compared\n" << e;
    EXPECT_GE(std::stoi(m[5]) - std::stoi(m[4]) + 1, 5) << "the window\n" << e;
    EXPECT_NE(e.find("[plan] replan = true would re-plan"), std::string::npos) << e;
  }
  EXPECT_EQ(found, 1) << "once per attempt\n" << Joined(events);
  EXPECT_EQ(Joined(events).find("re-plans at the checkpoint"), std::string::npos)
      << Joined(events);
}

TEST_F(ReplanTest, ReplanTrueResumesFromTheNextCheckpointWithTheCorrectedPlan) {
  const std::string pause_dir = dir_.File("pause");
  std::filesystem::create_directories(pause_dir);
  TinyJob job;
  job.tag = "replan";
  job.dense_optimizer = "momentum";
  job.job_extra = WrongPrediction(true);
  job.env = {{"TINY_PAUSE_AT", "step:20"},
             {"TINY_PAUSE_DIR", pause_dir},
             {"TINY_PAUSE_ATTEMPTS", "1"}};
  const std::string id = cluster_.Submit(job);
  ASSERT_FALSE(id.empty());
  const nlohmann::json end = cluster_.WaitForEnd(id, 90'000);
  const std::vector<std::string> events = cluster_.EventMessages(id);
  const std::string all = Joined(events);
  ASSERT_EQ(end.value("state", ""), "SUCCEEDED") << end.dump() << all << cluster_.Logs();
  EXPECT_EQ(end.value("attempt", 0), 2) << all;
  EXPECT_EQ(cluster_.Restarts(id), 0) << "a re-plan is not a restart\n" << all;

  std::smatch m;
  ASSERT_TRUE(std::regex_search(all, m, kDisagreement)) << all;
  const double measured_ms = std::stod(m[1]);
  EXPECT_GT(measured_ms, 2 * std::stod(m[2])) << m[0];
  EXPECT_NE(all.find("on attempt 1; the job re-plans at its next checkpoint (re-planned from "
                     "attempt 1's measured communication over steps "),
            std::string::npos)
      << all;
  // The attempt stopped at a checkpoint, and attempt 2 resumed from it.
  const std::regex at_checkpoint(R"(re-plans at the checkpoint of step (\d+): the next attempt)");
  ASSERT_TRUE(std::regex_search(all, m, at_checkpoint)) << all;
  const int step = std::stoi(m[1]);
  EXPECT_TRUE(step == 10 || step == 20) << all;
  for (int r = 0; r < 2; ++r) {
    const Model model = ReadModel(cluster_.Output("replan", r));
    EXPECT_EQ(model.at("resumed"), std::vector<float>{static_cast<float>(step)}) << "rank " << r;
  }
  // Attempt 2 planned with the correction, and an event says what changed.
  const std::regex changed(
      R"(attempt 2 re-planned from attempt 1's measured communication over steps \d+-\d+: collectives [0-9.e+-]+x, PS [0-9.e+-]+x the prediction: .*predicted communication with the corrected model ([0-9.e+-]+) -> [0-9.e+-]+ ms/step)");
  ASSERT_TRUE(std::regex_search(all, m, changed)) << all;
  // The corrected model prices attempt 1's plan at what attempt 1 measured
  // (both printed to 3 significant digits).
  EXPECT_NEAR(std::stod(m[1]), measured_ms, 0.01 * measured_ms) << all;
  // `parallax status` shows the corrected model of attempt 2's plan.
  const RunResult status = cluster_.Cli({"status", id});
  ASSERT_EQ(status.exit_code, 0) << status.err;
  EXPECT_NE(status.out.find("re-planned on evidence: predicted times x"), std::string::npos)
      << status.out;
  for (const std::string& e : events) {
    if (e.find("re-plan") != std::string::npos) std::cout << "replan event: " << e << "\n";
  }
  // With PS round trips now priced at what they cost, attempt 2 all-reduces
  // "w", which attempt 1 kept on the PS: its values and momentum come from
  // the shards' checkpoint files, and the job ends with the model of a job
  // that kept it on the PS throughout.
  EXPECT_NE(all.find("w: ps (P=1) -> allreduce"), std::string::npos) << all;
  TinyJob stay = job;
  stay.tag = "replan-stay";
  stay.job_extra = WrongPrediction(false);
  stay.env.clear();
  ExpectTheModelOf("replan", stay);
}

// Hot rows that stop serving: the tiny job keeps the 16 rows its sampled
// batches hold most (small ids: the data is skewed to them), and from step 5
// on its data drifts (TINY_DRIFT_AT: row r's lookups go to row 99-r). The
// monitor finds the hot rows serving far fewer rows than the plan expected
// and re-plans at the next checkpoint; attempt 2's plan takes its hot rows
// from what rank 0 counted before that checkpoint (the large ids), an event
// says how the set changed, and the model equals the one a job that kept
// its first hot set ends with (the hot rows' state went back to the shards
// and came out again).
TEST_F(ReplanTest, HotRowsThatStopServingAreReMeasuredAtTheNextCheckpoint) {
  const std::string pause_dir = dir_.File("pause");
  std::filesystem::create_directories(pause_dir);
  auto job_of = [&](const std::string& tag, bool replan) {
    TinyJob job;
    job.tag = tag;
    job.ps_extra = "hot_rows = 16\n";
    job.job_extra = std::string("[plan]\nreplan = ") + (replan ? "true" : "false") +
                    "\nreplan_factor = 2.0\nreplan_after_steps = 5\nreplan_window_steps = 5\n";
    job.env = {{"TINY_DRIFT_AT", "5"}};
    if (replan) {
      job.env.insert({{"TINY_PAUSE_AT", "step:20"},
                      {"TINY_PAUSE_DIR", pause_dir},
                      {"TINY_PAUSE_ATTEMPTS", "1"}});
    }
    return job;
  };
  const std::string id = cluster_.Submit(job_of("hot-replan", true));
  ASSERT_FALSE(id.empty());
  const nlohmann::json end = cluster_.WaitForEnd(id, 90'000);
  const std::string all = Joined(cluster_.EventMessages(id));
  ASSERT_EQ(end.value("state", ""), "SUCCEEDED") << end.dump() << all << cluster_.Logs();
  EXPECT_EQ(end.value("attempt", 0), 2) << all;
  EXPECT_EQ(cluster_.Restarts(id), 0) << "a re-plan is not a restart\n" << all;
  std::smatch m;
  const std::regex drift(
      R"(hot rows served (\d+)% of their tables' distinct rows a step over steps (\d+)-(\d+), the plan expected (\d+)% on attempt 1)");
  ASSERT_TRUE(std::regex_search(all, m, drift)) << all;
  RecordProperty("drift_event", m[0]);
  EXPECT_LT(2 * std::stoi(m[1]), std::stoi(m[4])) << m[0];
  EXPECT_GE(std::stoi(m[2]), 5) << m[0];
  const std::regex changed(R"(attempt 2 changed its hot rows: "emb" 16 -> 16 \((\d+) warmed, (\d+) cooled\))");
  ASSERT_TRUE(std::regex_search(all, m, changed)) << all;
  RecordProperty("changed_event", m[0]);
  EXPECT_GE(std::stoi(m[1]), 12) << "the drifted data's hot rows are other rows\n" << all;
  const std::regex at_checkpoint(R"(re-plans at the checkpoint of step (\d+))");
  ASSERT_TRUE(std::regex_search(all, m, at_checkpoint)) << all;
  const int step = std::stoi(m[1]);

  ExpectTheModelOf("hot-replan", job_of("hot-steady", false), step);
}

// `parallax replan JOB`: an operator asks a running job to re-plan. Attempt
// 1's ranks wait after step 15 until the request is in; the attempt stops
// at the checkpoint of step 20, and attempt 2 (not a restart) resumes from
// it with a plan whose hot rows rank 0 re-measured over steps 10-19.
TEST_F(ReplanTest, AnOperatorsReplanResumesWithReMeasuredHotRows) {
  const std::string pause_dir = dir_.File("pause-op");
  std::filesystem::create_directories(pause_dir);
  TinyJob job;
  job.tag = "op-replan";
  job.ps_extra = "hot_rows = 16\n";
  job.env = {{"TINY_PAUSE_AT", "step:15"}, {"TINY_PAUSE_DIR", pause_dir}};  // attempt 1 only
  const std::string id = cluster_.Submit(job);
  ASSERT_FALSE(id.empty());
  for (int r = 0; r < 2; ++r) {
    ASSERT_TRUE(WaitForFile(pause_dir + "/paused-rank" + std::to_string(r), 60'000))
        << "rank " << r << cluster_.Logs();
  }
  const RunResult asked = cluster_.Cli({"replan", id, "--reason", "new hosts"});
  ASSERT_EQ(asked.exit_code, 0) << asked.err;
  EXPECT_NE(asked.out.find("attempt 1 re-plans at its next checkpoint"), std::string::npos) << asked.out;
  std::ofstream(pause_dir + "/go").close();
  const nlohmann::json end = cluster_.WaitForEnd(id, 90'000);
  const std::string all = Joined(cluster_.EventMessages(id));
  ASSERT_EQ(end.value("state", ""), "SUCCEEDED") << end.dump() << all << cluster_.Logs();
  EXPECT_EQ(end.value("attempt", 0), 2) << all;
  EXPECT_EQ(cluster_.Restarts(id), 0) << "a re-plan is not a restart\n" << all;
  EXPECT_NE(all.find("attempt 1 re-plans at its next checkpoint, asked by "), std::string::npos) << all;
  EXPECT_NE(all.find("(new hosts)"), std::string::npos) << all;
  EXPECT_NE(all.find("re-plans at the checkpoint of step 20"), std::string::npos) << all;
  // Attempt 2's plan, as its last checkpoint records it.
  const std::string manifest = cluster_.CheckpointRoot() + "/job-" + id + "/step-30/MANIFEST.json";
  std::ifstream in(manifest);
  ASSERT_TRUE(in) << manifest;
  const nlohmann::json m = nlohmann::json::parse(in);
  EXPECT_EQ(m.value("attempt", 0), 2) << m.dump();
  const std::string reason = m["plan"]["variables"][0].value("reason", "");
  EXPECT_NE(reason.find("re-measured over steps 10-19 of attempt 1"), std::string::npos) << reason;
  // A finished job has nothing to re-plan.
  const RunResult late = cluster_.Cli({"replan", id});
  EXPECT_EQ(late.exit_code, 1) << late.out;
  EXPECT_NE(late.err.find("is SUCCEEDED; only a RUNNING job re-plans"), std::string::npos) << late.err;
}

// A re-plan that moves a variable between the workers and the PS carries
// its state across the checkpoint (trainer/checkpoint.h, ReadPsVariable;
// ps/shard_core.h, LoadCheckpoint). Attempt 1 all-reduces "w" (momentum; PS bytes priced at a
// millisecond each); while its ranks wait
// after step 15 the test stores a correction that prices the collectives a
// billion times higher and an operator asks for a re-plan; attempt 2 puts
// "w" on the PS, whose shards take its values and momentum from the
// checkpoint's dense.pxck, and the job ends with the model of a job that never
// moved it. (ReplanTrueResumesFromTheNextCheckpointWithTheCorrectedPlan
// moves "w" the other way, from the PS to all-reduce.)
TEST_F(ReplanTest, AVariableTheRePlanMovesToThePsKeepsItsState) {
  const std::string pause_dir = dir_.File("pause-move");
  std::filesystem::create_directories(pause_dir);
  auto job_of = [&](const std::string& tag) {
    TinyJob job;
    job.tag = tag;
    job.dense_optimizer = "momentum";
    // PS bytes priced at a millisecond each, so that the plan all-reduces
    // "w" (through shared memory); the monitor never compares (only the
    // test's correction counts).
    job.job_extra =
        "[plan]\nreplan = true\nreplan_after_steps = 1000\n"
        "loopback_bytes_per_s = 1000\nlink_bytes_per_s = 1000\n";
    return job;
  };
  TinyJob moved = job_of("move-to-ps");
  moved.env = {{"TINY_PAUSE_AT", "step:15"}, {"TINY_PAUSE_DIR", pause_dir}};
  const std::string id = cluster_.Submit(moved);
  ASSERT_FALSE(id.empty());
  for (int r = 0; r < 2; ++r) {
    ASSERT_TRUE(WaitForFile(pause_dir + "/paused-rank" + std::to_string(r), 60'000))
        << "rank " << r << cluster_.Logs();
  }
  {
    CoordinatorClientOptions co;
    co.address = cluster_.address();
    auto client = CoordinatorClient::Connect(co);
    ASSERT_TRUE(client.ok()) << client.status().ToString();
    const plan::PlanCorrection c{.from_attempt = 1, .collective_time_scale = 1e9,
                                 .ps_time_scale = 1, .source = "the test's correction"};
    ASSERT_TRUE((*client)->KvSet(kv_keys::PlanCorrection(std::stoll(id)), plan::PlanCorrectionToJson(c)).ok());
  }
  const RunResult asked = cluster_.Cli({"replan", id});
  ASSERT_EQ(asked.exit_code, 0) << asked.err;
  std::ofstream(pause_dir + "/go").close();
  const nlohmann::json end = cluster_.WaitForEnd(id, 90'000);
  const std::string all = Joined(cluster_.EventMessages(id));
  ASSERT_EQ(end.value("state", ""), "SUCCEEDED") << end.dump() << all << cluster_.Logs();
  EXPECT_EQ(end.value("attempt", 0), 2) << all;
  auto path_of_w = [&](int step) {
    std::ifstream in(cluster_.CheckpointRoot() + "/job-" + id + "/step-" + std::to_string(step) +
                     "/MANIFEST.json");
    if (!in) return std::string("no manifest of step ") + std::to_string(step);
    const nlohmann::json m = nlohmann::json::parse(in);
    return m["plan"]["variables"][1].value("name", "") + ":" +
           m["plan"]["variables"][1].value("path", "");
  };
  auto reason_of_w = [&](int step) {
    std::ifstream in(cluster_.CheckpointRoot() + "/job-" + id + "/step-" + std::to_string(step) +
                     "/MANIFEST.json");
    if (!in) return std::string();
    return nlohmann::json::parse(in)["plan"]["variables"][1].value("reason", "");
  };
  ASSERT_EQ(path_of_w(20), "w:allreduce") << "attempt 1 all-reduces w: " << reason_of_w(20);
  ASSERT_EQ(path_of_w(30), "w:ps") << "attempt 2 moved it: " << reason_of_w(30) << "\n" << all;
  const std::regex at_checkpoint(R"(re-plans at the checkpoint of step (\d+))");
  std::smatch m;
  ASSERT_TRUE(std::regex_search(all, m, at_checkpoint)) << all;
  const int step = std::stoi(m[1]);

  ExpectTheModelOf("move-to-ps", job_of("stay"), step);
}

}  // namespace
}  // namespace parallax::testing
