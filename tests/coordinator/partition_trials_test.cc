// The partition search as the orchestrator drives it (coordinator/
// partition_trials.h), through the service's handlers on the real SQLite
// store: trial attempts at the P the search proposes, each ended by the
// step time "rank 0" publishes, then the fit, the choice and the real
// attempt; a trial that fails falls back to the default P. The trainers are
// played by the test (no processes): it reads what each attempt was told
// and publishes what a trial measured.
#include "coordinator/orchestration/partition_trials.h"

#include <gtest/gtest.h>

#include <cmath>
#include <nlohmann/json.hpp>

#include "coordinator/service/service.h"
#include "coordinator/store/sqlite_state_store.h"
#include "core/plan/job_plan.h"
#include "schemas/coordinator_constants.h"
#include "schemas/kv_keys.h"
#include "tests/coordinator/plan_fixtures.h"
#include "tests/testing/temp_dir.h"

namespace parallax::coordinator {
namespace {

using json = nlohmann::json;

// A job whose sparse "emb" (rows x 4) is on PS with partitions = "auto"
// (arch = "ps": its shards start with the trainers, not after the plan).
std::string SearchJob(const std::string& extra = "") {
  return "[job]\nname = \"s\"\nworkers = 2\narch = \"ps\"\nmax_restarts = 0\n"
         "[trainer]\ncommand = [\"/bin/true\"]\nsteps = 100\n"
         "[ps]\nshards = 2\npartitions = \"auto\"\n"
         "[plan]\nsearch_steps = 10\nsearch_warmup_steps = 2\n" +
         extra;
}

// A synthetic cost curve with its minimum near P = sqrt(b / a) = 12.6.
double Curve(double p) { return 0.08 / p + 0.0005 * (p - 1) + 0.1; }

class PartitionTrialsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    SqliteStateStoreOptions options;
    options.path = dir_.File("state.db");
    store_ = std::move(OpenSqliteStateStore(options)).value();
    service_ = std::make_unique<CoordinatorService>(store_.get(), &clock_, ServiceOptions{});
    ASSERT_TRUE(service_->Init().ok());
    header_.protocol_version = rpc::g_coordinator_constants.PROTOCOL_VERSION;
    header_.__set_client("test");
    rpc::AgentInfo a;
    a.name = "a";
    a.address = "a:1";
    a.slots = 4;
    service_->RegisterAgent(header_, a);
  }

  int64_t Submit(const std::string& text) {
    rpc::SubmitJobRequest r;
    r.job_text = text;
    rpc::JobInfo info;
    service_->SubmitJob(info, header_, r);
    return info.id;
  }

  JobRecord Job(int64_t id) { return store_->GetJob(id).value(); }

  // Polls until the agent is given the tasks of a new attempt; stops the
  // tasks of the previous one first (they are reported killed).
  std::vector<rpc::TaskKey> Start(const std::vector<rpc::TaskKey>& running) {
    rpc::PollRequest r;
    r.agent_name = "a";
    r.running = running;
    rpc::PollResponse out;
    service_->PollAssignments(out, header_, r);
    for (const rpc::TaskKey& k : out.stop) Report(k, rpc::TaskState::KILLED, 15);
    if (!out.stop.empty()) {
      r.running.clear();
      service_->PollAssignments(out, header_, r);
    }
    std::vector<rpc::TaskKey> keys;
    for (const auto& a : out.start) keys.push_back(a.key);
    for (const rpc::TaskKey& k : keys) Report(k, rpc::TaskState::RUNNING);
    return keys;
  }

  void Report(const rpc::TaskKey& key, rpc::TaskState::type state, int code = 0) {
    rpc::TaskReport r;
    r.key = key;
    r.state = state;
    if (state == rpc::TaskState::EXITED) r.__set_exit_code(code);
    if (state == rpc::TaskState::KILLED) r.__set_signal(code);
    service_->ReportTasks(header_, "a", {r});
  }

  // What attempt `attempt` of the job was told (null: nothing).
  json Spec(int64_t id, int attempt) {
    auto v = store_->KvGet(kv_keys::TrialSpec(id, attempt)).value();
    return v ? json::parse(*v) : json();
  }

  // Rank 0 of a trial: stores a plan with "emb" at the trial's P and
  // publishes the step time, through the service like a trainer would.
  void FinishTrial(int64_t id, int attempt, uint32_t partitions, double seconds) {
    rpc::PutPlanRequest put;
    put.job_id = id;
    put.attempt = attempt;
    put.plan_json = plan::JobPlanToJson(testing::OnePsTablePlan("emb", 1000, 4, partitions));
    service_->PutPlan(header_, put);
    rpc::KvSetRequest kv;
    kv.key = kv_keys::TrialStepSeconds(id, attempt);
    kv.value = std::to_string(seconds);
    service_->KvSet(header_, kv);
  }

