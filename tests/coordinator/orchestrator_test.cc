// The job lifecycle driven through the service's handlers directly (no
// sockets): agents register and poll, report task states; a FakeClock stands
// in for time.
#include "coordinator/orchestration/orchestrator.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <future>

#include "coordinator/service/service.h"
#include "coordinator/store/sqlite_state_store.h"
#include "core/plan/job_plan.h"
#include "schemas/coordinator_constants.h"
#include "tests/coordinator/service_driver.h"
#include "tests/testing/temp_dir.h"

namespace parallax::coordinator {
namespace {

std::string Job(int workers, int max_restarts = 0, const std::string& extra = "") {
  return "[job]\nname = \"t\"\nworkers = " + std::to_string(workers) +
         "\narch = \"allreduce\"\nmax_restarts = " + std::to_string(max_restarts) +
         "\n[trainer]\ncommand = [\"/bin/true\"]\n[trainer.env]\nFOO = \"bar\"\n" + extra;
}

class OrchestratorTest : public ::testing::Test {
 protected:
  void SetUp() override {
    Start();
    header_.protocol_version = rpc::g_coordinator_constants.PROTOCOL_VERSION;
    header_.__set_client("test");
  }

  // Opens the database and starts a service on it: what a coordinator
  // process does when it starts (again).
  void Start(int64_t max_active_jobs = 0) {
    service_.reset();
    store_.reset();
    SqliteStateStoreOptions options;
    options.path = dir_.File("state.db");
    store_ = std::move(OpenSqliteStateStore(options)).value();
    ServiceOptions service_options;
    service_options.agent_timeout_ms = 5'000;
    if (max_active_jobs > 0) service_options.max_active_jobs = max_active_jobs;
    service_ = std::make_unique<CoordinatorService>(store_.get(), &clock_, service_options);
    ASSERT_TRUE(service_->Init().ok());
  }

  void Register(const std::string& name, int slots, const std::string& address = "") {
    rpc::AgentInfo a;
    a.name = name;
    a.address = address.empty() ? name + ":1" : address;
    a.slots = slots;
    a.gpus = 0;
    service_->RegisterAgent(header_, a);
  }

  int64_t Submit(const std::string& text) {
    rpc::SubmitJobRequest r;
    r.job_text = text;
    r.__set_job_path("/jobs/t.toml");
    rpc::JobInfo info;
    service_->SubmitJob(info, header_, r);
    return info.id;
  }

  rpc::JobInfo Get(int64_t id) {
    rpc::JobInfo info;
    service_->GetJob(info, header_, id);
    return info;
  }

  rpc::PollResponse Poll(const std::string& agent, const std::vector<rpc::TaskKey>& running = {},
                         int64_t timeout_ms = 0) {
    rpc::PollRequest r;
    r.agent_name = agent;
    r.timeout_ms = timeout_ms;
    r.running = running;
    rpc::PollResponse out;
    service_->PollAssignments(out, header_, r);
    return out;
  }

  void Report(const std::string& agent, const rpc::TaskKey& key, rpc::TaskState::type state,
              int code = 0, const std::string& message = "") {
    rpc::TaskReport r;
    r.key = key;
    r.state = state;
    if (state == rpc::TaskState::EXITED) r.__set_exit_code(code);
    if (state == rpc::TaskState::KILLED) r.__set_signal(code);
    if (!message.empty()) r.__set_message(message);
    service_->ReportTasks(header_, agent, {r});
  }

  // What rank 0 stores: a plan whose PS holds `ps_variables` variables,
  // the rest all-reduced.
  void PutPlan(int64_t id, int attempt, int ps_variables) {
    plan::JobPlan plan;
    for (int i = 0; i < 2; ++i) {
      plan::PlannedVariable v;
      v.id = static_cast<uint32_t>(i);
      v.name = "emb" + std::to_string(i);
      v.sparse = true;
      v.rows = 100;
      v.dim = 4;
      v.path = i < ps_variables ? VariablePath::kPs : VariablePath::kAllReduce;
      plan.variables.push_back(v);
      if (v.path != VariablePath::kPs) continue;
      ps::VariableSpec spec;
      spec.id = v.id;
      spec.name = v.name;
      spec.rows = v.rows;
      spec.dim = v.dim;
      spec.partition_shards = {0};
      plan.ps.variables.push_back(spec);
    }
    rpc::PutPlanRequest r;
    r.job_id = id;
    r.attempt = attempt;
    r.plan_json = plan::JobPlanToJson(plan);
    service_->PutPlan(header_, r);
  }