  std::vector<std::string> SearchEvents(int64_t id) {
    std::vector<std::string> out;
    const std::vector<EventRecord> events = store_->ListEvents(id, 0, 0).value();
    for (const EventRecord& e : events) {
      if (e.kind == "search") out.push_back(e.message);
    }
    return out;
  }

  testing::TempDir dir_;
  FakeClock clock_;
  std::unique_ptr<StateStore> store_;
  std::unique_ptr<CoordinatorService> service_;
  rpc::RequestHeader header_;
};

TEST_F(PartitionTrialsTest, TrialsDoubleThenTheFitPicksTheMinimumForTheRealAttempt) {
  const int64_t id = Submit(SearchJob());
  std::vector<rpc::TaskKey> tasks = Start({});
  std::vector<uint32_t> tried;
  while (true) {
    ASSERT_EQ(tasks.size(), 4u);  // 2 trainers + 2 shards
    const int attempt = tasks[0].attempt;
    const json spec = Spec(id, attempt);
    ASSERT_TRUE(spec.is_object()) << "attempt " << attempt;
    const uint32_t p = spec["partitions"].get<uint32_t>();
    if (!spec.contains("trial_steps")) break;  // the real attempt
    EXPECT_EQ(spec["trial_steps"], 10);
    EXPECT_EQ(spec["warmup_steps"], 2);
    ASSERT_LT(tried.size(), 10u) << "the search does not end";
    tried.push_back(p);
    FinishTrial(id, attempt, p, Curve(p));
    EXPECT_EQ(Job(id).state, JobState::kPending) << "attempt " << attempt;
    tasks = Start(tasks);
  }
  // Doubling from the number of shards while the time falls, until 32 is
  // slower than 16; five trials are past the minimum of three.
  EXPECT_EQ(tried, (std::vector<uint32_t>{2, 4, 8, 16, 32}));
  const JobRecord job = Job(id);
  EXPECT_EQ(job.attempt, 6);
  EXPECT_EQ(job.restarts, 0) << "trials are not restarts";
  // The fit is exact on a noiseless curve: the minimum of b/P + a(P-1) + c.
  EXPECT_EQ(Spec(id, job.attempt)["partitions"], 13);

  const std::vector<std::string> events = SearchEvents(id);
  ASSERT_EQ(events.size(), 11u) << ::testing::PrintToString(events);
  EXPECT_NE(events[0].find("trial 1 at P=2 (attempt 1: 2 warm-up + 10 timed steps)"),
            std::string::npos) << events[0];
  EXPECT_NE(events[1].find("trial at P=2 (attempt 1): 140.500 ms/step"), std::string::npos)
      << events[1];
  EXPECT_NE(events[1].find("\"emb\""), std::string::npos) << events[1];
  EXPECT_NE(events[10].find("5 trials: P=2: 140.500 ms/step;"), std::string::npos) << events[10];
  EXPECT_NE(events[10].find("fit t(P) = 0.08/P + 0.0005(P-1) + 0.1 s; chosen P=13"),
            std::string::npos) << events[10];
  EXPECT_NE(events[10].find("the job runs with P=13"), std::string::npos) << events[10];

  // The real attempt ends like any other.
  for (const rpc::TaskKey& k : tasks) {
    if (k.role == rpc::TaskRole::TRAINER) Report(k, rpc::TaskState::EXITED, 0);
  }
  EXPECT_EQ(Job(id).state, JobState::kSucceeded);
}

TEST_F(PartitionTrialsTest, AFailedTrialFallsBackToTheDefaultWithoutFailingTheJob) {
  const int64_t id = Submit(SearchJob());
  std::vector<rpc::TaskKey> tasks = Start({});
  FinishTrial(id, 1, 2, 0.05);
  tasks = Start(tasks);
  ASSERT_EQ(tasks.size(), 4u);
  ASSERT_EQ(tasks[0].attempt, 2);
  EXPECT_EQ(Spec(id, 2)["partitions"], 4);
  for (const rpc::TaskKey& k : tasks) {  // trainer/0 of the trial fails
    if (k.role == rpc::TaskRole::TRAINER && k.index == 0) Report(k, rpc::TaskState::EXITED, 1);
  }
  EXPECT_EQ(Job(id).state, JobState::kPending);
  const std::vector<std::string> events = SearchEvents(id);
  ASSERT_FALSE(events.empty());
  EXPECT_NE(events.back().find("failed: trial at P=4 (attempt 2): trainer/0 on agent \"a\" "
                               "exited with code 1; the job runs with the default P"),
            std::string::npos) << events.back();

  tasks = Start(tasks);
  ASSERT_EQ(tasks.size(), 4u);
  EXPECT_EQ(tasks[0].attempt, 3);
  EXPECT_TRUE(Spec(id, 3).is_null()) << "the real attempt gets the default P";
  EXPECT_EQ(Job(id).restarts, 0);
  for (const rpc::TaskKey& k : tasks) {
    if (k.role == rpc::TaskRole::TRAINER) Report(k, rpc::TaskState::EXITED, 0);
  }
  EXPECT_EQ(Job(id).state, JobState::kSucceeded);
}

TEST_F(PartitionTrialsTest, ATrialThatEndsWithoutATimeEndsTheSearch) {
  const int64_t id = Submit(SearchJob());
  std::vector<rpc::TaskKey> tasks = Start({});
  for (const rpc::TaskKey& k : tasks) {
    if (k.role == rpc::TaskRole::TRAINER) Report(k, rpc::TaskState::EXITED, 0);
  }
  EXPECT_EQ(Job(id).state, JobState::kPending) << "a trial's success is not the job's";
  const std::vector<std::string> events = SearchEvents(id);
  ASSERT_FALSE(events.empty());
  EXPECT_NE(events.back().find("the trainers exited without publishing a step time (a trial "
                               "needs 12 steps; [trainer] steps = 100)"),
            std::string::npos) << events.back();
  tasks = Start(tasks);
  EXPECT_TRUE(Spec(id, tasks.at(0).attempt).is_null());
}

TEST_F(PartitionTrialsTest, APlanWithoutAutoPartitionedPsVariablesSkipsTheSearch) {
  // "emb" has fixed partitions: nothing is left to search.
  const int64_t id = Submit(SearchJob("[[variable]]\nname = \"emb\"\npartitions = 3\n"));
  std::vector<rpc::TaskKey> tasks = Start({});
  FinishTrial(id, 1, 3, 0.05);
  const std::vector<std::string> events = SearchEvents(id);
  ASSERT_EQ(events.size(), 2u);
  EXPECT_NE(events[1].find("skipped: the plan of the trial at P=2 (attempt 1) puts no variable"),
            std::string::npos) << events[1];
  tasks = Start(tasks);
  EXPECT_EQ(tasks.at(0).attempt, 2);
  EXPECT_TRUE(Spec(id, 2).is_null());
}

TEST_F(PartitionTrialsTest, OnlyTheCoordinatorWritesTheSearchKeys) {
  const int64_t id = Submit(SearchJob());
  for (const std::string& key : {kv_keys::SearchState(id), kv_keys::TrialSpec(id, 1)}) {
    rpc::KvSetRequest kv;
    kv.key = key;
    kv.value = "{}";
    try {
      service_->KvSet(header_, kv);
      ADD_FAILURE() << key << " was written by a client";
    } catch (const rpc::CoordinatorError& e) {
      EXPECT_EQ(e.code, rpc::ErrorCode::INVALID_ARGUMENT) << key;
      EXPECT_NE(e.message.find("written only by the coordinator"), std::string::npos) << e.message;
    }
  }
  EXPECT_EQ(Spec(id, 1)["partitions"], 2) << "the coordinator's own value is intact";
}

TEST_F(PartitionTrialsTest, AFixedPartitionCountRunsNoTrial) {
  const int64_t id = Submit(
      "[job]\nname = \"f\"\nworkers = 2\n[trainer]\ncommand = [\"/bin/true\"]\n"
      "[ps]\nshards = 2\npartitions = 4\n");
  std::vector<rpc::TaskKey> tasks = Start({});
  EXPECT_EQ(tasks.size(), 2u);  // the trainers; hybrid's shards wait for the plan
  EXPECT_TRUE(Spec(id, 1).is_null());
  EXPECT_TRUE(SearchEvents(id).empty());
}

// The search state is in the store: a new service on the same database
// (a restarted coordinator) carries on with the next trial.
TEST_F(PartitionTrialsTest, ARestartedCoordinatorContinuesTheSearch) {
  const int64_t id = Submit(SearchJob());
  std::vector<rpc::TaskKey> tasks = Start({});
  FinishTrial(id, 1, 2, Curve(2));
  service_ = std::make_unique<CoordinatorService>(store_.get(), &clock_, ServiceOptions{});
  ASSERT_TRUE(service_->Init().ok());
  rpc::AgentInfo a;
  a.name = "a";
  a.address = "a:1";
  a.slots = 4;
  service_->RegisterAgent(header_, a);
  tasks = Start(tasks);
  ASSERT_EQ(tasks.size(), 4u);
  EXPECT_EQ(tasks[0].attempt, 2);
  EXPECT_EQ(Spec(id, 2)["partitions"], 4);
  EXPECT_EQ(Spec(id, 2)["trial_steps"], 10);
}

}  // namespace
}  // namespace parallax::coordinator