  std::vector<rpc::TaskKey> Keys(const rpc::PollResponse& p) {
    std::vector<rpc::TaskKey> keys;
    for (const auto& a : p.start) keys.push_back(a.key);
    return keys;
  }

  testing::TempDir dir_;
  FakeClock clock_;
  std::unique_ptr<StateStore> store_;
  std::unique_ptr<CoordinatorService> service_;
  rpc::RequestHeader header_;
};

TEST_F(OrchestratorTest, JobRunsToSuccessOnOneAgent) {
  Register("a", 4);
  int64_t id = Submit(Job(2));
  EXPECT_EQ(Get(id).state, rpc::JobState::PLACING);
  EXPECT_EQ(Get(id).attempt, 1);

  rpc::PollResponse work = Poll("a");
  ASSERT_EQ(work.start.size(), 2u);
  for (int r = 0; r < 2; ++r) {
    const rpc::TaskAssignment& t = work.start[r];
    EXPECT_EQ(t.key.role, rpc::TaskRole::TRAINER);
    EXPECT_EQ(t.key.index, r);
    EXPECT_EQ(t.key.attempt, 1);
    EXPECT_EQ(t.world_size, 2);
    EXPECT_EQ(t.local_rank, r);
    EXPECT_EQ(t.local_world_size, 2);
    EXPECT_EQ(t.num_hosts, 1);
    EXPECT_EQ(t.num_shards, 0);  // arch = allreduce: no PS
    EXPECT_EQ(t.command, std::vector<std::string>{"/bin/true"});
    EXPECT_EQ(t.env.at("FOO"), "bar");
    EXPECT_EQ(t.job_path, "/jobs/t.toml");
  }
  // Delivery is idempotent: what the agent runs is not started twice.
  EXPECT_TRUE(Poll("a", Keys(work)).start.empty());

  Report("a", work.start[0].key, rpc::TaskState::RUNNING);
  EXPECT_EQ(Get(id).state, rpc::JobState::PLACING);
  Report("a", work.start[1].key, rpc::TaskState::RUNNING);
  EXPECT_EQ(Get(id).state, rpc::JobState::RUNNING);
  Report("a", work.start[0].key, rpc::TaskState::EXITED, 0);
  EXPECT_EQ(Get(id).state, rpc::JobState::RUNNING);
  Report("a", work.start[1].key, rpc::TaskState::EXITED, 0);
  EXPECT_EQ(Get(id).state, rpc::JobState::SUCCEEDED);
}

TEST_F(OrchestratorTest, HybridJobGetsOnePsShardPerHost) {
  Register("a", 2);
  Register("b", 2);
  int64_t id = Submit("[job]\nname = \"h\"\nworkers = 4\n[trainer]\nmodel = \"lm\"\n");
  ASSERT_EQ(Get(id).state, rpc::JobState::PLACING);
  rpc::PollResponse a = Poll("a");
  rpc::PollResponse b = Poll("b");
  // The trainers start at once; each host's shard waits for the plan.
  ASSERT_EQ(a.start.size(), 2u);
  ASSERT_EQ(b.start.size(), 2u);
  int host_a = a.start[0].host_index, host_b = b.start[0].host_index;
  EXPECT_NE(host_a, host_b);
  PutPlan(id, 1, /*ps_variables=*/1);
  rpc::PollResponse a_ps = Poll("a", Keys(a));
  ASSERT_EQ(a_ps.start.size(), 1u);
  EXPECT_EQ(a_ps.start[0].key.role, rpc::TaskRole::PS);
  EXPECT_EQ(Poll("b", Keys(b)).start.size(), 1u);
  a.start.push_back(a_ps.start[0]);
  for (const auto& t : a.start) {
    EXPECT_EQ(t.num_hosts, 2);
    EXPECT_EQ(t.num_shards, 2);
    EXPECT_EQ(t.world_size, 4);
    if (t.key.role == rpc::TaskRole::PS) {
      EXPECT_TRUE(t.command.empty());
    }
  }
}

TEST_F(OrchestratorTest, PlanWithNothingOnThePsLaunchesNoShard) {
  Register("a", 2);
  int64_t id = Submit("[job]\nname = \"h\"\nworkers = 2\n[trainer]\nmodel = \"lm\"\n");
  rpc::PollResponse work = Poll("a");
  ASSERT_EQ(work.start.size(), 2u);
  for (const auto& t : work.start) {
    EXPECT_EQ(t.key.role, rpc::TaskRole::TRAINER);
    EXPECT_EQ(t.num_shards, 1);  // the plan may still use it
  }
  for (const auto& t : work.start) Report("a", t.key, rpc::TaskState::RUNNING);
  EXPECT_EQ(Get(id).state, rpc::JobState::PLACING);  // the shard is not started yet
  PutPlan(id, 1, /*ps_variables=*/0);
  EXPECT_TRUE(Poll("a", Keys(work)).start.empty());
  std::vector<rpc::TaskInfo> tasks;
  service_->ListTasks(tasks, header_, id);
  int shards = 0;
  for (const rpc::TaskInfo& t : tasks) {
    if (t.role != rpc::TaskRole::PS) continue;
    ++shards;
    EXPECT_EQ(t.state, rpc::TaskState::EXITED);
    EXPECT_EQ(t.exit_code, 0);
  }
  EXPECT_EQ(shards, 1);
  EXPECT_EQ(Get(id).state, rpc::JobState::RUNNING);
  std::vector<rpc::Event> events;
  service_->GetEvents(events, header_, id, 0, 100);
  bool said = false;
  for (const rpc::Event& e : events) {
    said |= e.message == "attempt 1: the plan puts no variable on the PS; 1 PS shard(s) not launched";
    if (e.kind == "state" && e.message.find("tasks started") != std::string::npos) {
      EXPECT_NE(e.message.find("all 2 tasks started"), std::string::npos) << e.message;
    }
  }
  EXPECT_TRUE(said);
  for (const auto& t : work.start) Report("a", t.key, rpc::TaskState::EXITED, 0);
  EXPECT_EQ(Get(id).state, rpc::JobState::SUCCEEDED);
}

TEST_F(OrchestratorTest, PsArchLaunchesShardsWithoutWaitingForThePlan) {
  Register("a", 2);
  Submit("[job]\nname = \"p\"\nworkers = 2\narch = \"ps\"\n[trainer]\nmodel = \"lm\"\n");
  EXPECT_EQ(Poll("a").start.size(), 3u);  // 2 trainers + 1 shard
}

TEST_F(OrchestratorTest, JobTooLargeStaysPendingWithAReasonAndDoesNotBlockOthers) {
  Register("a", 4);
  int64_t big = Submit(Job(8));
  int64_t small = Submit(Job(2));
  rpc::JobInfo info = Get(big);
  EXPECT_EQ(info.state, rpc::JobState::PENDING);
  EXPECT_EQ(info.waiting_for, "needs 8 slots; the cluster has 4 slots on 1 available agent(s)");
  EXPECT_EQ(Get(small).state, rpc::JobState::PLACING);
}

TEST_F(OrchestratorTest, JobsStartInSubmissionOrder) {
  Register("a", 4);
  int64_t first = Submit(Job(3));
  int64_t second = Submit(Job(2));
  int64_t third = Submit(Job(1));  // would fit now, but waits its turn
  EXPECT_EQ(Get(first).state, rpc::JobState::PLACING);
  EXPECT_EQ(Get(second).waiting_for, "needs 2 slots; 1 slot free now");
  EXPECT_EQ(Get(third).state, rpc::JobState::PENDING);
  EXPECT_EQ(Get(third).waiting_for, "queued behind job " + std::to_string(second));

  rpc::PollResponse work = Poll("a");
  for (const auto& t : work.start) Report("a", t.key, rpc::TaskState::EXITED, 0);
  EXPECT_EQ(Get(first).state, rpc::JobState::SUCCEEDED);
  EXPECT_EQ(Get(second).state, rpc::JobState::PLACING);
  EXPECT_EQ(Get(third).state, rpc::JobState::PLACING);
}

TEST_F(OrchestratorTest, FailedTaskRestartsTheWholeSetThenFails) {
  Register("a", 4);
  int64_t id = Submit(Job(2, /*max_restarts=*/1));
  rpc::PollResponse work = Poll("a");
  for (const auto& t : work.start) Report("a", t.key, rpc::TaskState::RUNNING);
  Report("a", work.start[1].key, rpc::TaskState::EXITED, 3, "boom\n");
  rpc::JobInfo info = Get(id);
  EXPECT_EQ(info.state, rpc::JobState::PENDING);
  EXPECT_EQ(info.waiting_for, "waiting for the tasks of attempt 1 to stop");

  // The survivor of attempt 1 is stopped before attempt 2 starts.
  rpc::PollResponse stop = Poll("a", {work.start[0].key});
  ASSERT_EQ(stop.stop.size(), 1u);
  EXPECT_EQ(stop.stop[0].index, 0);
  EXPECT_TRUE(stop.start.empty());
  Report("a", work.start[0].key, rpc::TaskState::KILLED, 15);
  info = Get(id);
  EXPECT_EQ(info.state, rpc::JobState::PLACING);
  EXPECT_EQ(info.attempt, 2);

  rpc::PollResponse second = Poll("a");
  ASSERT_EQ(second.start.size(), 2u);
  EXPECT_EQ(second.start[0].key.attempt, 2);
  Report("a", second.start[0].key, rpc::TaskState::KILLED, 9);
  info = Get(id);
  EXPECT_EQ(info.state, rpc::JobState::FAILED);
  EXPECT_NE(info.reason.find("trainer/0 on agent \"a\" was killed by signal 9 (SIGKILL)"),
            std::string::npos)
      << info.reason;
  EXPECT_NE(info.reason.find("after 1 restart(s)"), std::string::npos) << info.reason;

  std::vector<rpc::Event> events;
  service_->GetEvents(events, header_, id, 0, 0);
  int restarts = 0;
  for (const auto& e : events) restarts += e.message.find("restart 1 of 1") != std::string::npos;
  EXPECT_EQ(restarts, 1);
}

TEST_F(OrchestratorTest, FailureReasonCarriesTheLogTail) {
  Register("a", 1);
  int64_t id = Submit(Job(1));
  rpc::PollResponse work = Poll("a");
  Report("a", work.start[0].key, rpc::TaskState::EXITED, 2, "Traceback\nValueError: bad\n");
  rpc::JobInfo info = Get(id);
  EXPECT_EQ(info.state, rpc::JobState::FAILED);
  EXPECT_NE(info.reason.find("exited with code 2"), std::string::npos);
  EXPECT_NE(info.reason.find("ValueError: bad"), std::string::npos);
}

TEST_F(OrchestratorTest, LostAgentFailsItsTasks) {
  Register("a", 2);
  int64_t id = Submit(Job(1));
  rpc::PollResponse work = Poll("a");
  Report("a", work.start[0].key, rpc::TaskState::RUNNING);
  ASSERT_EQ(Get(id).state, rpc::JobState::RUNNING);
  clock_.Advance(4'000);
  service_->Reconcile();
  EXPECT_EQ(Get(id).state, rpc::JobState::RUNNING);  // within the timeout
  clock_.Advance(2'000);
  service_->Reconcile();
  rpc::JobInfo info = Get(id);
  EXPECT_EQ(info.state, rpc::JobState::FAILED);
  EXPECT_NE(info.reason.find("lost: agent \"a\" stopped heartbeating"), std::string::npos)
      << info.reason;
}

TEST_F(OrchestratorTest, HeartbeatsKeepAnAgentFromBeingLost) {
  Register("a", 2);
  int64_t id = Submit(Job(1));
  Report("a", Poll("a").start[0].key, rpc::TaskState::RUNNING);
  for (int i = 0; i < 5; ++i) {
    clock_.Advance(3'000);
    rpc::HeartbeatRequest hb;
    hb.agent_name = "a";
    rpc::HeartbeatResponse out;
    service_->Heartbeat(out, header_, hb);
    service_->Reconcile();
  }
  EXPECT_EQ(Get(id).state, rpc::JobState::RUNNING);
}

TEST_F(OrchestratorTest, CancelStopsRunningTasks) {
  Register("a", 2);
  int64_t id = Submit(Job(2));
  rpc::PollResponse work = Poll("a");
  for (const auto& t : work.start) Report("a", t.key, rpc::TaskState::RUNNING);
  rpc::JobInfo out;
  service_->CancelJob(out, header_, id, "");
  EXPECT_EQ(out.state, rpc::JobState::CANCELLED);
  rpc::PollResponse stop = Poll("a", Keys(work));
  EXPECT_EQ(stop.stop.size(), 2u);
  EXPECT_TRUE(stop.start.empty());
}

TEST_F(OrchestratorTest, DrainedAgentGetsNoNewTasks) {
  Register("a", 2);
  Register("b", 2);
  service_->DrainAgent(header_, "a", true);
  int64_t id = Submit(Job(2));
  EXPECT_TRUE(Poll("a").start.empty());
  EXPECT_EQ(Poll("b").start.size(), 2u);
  // Re-registering does not undo a drain.
  Register("a", 2);
  std::vector<rpc::AgentInfo> agents;
  service_->ListAgents(agents, header_);
  EXPECT_TRUE(agents[0].draining);
  (void)id;
}

TEST_F(OrchestratorTest, AgentRestartMarksTasksItNoLongerRunsAsLost) {
  Register("a", 2);
  int64_t id = Submit(Job(1, /*max_restarts=*/1));
  Report("a", Poll("a").start[0].key, rpc::TaskState::RUNNING);
  Register("a", 2);  // the agent came back without its task
  rpc::PollResponse work = Poll("a");
  rpc::JobInfo info = Get(id);
  EXPECT_EQ(info.attempt, 2);
  ASSERT_EQ(work.start.size(), 1u);
  EXPECT_EQ(work.start[0].key.attempt, 2);
}

TEST_F(OrchestratorTest, SecondLiveAgentWithTheSameNameIsRefused) {
  Register("a", 2, "host1:7000");
  EXPECT_THROW(Register("a", 2, "host2:7000"), rpc::CoordinatorError);
  Register("a", 2, "host1:7000");  // the same agent again is fine
  clock_.Advance(6'000);           // once the first is silent, the name is free
  Register("a", 2, "host2:7000");
}

TEST_F(OrchestratorTest, OldAttemptIsFenced) {
  Register("a", 2);
  int64_t id = Submit(Job(1, /*max_restarts=*/1));
  rpc::PollResponse work = Poll("a");
  Report("a", work.start[0].key, rpc::TaskState::EXITED, 1);
  ASSERT_EQ(Get(id).attempt, 2);
  rpc::KvSetRequest kv;
  kv.key = "job/" + std::to_string(id) + "/1/comm/0";
  kv.value = "stale";
  try {
    service_->KvSet(header_, kv);
    FAIL() << "a key of attempt 1 was accepted";
  } catch (const rpc::CoordinatorError& e) {
    EXPECT_EQ(e.code, rpc::ErrorCode::FENCED);
    EXPECT_NE(e.message.find("attempt 1"), std::string::npos);
  }
  kv.key = "job/" + std::to_string(id) + "/2/comm/0";
  service_->KvSet(header_, kv);
}

TEST_F(OrchestratorTest, ResumeStartsANewAttempt) {
  Register("a", 1);
  int64_t id = Submit(Job(1));
  Report("a", Poll("a").start[0].key, rpc::TaskState::EXITED, 1);
  ASSERT_EQ(Get(id).state, rpc::JobState::FAILED);
  rpc::JobInfo out;
  service_->ResumeJob(out, header_, id, {});
  EXPECT_EQ(out.state, rpc::JobState::PLACING);
  EXPECT_EQ(out.attempt, 2);
  EXPECT_THROW(service_->ResumeJob(out, header_, id, {}), rpc::CoordinatorError);  // not failed now
}

TEST_F(OrchestratorTest, LongPollReturnsAsSoonAsWorkArrives) {
  Register("a", 1);
  auto poll = std::async(std::launch::async, [&] { return Poll("a", {}, 30'000); });
  Submit(Job(1));
  rpc::PollResponse work = poll.get();  // would take 30 s if the poll were not woken
  EXPECT_EQ(work.start.size(), 1u);
}

TEST_F(OrchestratorTest, ARestartedCoordinatorPlacesItsQueueInSubmissionOrder) {
  // Submitted while no agent is there: all three wait.
  int64_t first = Submit(Job(2));
  int64_t second = Submit(Job(1));
  int64_t third = Submit(Job(2));
  EXPECT_EQ(Get(first).state, rpc::JobState::PENDING);
  // A new coordinator process on the same database builds its queue from it.
  Start();
  Register("a", 3);
  EXPECT_EQ(Get(first).state, rpc::JobState::PLACING);
  EXPECT_EQ(Get(second).state, rpc::JobState::PLACING);
  EXPECT_EQ(Get(third).state, rpc::JobState::PENDING);
  EXPECT_EQ(Get(third).waiting_for, "needs 2 slots; 0 slots free now");
}

TEST_F(OrchestratorTest, TheJobLimitCountsTheQueueAfterARestart) {
  Submit(Job(1));
  Submit(Job(1));
  Start(/*max_active_jobs=*/2);
  try {
    Submit(Job(1));
    FAIL() << "a third job was accepted past --max-active-jobs 2";
  } catch (const rpc::CoordinatorError& e) {
    EXPECT_EQ(e.code, rpc::ErrorCode::FAILED_PRECONDITION);
    EXPECT_NE(e.message.find("2 jobs are pending or running"), std::string::npos) << e.message;
  }
}

TEST_F(OrchestratorTest, UnknownAgentIsToldToRegister) {
  EXPECT_FALSE(Poll("ghost").known);
}


// A lost PS shard of an async job started again alone
// (coordinator/orchestration/shard_recovery.h), through the service's handlers.
class ShardRestartTest : public ::testing::Test {
 protected:
  int64_t StartJob(const std::string& consistency) {
    d_.Register("a", 2);
    const int64_t id = d_.Submit(
        "[job]\nname = \"s\"\nworkers = 2\narch = \"ps\"\nconsistency = \"" + consistency +
        "\"\nmax_restarts = 1\n[trainer]\nmodel = \"lm\"\ncheckpoint_every = 10\n"
        "checkpoint_dir = \"" + dir_.path() + "\"\n");
    work_ = d_.Poll("a");
    EXPECT_EQ(work_.start.size(), 3u);
    for (const auto& a : work_.start) {
      d_.Report("a", {a.key}, rpc::TaskState::RUNNING);
      if (a.key.role == rpc::TaskRole::PS) shard_ = a.key;
    }
    EXPECT_EQ(d_.Job(id).state, rpc::JobState::RUNNING);
    return id;
  }

  std::vector<rpc::TaskKey> Trainers() {
    std::vector<rpc::TaskKey> keys;
    for (const auto& a : work_.start) {
      if (a.key.role == rpc::TaskRole::TRAINER) keys.push_back(a.key);
    }
    return keys;
  }

  bool HasRestartEvent(int64_t id) {
    for (const std::string& m : d_.Events(id)) {
      if (m.find("restart 1 of 1: ps/0") != std::string::npos) return true;
    }
    return false;
  }

  ServiceDriver d_;
  testing::TempDir dir_;
  rpc::PollResponse work_;
  rpc::TaskKey shard_;
};

TEST_F(ShardRestartTest, AsyncShardRestartsAloneAndItsOldGenerationIsFenced) {
  const int64_t id = StartJob("async");
  d_.Report("a", {shard_}, rpc::TaskState::KILLED, {9});
  // Same attempt, no restart: the shard's next generation is assigned to its agent.
  rpc::JobInfo job = d_.Job(id);
  EXPECT_EQ(job.state, rpc::JobState::RUNNING);
  EXPECT_EQ(job.attempt, 1);
  EXPECT_EQ(job.shard_restarts, 1);
  EXPECT_EQ(job.lost_updates, 0);
  rpc::PollResponse next = d_.Poll("a", Trainers());
  ASSERT_EQ(next.start.size(), 1u);
  EXPECT_TRUE(next.stop.empty());
  const rpc::TaskKey second = next.start[0].key;
  EXPECT_EQ(second.role, rpc::TaskRole::PS);
  EXPECT_EQ(second.attempt, 1);
  ASSERT_TRUE(second.__isset.generation);
  EXPECT_EQ(second.generation, 2);
  const std::vector<std::string> events = d_.Events(id);
  EXPECT_NE(std::find(events.begin(), events.end(),
                      "attempt 1: shard 0 lost (ps/0 on agent \"a\" was killed by signal 9 "
                      "(SIGKILL)), generation 2 started on agent \"a\""),
            events.end());

  // The dead generation's reports (a repeated final one) change nothing.
  d_.Report("a", {shard_}, rpc::TaskState::EXITED, {1});
  d_.Report("a", {second}, rpc::TaskState::RUNNING);
  d_.Report("a", {shard_}, rpc::TaskState::KILLED, {9});
  EXPECT_EQ(d_.Job(id).state, rpc::JobState::RUNNING);
  for (const rpc::TaskInfo& t : d_.Tasks(id)) {
    if (t.role != rpc::TaskRole::PS) continue;
    EXPECT_EQ(t.state, rpc::TaskState::RUNNING);
    EXPECT_EQ(t.generation, 2);
  }
  // An agent that still lists the old generation is told to stop it.
  std::vector<rpc::TaskKey> running = Trainers();
  running.push_back(shard_);
  running.push_back(second);
  rpc::PollResponse stale = d_.Poll("a", running);
  ASSERT_EQ(stale.stop.size(), 1u);
  EXPECT_EQ(stale.stop[0], shard_);
  EXPECT_TRUE(stale.start.empty());

  // The next generation's count of lost updates: one event and the job's
  // total, however often the shard repeats it.
  rpc::ShardStatsReport r;
  r.job_id = id;
  r.attempt = 1;
  r.shard = 0;
  r.__set_generation(2);
  r.__set_lost_updates(7);
  d_.service().ReportShardStats(d_.header(), r);
  d_.service().ReportShardStats(d_.header(), r);
  job = d_.Job(id);
  EXPECT_EQ(job.lost_updates, 7);
  EXPECT_EQ(job.lost_updates_unknown, 0);
  const std::vector<std::string> after = d_.Events(id);
  EXPECT_EQ(std::count(after.begin(), after.end(),
                       "attempt 1: shard 0 generation 2: 7 update(s) its lost process applied "
                       "after the checkpoint it loaded are lost"),
            1);
  // A count that is unknown is counted apart, never as 0.
  r.__set_generation(3);
  r.__set_lost_updates(-1);
  d_.service().ReportShardStats(d_.header(), r);
  job = d_.Job(id);
  EXPECT_EQ(job.lost_updates, 7);
  EXPECT_EQ(job.lost_updates_unknown, 1);

  // max_restarts = 1: the second loss takes the ordinary path, a restart
  // of the whole job.
  d_.Report("a", {second}, rpc::TaskState::KILLED, {9});
  EXPECT_EQ(d_.Job(id).state, rpc::JobState::PENDING);
  EXPECT_TRUE(HasRestartEvent(id));
}

TEST_F(ShardRestartTest, SyncShardLossRestartsTheWholeJob) {
  const int64_t id = StartJob("sync");
  d_.Report("a", {shard_}, rpc::TaskState::KILLED, {9});
  const rpc::JobInfo job = d_.Job(id);
  EXPECT_EQ(job.state, rpc::JobState::PENDING);
  EXPECT_TRUE(HasRestartEvent(id));
  EXPECT_FALSE(job.__isset.shard_restarts);
  EXPECT_TRUE(d_.Poll("a", Trainers()).start.empty());
}

}  // namespace
}  // namespace parallax::coordinator
