#include "coordinator/store/sqlite_state_store.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sqlite3.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "coordinator/store/sqlite_util.h"
#include "parallax/job_config.h"
#include "coordinator/store/state_sql.h"
#include "tests/coordinator/fault_injection_state_store.h"
#include "tests/testing/temp_dir.h"

namespace parallax::coordinator {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

// A second, raw connection to the store's file: what another process (a
// second coordinator, an operator with the sqlite3 shell) would do.
class RawDb {
 public:
  explicit RawDb(const std::string& path) {
    EXPECT_EQ(sqlite3_open(path.c_str(), &db_), SQLITE_OK) << path;
  }
  ~RawDb() { sqlite3_close(db_); }
  RawDb(const RawDb&) = delete;
  RawDb& operator=(const RawDb&) = delete;

  // Returns "" on success, the error message otherwise.
  std::string Exec(const std::string& sql) {
    char* error = nullptr;
    if (sqlite3_exec(db_, sql.c_str(), nullptr, nullptr, &error) == SQLITE_OK) return "";
    std::string message = error ? error : "error";
    sqlite3_free(error);
    return message;
  }
  // The first column of the first row as text; "<none>" without a row.
  std::string Query(const std::string& sql) {
    sqlite3_stmt* stmt = nullptr;
    if (sqlite3_prepare_v2(db_, sql.c_str(), -1, &stmt, nullptr) != SQLITE_OK) {
      return std::string("<error: ") + sqlite3_errmsg(db_) + ">";
    }
    std::string result = "<none>";
    if (sqlite3_step(stmt) == SQLITE_ROW) {
      const unsigned char* text = sqlite3_column_text(stmt, 0);
      result = text ? reinterpret_cast<const char*>(text) : "<null>";
    }
    sqlite3_finalize(stmt);
    return result;
  }

 private:
  sqlite3* db_ = nullptr;
};

class SqliteStateStoreTest : public ::testing::Test {
 protected:
  SqliteStateStoreTest() : path_(dir_.File("state.db")) {}

  void SetUp() override { store_ = MustOpen(); }

  StatusOr<std::unique_ptr<StateStore>> Open(int max_schema_version = 0,
                                             int busy_timeout_ms = 5000) {
    SqliteStateStoreOptions options;
    options.path = path_;
    options.max_schema_version = max_schema_version;
    options.busy_timeout_ms = busy_timeout_ms;
    return OpenSqliteStateStore(options);
  }

  std::unique_ptr<StateStore> MustOpen(int max_schema_version = 0, int busy_timeout_ms = 5000) {
    StatusOr<std::unique_ptr<StateStore>> store = Open(max_schema_version, busy_timeout_ms);
    EXPECT_TRUE(store.ok()) << store.status().ToString();
    return store.ok() ? std::move(store).value() : nullptr;
  }

  JobRecord MustCreate(const std::string& name, int64_t now = 1000, int workers = 2) {
    NewJob job;
    job.name = name;
    job.workers = workers;
    job.job_text = "[job]\nname = \"" + name + "\"\n";
    job.job_path = "/jobs/" + name + ".toml";
    job.submitted_by = "alice";
    StatusOr<JobRecord> record = store_->CreateJob(job, now);
    EXPECT_TRUE(record.ok()) << record.status().ToString();
    return record.ok() ? record.value() : JobRecord{};
  }

  std::vector<EventRecord> Events(int64_t job_id, int64_t after_seq = 0, int limit = 0) {
    StatusOr<std::vector<EventRecord>> events = store_->ListEvents(job_id, after_seq, limit);
    EXPECT_TRUE(events.ok()) << events.status().ToString();
    return events.ok() ? events.value() : std::vector<EventRecord>{};
  }

  static AgentRecord Agent(const std::string& name, int slots = 4) {
    AgentRecord agent;
    agent.name = name;
    agent.address = name + ":7000";
    agent.slots = slots;
    agent.gpus = 1;
    agent.hostname = name + ".example";
    agent.version = "0.1.0";
    return agent;
  }

  testing::TempDir dir_;
  const std::string path_;
  std::unique_ptr<StateStore> store_;
};

// ---- Jobs ----

// Every room reads a stored job's settings through ParsedConfig: parsed once
// per job text, parsed again when the text changes, an error (not a crash or
// a stale config) for text that no longer parses.
TEST_F(SqliteStateStoreTest, ParsedConfigParsesEachJobTextOnce) {
  NewJob job;
  job.name = "parsed";
  job.workers = 2;
  job.job_text = "[job]\nname = \"parsed\"\nworkers = 2\n[trainer]\nmodel = \"mlp\"\nsteps = 30\n";
  StatusOr<JobRecord> record = store_->CreateJob(job, 1);
  ASSERT_TRUE(record.ok()) << record.status().ToString();
  StatusOr<std::shared_ptr<const JobConfig>> first = store_->ParsedConfig(*record);
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  EXPECT_EQ((*first)->trainer.steps, 30);
  StatusOr<std::shared_ptr<const JobConfig>> again = store_->ParsedConfig(*record);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->get(), first->get()) << "the same text was parsed twice";

  JobRecord edited = *record;  // as `parallax resume` edits it
  edited.job_text += "batch_size = 7\n";
  StatusOr<std::shared_ptr<const JobConfig>> after = store_->ParsedConfig(edited);
  ASSERT_TRUE(after.ok()) << after.status().ToString();
  EXPECT_NE(after->get(), first->get());
  EXPECT_EQ((*after)->trainer.batch_size, 7);

  JobRecord broken = *record;
  broken.job_text = "[job]\nname = \"parsed\"\n[trainer]\nsteps = \"many\"\n";
  StatusOr<std::shared_ptr<const JobConfig>> bad = store_->ParsedConfig(broken);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("steps"), std::string::npos) << bad.status().message();
}

TEST_F(SqliteStateStoreTest, CreateJobStoresPendingJobWithIncreasingIds) {
  JobRecord a = MustCreate("a", 1000);
  JobRecord b = MustCreate("b", 2000);
  EXPECT_GT(a.id, 0);
  EXPECT_GT(b.id, a.id);
  EXPECT_EQ(a.state, JobState::kPending);
  EXPECT_EQ(a.attempt, 0);

  StatusOr<JobRecord> got = store_->GetJob(b.id);
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_EQ(got->name, "b");
  EXPECT_EQ(got->state, JobState::kPending);
  EXPECT_EQ(got->workers, 2);
  EXPECT_EQ(got->step, 0);
  EXPECT_EQ(got->created, 2000);
  EXPECT_EQ(got->updated, 2000);
  EXPECT_EQ(got->attempt, 0);
  EXPECT_EQ(got->reason, "");
  EXPECT_EQ(got->job_text, "[job]\nname = \"b\"\n");
  EXPECT_EQ(got->job_path, "/jobs/b.toml");
  EXPECT_EQ(got->submitted_by, "alice");
}

TEST_F(SqliteStateStoreTest, CreateJobWritesSubmittedEvent) {
  JobRecord job = MustCreate("lm", 1234);
  std::vector<EventRecord> events = Events(job.id);
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].job_id, job.id);
  EXPECT_EQ(events[0].kind, "submitted");
  EXPECT_EQ(events[0].time, 1234);
  EXPECT_THAT(events[0].message, HasSubstr("\"lm\""));
  EXPECT_THAT(events[0].message, HasSubstr("\"alice\""));
}

TEST_F(SqliteStateStoreTest, CreateJobRefusesZeroWorkersAndStoresNothing) {
  NewJob job;
  job.name = "bad";
  job.workers = 0;
  StatusOr<JobRecord> record = store_->CreateJob(job, 1);
  ASSERT_FALSE(record.ok());
  EXPECT_EQ(record.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(record.status().message(), HasSubstr("workers"));
  EXPECT_TRUE(store_->ListJobs({})->empty());
  EXPECT_TRUE(Events(0).empty());
}

TEST_F(SqliteStateStoreTest, GetUnknownJobIsNotFound) {
  StatusOr<JobRecord> job = store_->GetJob(42);
  ASSERT_FALSE(job.ok());
  EXPECT_EQ(job.status().code(), StatusCode::kNotFound);
  EXPECT_THAT(job.status().message(), HasSubstr("\"42\""));
  // Every job-scoped call agrees.
  EXPECT_EQ(store_->ListEvents(42, 0, 0).status().code(), StatusCode::kNotFound);
  EXPECT_EQ(store_->ListTasks(42).status().code(), StatusCode::kNotFound);
  EXPECT_EQ(store_->GetPlan(42, 1).status().code(), StatusCode::kNotFound);
  EXPECT_EQ(store_->ListMetrics(42, 0, 0).status().code(), StatusCode::kNotFound);
  EXPECT_EQ(store_->ListCheckpoints(42).status().code(), StatusCode::kNotFound);
}

TEST_F(SqliteStateStoreTest, ListJobsNewestFirstFilteredAndLimited) {
  JobRecord a = MustCreate("a");
  JobRecord b = MustCreate("b");
  JobRecord c = MustCreate("c");
  ASSERT_TRUE(store_->TransitionJob(b.id, JobState::kCancelled, "no", 2000).ok());

  auto ids = [](const std::vector<JobRecord>& jobs) {
    std::vector<int64_t> out;
    for (const JobRecord& job : jobs) out.push_back(job.id);
    return out;
  };
  StatusOr<std::vector<JobRecord>> all = store_->ListJobs({});
  ASSERT_TRUE(all.ok()) << all.status().ToString();
  EXPECT_THAT(ids(*all), ElementsAre(c.id, b.id, a.id));

  JobFilter pending;
  pending.states = {JobState::kPending};
  EXPECT_THAT(ids(*store_->ListJobs(pending)), ElementsAre(c.id, a.id));

  JobFilter two_states;
  two_states.states = {JobState::kCancelled, JobState::kRunning};
  EXPECT_THAT(ids(*store_->ListJobs(two_states)), ElementsAre(b.id));

  JobFilter limited;
  limited.limit = 2;
  EXPECT_THAT(ids(*store_->ListJobs(limited)), ElementsAre(c.id, b.id));

  JobFilter negative;
  negative.limit = -1;
  EXPECT_EQ(store_->ListJobs(negative).status().code(), StatusCode::kInvalidArgument);
}

TEST_F(SqliteStateStoreTest, TransitionMovesStateAndAppendsEvent) {
  JobRecord job = MustCreate("lm", 1000);
  StatusOr<JobRecord> placing = store_->TransitionJob(job.id, JobState::kPlacing, "", 2000);
  ASSERT_TRUE(placing.ok()) << placing.status().ToString();
  EXPECT_EQ(placing->state, JobState::kPlacing);
  EXPECT_EQ(placing->updated, 2000);
  EXPECT_EQ(placing->attempt, 1);

  ASSERT_TRUE(store_->TransitionJob(job.id, JobState::kRunning, "", 3000).ok());
  StatusOr<JobRecord> failed =
      store_->TransitionJob(job.id, JobState::kFailed, "rank 3 exited with code 1", 4000);
  ASSERT_TRUE(failed.ok()) << failed.status().ToString();

  StatusOr<JobRecord> got = store_->GetJob(job.id);
  ASSERT_TRUE(got.ok());
  EXPECT_EQ(got->state, JobState::kFailed);
  EXPECT_EQ(got->reason, "rank 3 exited with code 1");
  EXPECT_EQ(got->updated, 4000);
  EXPECT_EQ(got->created, 1000);
  EXPECT_EQ(got->attempt, 1);

  std::vector<EventRecord> events = Events(job.id);
  ASSERT_EQ(events.size(), 4u);
  EXPECT_EQ(events[1].kind, "state");
  EXPECT_EQ(events[1].message, "PENDING -> PLACING");
  EXPECT_EQ(events[1].time, 2000);
  EXPECT_EQ(events[2].message, "PLACING -> RUNNING");
  EXPECT_EQ(events[3].message, "RUNNING -> FAILED: rank 3 exited with code 1");
}

TEST_F(SqliteStateStoreTest, RestartStartsANewAttemptAndClearsReason) {
  JobRecord job = MustCreate("lm");
  ASSERT_TRUE(store_->TransitionJob(job.id, JobState::kPlacing, "", 1).ok());
  ASSERT_TRUE(store_->TransitionJob(job.id, JobState::kRunning, "", 2).ok());
  StatusOr<JobRecord> pending =
      store_->TransitionJob(job.id, JobState::kPending, "agent \"h1\" lost", 3);
  ASSERT_TRUE(pending.ok()) << pending.status().ToString();
  EXPECT_EQ(pending->reason, "");  // kept only for FAILED and CANCELLED
  EXPECT_EQ(pending->attempt, 1);
  StatusOr<JobRecord> placing = store_->TransitionJob(job.id, JobState::kPlacing, "", 4);
  ASSERT_TRUE(placing.ok());
  EXPECT_EQ(placing->attempt, 2);
  EXPECT_EQ(Events(job.id).back().message, "PENDING -> PLACING");
  EXPECT_EQ(Events(job.id)[3].message, "RUNNING -> PENDING: agent \"h1\" lost");
}

TEST_F(SqliteStateStoreTest, RefusedTransitionNamesCurrentStateAndChangesNothing) {
  JobRecord job = MustCreate("lm", 1000);
  ASSERT_TRUE(store_->TransitionJob(job.id, JobState::kCancelled, "user", 2000).ok());
  const size_t events_before = Events(job.id).size();

  StatusOr<JobRecord> again = store_->TransitionJob(job.id, JobState::kRunning, "", 3000);
  ASSERT_FALSE(again.ok());
  EXPECT_EQ(again.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_THAT(again.status().message(), HasSubstr("CANCELLED"));
  EXPECT_THAT(again.status().message(), HasSubstr("RUNNING"));

  StatusOr<JobRecord> skip = store_->TransitionJob(MustCreate("b").id, JobState::kRunning, "", 1);
  EXPECT_EQ(skip.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_THAT(skip.status().message(), HasSubstr("PENDING"));

  StatusOr<JobRecord> got = store_->GetJob(job.id);
  ASSERT_TRUE(got.ok());
  EXPECT_EQ(got->state, JobState::kCancelled);
  EXPECT_EQ(got->reason, "user");
  EXPECT_EQ(got->updated, 2000);
  EXPECT_EQ(Events(job.id).size(), events_before);
}

TEST_F(SqliteStateStoreTest, TransitionUnknownJobIsNotFound) {
  StatusOr<JobRecord> job = store_->TransitionJob(7, JobState::kCancelled, "", 1);
  EXPECT_EQ(job.status().code(), StatusCode::kNotFound);
  EXPECT_TRUE(Events(0).empty());
}

// ---- Events ----

TEST_F(SqliteStateStoreTest, EventsFilteredByJobAndSeq) {
  JobRecord a = MustCreate("a", 1);                                        // seq 1
  JobRecord b = MustCreate("b", 2);                                        // seq 2
  StatusOr<int64_t> note = store_->AppendEvent(a.id, "note", "hello", 3);  // seq 3
  StatusOr<int64_t> cluster = store_->AppendEvent(0, "cluster", "up", 4);  // seq 4
  ASSERT_TRUE(note.ok()) << note.status().ToString();
  ASSERT_TRUE(cluster.ok()) << cluster.status().ToString();
  EXPECT_GT(*cluster, *note);

  std::vector<EventRecord> of_a = Events(a.id);
  ASSERT_EQ(of_a.size(), 2u);
  EXPECT_EQ(of_a[0].kind, "submitted");
  EXPECT_EQ(of_a[1].seq, *note);
  EXPECT_EQ(of_a[1].message, "hello");
  EXPECT_EQ(of_a[1].time, 3);

  std::vector<EventRecord> all = Events(0);
  ASSERT_EQ(all.size(), 4u);
  for (size_t i = 1; i < all.size(); ++i) EXPECT_GT(all[i].seq, all[i - 1].seq);
  EXPECT_EQ(all[1].job_id, b.id);
  EXPECT_EQ(all[3].job_id, 0);
  EXPECT_EQ(all[3].kind, "cluster");

  std::vector<EventRecord> after = Events(0, all[1].seq);
  ASSERT_EQ(after.size(), 2u);
  EXPECT_EQ(after[0].seq, *note);

  std::vector<EventRecord> limited = Events(0, 0, 1);
  ASSERT_EQ(limited.size(), 1u);
  EXPECT_EQ(limited[0].seq, all[0].seq);

  EXPECT_TRUE(Events(a.id, *note).empty());
}

TEST_F(SqliteStateStoreTest, AppendEventToUnknownJobIsNotFound) {
  StatusOr<int64_t> seq = store_->AppendEvent(99, "note", "x", 1);
  EXPECT_EQ(seq.status().code(), StatusCode::kNotFound);
  EXPECT_THAT(seq.status().message(), HasSubstr("\"99\""));
  EXPECT_TRUE(Events(0).empty());
}

// ---- Agents ----

TEST_F(SqliteStateStoreTest, UpsertAgentKeepsFirstRegistration) {
  ASSERT_TRUE(store_->UpsertAgent(Agent("h1", 4), 1000).ok());
  AgentRecord changed = Agent("h1", 8);
  changed.address = "10.0.0.1:7001";
  changed.draining = true;
  changed.registered = 5;  // ignored: the store keeps the first time
  ASSERT_TRUE(store_->UpsertAgent(changed, 2000).ok());
  ASSERT_TRUE(store_->UpsertAgent(Agent("h0"), 3000).ok());

  StatusOr<std::vector<AgentRecord>> agents = store_->ListAgents();
  ASSERT_TRUE(agents.ok()) << agents.status().ToString();
  ASSERT_EQ(agents->size(), 2u);
  EXPECT_EQ((*agents)[0].name, "h0");
  const AgentRecord& h1 = (*agents)[1];
  EXPECT_EQ(h1.name, "h1");
  EXPECT_EQ(h1.address, "10.0.0.1:7001");
  EXPECT_EQ(h1.slots, 8);
  EXPECT_EQ(h1.gpus, 1);
  EXPECT_EQ(h1.hostname, "h1.example");
  EXPECT_EQ(h1.version, "0.1.0");
  EXPECT_EQ(h1.registered, 1000);
  EXPECT_EQ(h1.last_seen, 2000);
  EXPECT_TRUE(h1.draining);
  EXPECT_FALSE((*agents)[0].draining);

  std::vector<EventRecord> events = Events(0);
  ASSERT_EQ(events.size(), 3u);
  for (const EventRecord& event : events) {
    EXPECT_EQ(event.kind, "agent");
    EXPECT_EQ(event.job_id, 0);
  }
  EXPECT_THAT(events[0].message, HasSubstr("\"h1\""));
}

TEST_F(SqliteStateStoreTest, AnAgentsRoleIsKeptAndChangesWithARegistration) {
  AgentRecord ps = Agent("p1");
  ps.ps_host = true;
  ASSERT_TRUE(store_->UpsertAgent(ps, 1000).ok());
  ASSERT_TRUE(store_->UpsertAgent(Agent("w1"), 1000).ok());
  StatusOr<std::vector<AgentRecord>> agents = store_->ListAgents();
  ASSERT_TRUE(agents.ok()) << agents.status().ToString();
  ASSERT_EQ(agents->size(), 2u);
  EXPECT_TRUE((*agents)[0].ps_host);
  EXPECT_FALSE((*agents)[1].ps_host);
  EXPECT_THAT(Events(0)[0].message, HasSubstr("for PS shards only"));
  // Restarted without --role ps: a worker again.
  ASSERT_TRUE(store_->UpsertAgent(Agent("p1"), 2000).ok());
  EXPECT_FALSE((*store_->ListAgents())[0].ps_host);
}

TEST_F(SqliteStateStoreTest, UpsertAgentRefusesBadRecords) {
  EXPECT_EQ(store_->UpsertAgent(Agent(""), 1).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(store_->UpsertAgent(Agent("h1", -1), 1).code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(store_->ListAgents()->empty());
  EXPECT_TRUE(Events(0).empty());
}

TEST_F(SqliteStateStoreTest, TouchAgentsCountsKnownAgentsOnly) {
  ASSERT_TRUE(store_->UpsertAgent(Agent("h1"), 1000).ok());
  ASSERT_TRUE(store_->UpsertAgent(Agent("h2"), 1000).ok());
  StatusOr<int> touched = store_->TouchAgents({{"h1", 5000}, {"ghost", 5000}, {"h2", 6000}});
  ASSERT_TRUE(touched.ok()) << touched.status().ToString();
  EXPECT_EQ(*touched, 2);
  StatusOr<std::vector<AgentRecord>> agents = store_->ListAgents();
  ASSERT_TRUE(agents.ok());
  ASSERT_EQ(agents->size(), 2u);
  EXPECT_EQ((*agents)[0].last_seen, 5000);
  EXPECT_EQ((*agents)[1].last_seen, 6000);
  EXPECT_EQ((*agents)[0].registered, 1000);
  EXPECT_EQ(*store_->TouchAgents({}), 0);
  EXPECT_EQ(*store_->TouchAgents({{"ghost", 1}}), 0);
}

// ---- Tasks ----

TEST_F(SqliteStateStoreTest, TasksUpsertAndListNewestAttemptFirst) {
  JobRecord job = MustCreate("lm");
  auto task = [&](int attempt, TaskRole role, int index) {
    TaskRecord t;
    t.job_id = job.id;
    t.attempt = attempt;
    t.role = role;
    t.index = index;
    t.agent_name = "h" + std::to_string(index);
    t.updated = 100 * attempt + index;
    return t;
  };
  for (const TaskRecord& t : {task(1, TaskRole::kPs, 0), task(1, TaskRole::kTrainer, 1),
                              task(1, TaskRole::kTrainer, 0), task(2, TaskRole::kPs, 0),
                              task(2, TaskRole::kTrainer, 1), task(2, TaskRole::kTrainer, 0)}) {
    ASSERT_TRUE(store_->UpsertTask(t).ok());
  }
  TaskRecord exited = task(1, TaskRole::kTrainer, 1);
  exited.state = TaskState::kExited;
  exited.exit_code = 3;
  exited.signal = 9;
  exited.updated = 999;
  ASSERT_TRUE(store_->UpsertTask(exited).ok());

  StatusOr<std::vector<TaskRecord>> tasks = store_->ListTasks(job.id);
  ASSERT_TRUE(tasks.ok()) << tasks.status().ToString();
  ASSERT_EQ(tasks->size(), 6u);
  std::vector<std::string> order;
  for (const TaskRecord& t : *tasks) {
    order.push_back(std::to_string(t.attempt) + (t.role == TaskRole::kTrainer ? "T" : "P") +
                    std::to_string(t.index));
  }
  EXPECT_THAT(order, ElementsAre("2T0", "2T1", "2P0", "1T0", "1T1", "1P0"));
  const TaskRecord& updated = (*tasks)[4];
  EXPECT_EQ(updated.state, TaskState::kExited);
  EXPECT_EQ(updated.exit_code, 3);
  EXPECT_EQ(updated.signal, 9);
  EXPECT_EQ(updated.updated, 999);
  EXPECT_EQ(updated.agent_name, "h1");
  EXPECT_EQ((*tasks)[0].state, TaskState::kAssigned);
  EXPECT_FALSE((*tasks)[0].exit_code.has_value());
  EXPECT_FALSE((*tasks)[0].signal.has_value());

  TaskRecord orphan = task(1, TaskRole::kTrainer, 0);
  orphan.job_id = 77;
  EXPECT_EQ(store_->UpsertTask(orphan).code(), StatusCode::kNotFound);
}

TEST_F(SqliteStateStoreTest, AShardsGenerationIsKeptWithItsTask) {
  JobRecord job = MustCreate("lm");
  TaskRecord shard;
  shard.job_id = job.id;
  shard.attempt = 1;
  shard.role = TaskRole::kPs;
  shard.agent_name = "a";
  ASSERT_TRUE(store_->UpsertTask(shard).ok());
  EXPECT_EQ(store_->ListTasks(job.id)->at(0).generation, 1);
  shard.generation = 3;  // started again alone twice: the same row
  ASSERT_TRUE(store_->UpsertTask(shard).ok());
  StatusOr<std::vector<TaskRecord>> tasks = store_->ListTasks(job.id);
  ASSERT_TRUE(tasks.ok()) << tasks.status().ToString();
  ASSERT_EQ(tasks->size(), 1u);
  EXPECT_EQ(tasks->at(0).generation, 3);
}

// ---- Plans ----

TEST_F(SqliteStateStoreTest, ApplyChangesWritesEverythingInOrderAndReturnsTheJobs) {
  JobRecord running = MustCreate("running");
  JobRecord queued = MustCreate("queued");
  ASSERT_TRUE(store_->StartAttempt(running.id, {}, "", 10).ok());
  TaskRecord t;
  t.job_id = running.id;
  t.attempt = 1;
  t.agent_name = "a";
  t.state = TaskState::kExited;
  t.exit_code = 0;
  StateChanges changes;
  changes.tasks = {t};
  changes.events = {{running.id, "task", "trainer/0 exited", 20}};
  changes.transitions = {{running.id, JobState::kRunning, ""},
                         {running.id, JobState::kSucceeded, "done"}};
  TaskRecord rank0;
  rank0.agent_name = "b";
  changes.attempts = {{queued.id, {rank0}, "trainers on b"}};
  StatusOr<std::vector<JobRecord>> jobs = store_->ApplyChanges(changes, 30);
  ASSERT_TRUE(jobs.ok()) << jobs.status().ToString();
  ASSERT_EQ(jobs->size(), 3u);
  EXPECT_EQ((*jobs)[0].state, JobState::kRunning);
  EXPECT_EQ((*jobs)[1].state, JobState::kSucceeded);
  EXPECT_EQ((*jobs)[2].state, JobState::kPlacing);
  EXPECT_EQ((*jobs)[2].attempt, 1);
  StatusOr<std::vector<TaskRecord>> tasks = store_->ListTasks(queued.id);
  ASSERT_TRUE(tasks.ok());
  ASSERT_EQ(tasks->size(), 1u);
  EXPECT_EQ((*tasks)[0].agent_name, "b");
  EXPECT_EQ((*tasks)[0].attempt, 1);
  EXPECT_EQ((*tasks)[0].updated, 30);
  std::vector<EventRecord> events = Events(running.id);
  ASSERT_GE(events.size(), 3u);
  EXPECT_EQ(events.back().message, "RUNNING -> SUCCEEDED: done");
}

TEST_F(SqliteStateStoreTest, ApplyChangesWithOneRefusedChangeWritesNothing) {
  JobRecord a = MustCreate("a");
  JobRecord b = MustCreate("b");
  const size_t events_before = Events(0).size();
  StateChanges changes;
  changes.events = {{a.id, "note", "should not stay", 5}};
  changes.attempts = {{a.id, {}, ""}};
  // b is PENDING: it cannot succeed.
  changes.transitions = {{b.id, JobState::kSucceeded, ""}};
  StatusOr<std::vector<JobRecord>> jobs = store_->ApplyChanges(changes, 5);
  EXPECT_EQ(jobs.status().code(), StatusCode::kFailedPrecondition) << jobs.status().ToString();
  EXPECT_EQ(store_->GetJob(a.id)->state, JobState::kPending);
  EXPECT_EQ(store_->GetJob(a.id)->attempt, 0);
  EXPECT_EQ(Events(0).size(), events_before);
}

TEST_F(SqliteStateStoreTest, ConcurrentWritesAreAllCommittedAndReadsSeeThem) {
  // Many writers at once are group-committed: each is committed when its
  // call returns, and a read after it (on another connection) sees it.
  std::vector<std::thread> writers;
  std::atomic<int> failures{0};
  for (int w = 0; w < 8; ++w) {
    writers.emplace_back([&, w] {
      for (int i = 0; i < 25; ++i) {
        StatusOr<JobRecord> job = [&] {
          NewJob j;
          j.name = "w" + std::to_string(w);
          j.job_text = "x";
          return store_->CreateJob(j, 1);
        }();
        if (!job.ok() || !store_->GetJob(job->id).ok()) ++failures;
      }
    });
  }
  for (auto& t : writers) t.join();
  EXPECT_EQ(failures.load(), 0);
  EXPECT_EQ(store_->ListJobs({})->size(), 200u);
  // And they are on disk: a fresh connection sees every one.
  RawDb raw(path_);
  EXPECT_EQ(raw.Query("SELECT COUNT(*) FROM jobs"), "200");
  EXPECT_EQ(raw.Query("SELECT COUNT(*) FROM events WHERE kind = 'submitted'"), "200");
}

TEST_F(SqliteStateStoreTest, TheCheckpointThreadCopiesTheLogIntoTheDatabase) {
  // Commits only append to the write-ahead log; the store's own thread
  // copies it into the database file.
  store_ = nullptr;
  SqliteStateStoreOptions options;
  options.path = path_;
  options.checkpoint_interval_ms = 10;
  store_ = std::move(OpenSqliteStateStore(options)).value();
  const auto size = [&] { return std::filesystem::file_size(path_); };
  const uintmax_t before = size();
  NewJob job;
  job.name = "big";
  job.job_text = std::string(4096, 'x');  // 200 of them need new pages
  for (int i = 0; i < 200; ++i) ASSERT_TRUE(store_->CreateJob(job, i).ok());
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  // A checkpoint may copy the log in more than one go: wait for all of it.
  while (size() <= before + 200 * 4096 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::yield();
  }
  EXPECT_GT(size(), before + 200 * 4096);
  EXPECT_EQ(store_->ListJobs({})->size(), 200u);
}

TEST_F(SqliteStateStoreTest, PlansPutGetReplace) {
  JobRecord job = MustCreate("lm");
  StatusOr<std::optional<std::string>> missing = store_->GetPlan(job.id, 1);
  ASSERT_TRUE(missing.ok()) << missing.status().ToString();
  EXPECT_FALSE(missing->has_value());

  ASSERT_TRUE(store_->PutPlan(job.id, 1, "{\"v\":1}", 10).ok());
  ASSERT_TRUE(store_->PutPlan(job.id, 2, "{\"v\":2}", 20).ok());
  ASSERT_TRUE(store_->PutPlan(job.id, 1, "{\"v\":3}", 30).ok());
  EXPECT_EQ(store_->GetPlan(job.id, 1)->value_or(""), "{\"v\":3}");
  EXPECT_EQ(store_->GetPlan(job.id, 2)->value_or(""), "{\"v\":2}");
  EXPECT_FALSE(store_->GetPlan(job.id, 3)->has_value());
  EXPECT_EQ(store_->PutPlan(55, 1, "{}", 1).code(), StatusCode::kNotFound);
}

// ---- Key-value ----

TEST_F(SqliteStateStoreTest, KvSetGetKeepsBytes) {
  const std::string binary("a\0b\xff", 4);
  ASSERT_TRUE(store_->KvSet("job/1/1/comm/0", binary, 1).ok());
  ASSERT_TRUE(store_->KvSet("empty", "", 1).ok());
  StatusOr<std::optional<std::string>> value = store_->KvGet("job/1/1/comm/0");
  ASSERT_TRUE(value.ok()) << value.status().ToString();
  ASSERT_TRUE(value->has_value());
  EXPECT_EQ(**value, binary);
  StatusOr<std::optional<std::string>> empty = store_->KvGet("empty");
  ASSERT_TRUE(empty.ok());
  ASSERT_TRUE(empty->has_value());
  EXPECT_EQ(**empty, "");
  EXPECT_FALSE(store_->KvGet("absent")->has_value());

  ASSERT_TRUE(store_->KvSet("job/1/1/comm/0", "new", 2).ok());
  EXPECT_EQ(store_->KvGet("job/1/1/comm/0")->value_or(""), "new");
}

TEST_F(SqliteStateStoreTest, NewAttemptAndJobEndDropOnlyThatJobsKeys) {
  JobRecord job = MustCreate("lm");
  JobRecord other = MustCreate("other");
  const std::string mine = "job/" + std::to_string(job.id) + "/";
  // A job whose id starts with this job's digits, and keys outside any job.
  const std::string longer = "job/" + std::to_string(job.id) + "0/1/comm/0";
  const std::string theirs = "job/" + std::to_string(other.id) + "/1/comm/0";
  auto set = [&](const std::string& key) { ASSERT_TRUE(store_->KvSet(key, "v", 1).ok()) << key; };
  auto has = [&](const std::string& key) { return store_->KvGet(key)->has_value(); };
  set(longer);
  set(theirs);
  set("job/x");
  set("global");
  set(mine + "search");  // the coordinator's per-job state (partition search)

  ASSERT_TRUE(store_->TransitionJob(job.id, JobState::kPlacing, "", 2).ok());
  set(mine + "1/comm/0");
  set(mine + "1/ps/0");
  ASSERT_TRUE(store_->TransitionJob(job.id, JobState::kRunning, "", 3).ok());
  EXPECT_TRUE(has(mine + "1/comm/0"));  // running keeps its attempt's keys
  ASSERT_TRUE(store_->TransitionJob(job.id, JobState::kPending, "rank 1 lost", 4).ok());
  EXPECT_TRUE(has(mine + "1/ps/0"));
  set(mine + "2/search");  // published for attempt 2 before it is placed
  ASSERT_TRUE(store_->StartAttempt(job.id, {}, "", 5).ok());  // the orchestrator's way
  EXPECT_FALSE(has(mine + "1/comm/0"));  // attempt 2 starts with none of attempt 1's
  EXPECT_FALSE(has(mine + "1/ps/0"));
  EXPECT_TRUE(has(mine + "2/search"));
  EXPECT_TRUE(has(mine + "search"));
  set(mine + "2/comm/0");
  ASSERT_TRUE(store_->TransitionJob(job.id, JobState::kRunning, "", 6).ok());
  // Attempt 12 drops attempts 2..11, not 12's own (numbers, not strings).
  ASSERT_TRUE(store_->TransitionJob(job.id, JobState::kPending, "again", 7).ok());
  set(mine + "12/search");
  for (int a = 3; a <= 11; ++a) {
    ASSERT_TRUE(store_->StartAttempt(job.id, {}, "", 8).ok());
    ASSERT_TRUE(store_->TransitionJob(job.id, JobState::kRunning, "", 8).ok());
    ASSERT_TRUE(store_->TransitionJob(job.id, JobState::kPending, "again", 8).ok());
  }
  set(mine + "11/comm/0");
  ASSERT_TRUE(store_->StartAttempt(job.id, {}, "", 9).ok());
  EXPECT_EQ(store_->GetJob(job.id)->attempt, 12);
  EXPECT_FALSE(has(mine + "2/comm/0"));
  EXPECT_FALSE(has(mine + "11/comm/0"));
  EXPECT_TRUE(has(mine + "12/search"));
  ASSERT_TRUE(store_->TransitionJob(job.id, JobState::kRunning, "", 10).ok());
  ASSERT_TRUE(store_->TransitionJob(job.id, JobState::kSucceeded, "", 11).ok());
  EXPECT_EQ(*store_->KvCount(mine), 0);  // the job ended: nothing of it is left
  for (const std::string& key : {longer, theirs, std::string("job/x"), std::string("global")}) {
    EXPECT_TRUE(has(key)) << key;
  }
}

TEST_F(SqliteStateStoreTest, KvAddCountsAndRefusesNonIntegers) {
  StatusOr<int64_t> first = store_->KvAdd("counter", 5, 1);
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  EXPECT_EQ(*first, 5);
  EXPECT_EQ(*store_->KvAdd("counter", -7, 2), -2);
  EXPECT_EQ(store_->KvGet("counter")->value_or(""), "-2");

  ASSERT_TRUE(store_->KvSet("text", "12abc", 3).ok());
  StatusOr<int64_t> bad = store_->KvAdd("text", 1, 4);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(bad.status().message(), HasSubstr("\"text\""));
  EXPECT_EQ(store_->KvGet("text")->value_or(""), "12abc");

  ASSERT_TRUE(store_->KvSet("big", "9223372036854775807", 5).ok());
  EXPECT_EQ(store_->KvAdd("big", 1, 6).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(store_->KvGet("big")->value_or(""), "9223372036854775807");
}

TEST_F(SqliteStateStoreTest, ConcurrentKvAddsAreAtomic) {
  constexpr int kThreads = 4;
  constexpr int kAdds = 25;
  std::vector<std::thread> threads;
  std::atomic<int> failures{0};
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < kAdds; ++i) {
        if (!store_->KvAdd("job/1/1/barrier", 1, i).ok()) ++failures;
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  EXPECT_EQ(failures.load(), 0);
  EXPECT_EQ(store_->KvGet("job/1/1/barrier")->value_or(""), std::to_string(kThreads * kAdds));
}

// ---- Metrics ----

TEST_F(SqliteStateStoreTest, MetricsRaiseJobStepButNeverLowerIt) {
  JobRecord job = MustCreate("lm");
  auto point = [&](int rank, int64_t step) {
    MetricRecord m;
    m.job_id = job.id;
    m.attempt = 1;
    m.rank = rank;
    m.step = step;
    m.loss = 1.0 / static_cast<double>(step);
    m.throughput = 100.0 * rank;
    m.time = 1;  // replaced by `now`
    return m;
  };
  ASSERT_TRUE(store_->RecordMetrics({point(1, 20), point(0, 20), point(0, 10)}, 500).ok());
  EXPECT_EQ(store_->GetJob(job.id)->step, 20);
  ASSERT_TRUE(store_->RecordMetrics({point(1, 5)}, 600).ok());  // a late, older point
  EXPECT_EQ(store_->GetJob(job.id)->step, 20);
  ASSERT_TRUE(store_->RecordMetrics({}, 700).ok());

  StatusOr<std::vector<MetricRecord>> all = store_->ListMetrics(job.id, 0, 0);
  ASSERT_TRUE(all.ok()) << all.status().ToString();
  ASSERT_EQ(all->size(), 4u);
  std::vector<std::pair<int64_t, int>> order;
  for (const MetricRecord& m : *all) order.emplace_back(m.step, m.rank);
  EXPECT_THAT(order, ElementsAre(std::pair<int64_t, int>{5, 1}, std::pair<int64_t, int>{10, 0},
                                 std::pair<int64_t, int>{20, 0}, std::pair<int64_t, int>{20, 1}));
  EXPECT_EQ((*all)[0].time, 600);
  EXPECT_EQ((*all)[1].time, 500);
  EXPECT_DOUBLE_EQ((*all)[3].throughput, 100.0);
  EXPECT_DOUBLE_EQ((*all)[1].loss, 0.1);
  EXPECT_EQ((*all)[1].job_id, job.id);
  EXPECT_EQ((*all)[1].attempt, 1);

  StatusOr<std::vector<MetricRecord>> after = store_->ListMetrics(job.id, 10, 1);
  ASSERT_TRUE(after.ok());
  ASSERT_EQ(after->size(), 1u);
  EXPECT_EQ((*after)[0].step, 20);
  EXPECT_EQ((*after)[0].rank, 0);
}

TEST_F(SqliteStateStoreTest, MetricsForUnknownJobStoreNothing) {
  JobRecord job = MustCreate("lm");
  MetricRecord good;
  good.job_id = job.id;
  good.step = 50;
  MetricRecord bad = good;
  bad.job_id = job.id + 100;
  Status status = store_->RecordMetrics({good, bad}, 1);
  ASSERT_FALSE(status.ok());
  EXPECT_EQ(status.code(), StatusCode::kNotFound);
  EXPECT_THAT(status.message(), HasSubstr("\"" + std::to_string(bad.job_id) + "\""));
  EXPECT_TRUE(store_->ListMetrics(job.id, 0, 0)->empty());
  EXPECT_EQ(store_->GetJob(job.id)->step, 0);
}

// ---- Checkpoints ----

TEST_F(SqliteStateStoreTest, CheckpointsNewestFirstWithEvent) {
  JobRecord job = MustCreate("lm");
  auto checkpoint = [&](int attempt, int64_t step) {
    CheckpointRecord c;
    c.job_id = job.id;
    c.attempt = attempt;
    c.step = step;
    c.path = "/ckpt/" + std::to_string(step);
    c.manifest_sha256 = std::string(64, 'a');
    return c;
  };
  ASSERT_TRUE(store_->CommitCheckpoint(checkpoint(1, 500), 10).ok());
  ASSERT_TRUE(store_->CommitCheckpoint(checkpoint(2, 1500), 30).ok());
  ASSERT_TRUE(store_->CommitCheckpoint(checkpoint(1, 1000), 20).ok());

  StatusOr<std::vector<CheckpointRecord>> list = store_->ListCheckpoints(job.id);
  ASSERT_TRUE(list.ok()) << list.status().ToString();
  ASSERT_EQ(list->size(), 3u);
  EXPECT_EQ((*list)[0].step, 1500);
  EXPECT_EQ((*list)[0].attempt, 2);
  EXPECT_EQ((*list)[0].created, 30);
  EXPECT_EQ((*list)[0].path, "/ckpt/1500");
  EXPECT_EQ((*list)[0].manifest_sha256, std::string(64, 'a'));
  EXPECT_EQ((*list)[1].step, 1000);
  EXPECT_EQ((*list)[2].step, 500);

  std::vector<EventRecord> events = Events(job.id);
  ASSERT_EQ(events.size(), 4u);
  EXPECT_EQ(events[1].kind, "checkpoint");
  EXPECT_THAT(events[1].message, HasSubstr("500"));
  EXPECT_THAT(events[1].message, HasSubstr("/ckpt/500"));

  EXPECT_EQ(store_->CommitCheckpoint(checkpoint(1, 1), 1).code(), StatusCode::kOk);
  CheckpointRecord orphan = checkpoint(1, 1);
  orphan.job_id = 1234;
  EXPECT_EQ(store_->CommitCheckpoint(orphan, 1).code(), StatusCode::kNotFound);
}

// CoordinatorClient retries CommitCheckpoint when the reply is lost; the
// coordinator may already have applied the first call.
TEST_F(SqliteStateStoreTest, RecommittingTheSameCheckpointRecordsItOnce) {
  JobRecord job = MustCreate("lm");
  CheckpointRecord c;
  c.job_id = job.id;
  c.attempt = 1;
  c.step = 500;
  c.path = "/ckpt/500";
  c.manifest_sha256 = std::string(64, 'a');
  auto checkpoint_events = [&] {
    int n = 0;
    for (const EventRecord& e : Events(job.id)) n += e.kind == "checkpoint";
    return n;
  };
  ASSERT_TRUE(store_->CommitCheckpoint(c, 10).ok());
  Status again = store_->CommitCheckpoint(c, 20);
  EXPECT_TRUE(again.ok()) << again.ToString();
  EXPECT_EQ(checkpoint_events(), 1);
  RawDb raw(path_);
  EXPECT_EQ(raw.Query("SELECT COUNT(*) FROM checkpoints WHERE job_id = " + std::to_string(job.id)),
            "1");
  StatusOr<std::vector<CheckpointRecord>> list = store_->ListCheckpoints(job.id);
  ASSERT_TRUE(list.ok()) << list.status().ToString();
  ASSERT_EQ(list->size(), 1u);
  EXPECT_EQ((*list)[0].created, 10);  // the first commit's

  // A different step is another checkpoint; another manifest for the same
  // step a rewrite of it: both are recorded.
  CheckpointRecord next = c;
  next.step = 1000;
  next.path = "/ckpt/1000";
  ASSERT_TRUE(store_->CommitCheckpoint(next, 30).ok());
  EXPECT_EQ(checkpoint_events(), 2);
  CheckpointRecord rewritten = next;
  rewritten.manifest_sha256 = std::string(64, 'b');
  ASSERT_TRUE(store_->CommitCheckpoint(rewritten, 40).ok());
  EXPECT_EQ(checkpoint_events(), 3);
  EXPECT_EQ(raw.Query("SELECT COUNT(*) FROM checkpoints WHERE job_id = " + std::to_string(job.id)),
            "2");
  EXPECT_EQ(raw.Query("SELECT manifest_sha256 FROM checkpoints WHERE step = 1000"),
            std::string(64, 'b'));
}

// ---- Durability and atomicity ----

TEST_F(SqliteStateStoreTest, DataSurvivesReopen) {
  JobRecord job = MustCreate("lm", 1000);
  ASSERT_TRUE(store_->TransitionJob(job.id, JobState::kPlacing, "", 2000).ok());
  ASSERT_TRUE(store_->UpsertAgent(Agent("h1"), 3000).ok());
  ASSERT_TRUE(store_->KvSet("k", "v", 4000).ok());
  ASSERT_TRUE(store_->PutPlan(job.id, 1, "{}", 5000).ok());
  store_.reset();

  store_ = MustOpen();
  ASSERT_NE(store_, nullptr);
  StatusOr<JobRecord> got = store_->GetJob(job.id);
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_EQ(got->state, JobState::kPlacing);
  EXPECT_EQ(got->attempt, 1);
  EXPECT_EQ(store_->ListAgents()->size(), 1u);
  EXPECT_EQ(store_->KvGet("k")->value_or(""), "v");
  EXPECT_EQ(store_->GetPlan(job.id, 1)->value_or(""), "{}");
  EXPECT_EQ(Events(0).size(), 3u);
  // New ids continue after the old ones.
  EXPECT_GT(MustCreate("next").id, job.id);
}

TEST_F(SqliteStateStoreTest, DatabaseIsInWalModeAtLatestSchema) {
  RawDb raw(path_);
  EXPECT_EQ(raw.Query("PRAGMA journal_mode"), "wal");
  EXPECT_EQ(raw.Query("PRAGMA user_version"), std::to_string(LatestSchemaVersion()));
  EXPECT_EQ(raw.Query("PRAGMA foreign_key_check"), "<none>");
}

TEST_F(SqliteStateStoreTest, FailedWriteLeavesNothingBehind) {
  JobRecord existing = MustCreate("existing");
  {
    RawDb raw(path_);
    ASSERT_EQ(raw.Exec("CREATE TRIGGER fail_events BEFORE INSERT ON events "
                       "BEGIN SELECT RAISE(ABORT, 'injected'); END;"),
              "");
  }
  StatusOr<JobRecord> job = store_->CreateJob(NewJob{"doomed", 1, "", "", ""}, 1);
  ASSERT_FALSE(job.ok());
  EXPECT_THAT(job.status().message(), HasSubstr("injected"));
  StatusOr<JobRecord> moved = store_->TransitionJob(existing.id, JobState::kCancelled, "x", 2);
  ASSERT_FALSE(moved.ok());

  {
    RawDb raw(path_);
    EXPECT_EQ(raw.Query("SELECT count(*) FROM jobs"), "1");
    EXPECT_EQ(raw.Query("SELECT state FROM jobs"), "PENDING");
    EXPECT_EQ(raw.Exec("DROP TRIGGER fail_events"), "");
  }
  StatusOr<JobRecord> retried = store_->CreateJob(NewJob{"retried", 1, "", "", ""}, 3);
  ASSERT_TRUE(retried.ok()) << retried.status().ToString();
  EXPECT_EQ(retried->id, existing.id + 1);  // the failed insert used up no id
  EXPECT_EQ(Events(retried->id).size(), 1u);
  EXPECT_EQ(store_->GetJob(existing.id)->state, JobState::kPending);
}

TEST_F(SqliteStateStoreTest, LockedDatabaseIsUnavailable) {
  store_ = MustOpen(0, /*busy_timeout_ms=*/100);
  ASSERT_NE(store_, nullptr);
  JobRecord job = MustCreate("lm");
  RawDb raw(path_);
  ASSERT_EQ(raw.Exec("BEGIN EXCLUSIVE"), "");

  const auto start = std::chrono::steady_clock::now();
  StatusOr<JobRecord> blocked = store_->CreateJob(NewJob{"blocked", 1, "", "", ""}, 1);
  const auto waited = std::chrono::steady_clock::now() - start;
  ASSERT_FALSE(blocked.ok());
  EXPECT_EQ(blocked.status().code(), StatusCode::kUnavailable);
  EXPECT_THAT(blocked.status().message(), HasSubstr("locked"));
  EXPECT_THAT(blocked.status().message(), HasSubstr(path_));
  EXPECT_LT(waited, std::chrono::seconds(3));
  EXPECT_EQ(store_->KvSet("k", "v", 1).code(), StatusCode::kUnavailable);
  // Readers do not wait for the writer in WAL mode.
  EXPECT_TRUE(store_->GetJob(job.id).ok());

  ASSERT_EQ(raw.Exec("ROLLBACK"), "");
  EXPECT_TRUE(store_->CreateJob(NewJob{"free", 1, "", "", ""}, 2).ok());
  EXPECT_EQ(store_->ListJobs({})->size(), 2u);
}

// ---- Opening ----

TEST_F(SqliteStateStoreTest, RefusesFileThatIsNotADatabase) {
  const std::string path = dir_.File("notes.txt");
  const std::string garbage(4096, 'x');
  { std::ofstream(path) << garbage; }
  SqliteStateStoreOptions options;
  options.path = path;
  StatusOr<std::unique_ptr<StateStore>> store = OpenSqliteStateStore(options);
  ASSERT_FALSE(store.ok());
  EXPECT_THAT(store.status().message(), HasSubstr("'" + path + "'"));
  EXPECT_THAT(store.status().message(), HasSubstr("not a Parallax state database"));
  std::ifstream in(path);
  std::string content((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_EQ(content, garbage);
}

TEST_F(SqliteStateStoreTest, RefusesForeignDatabase) {
  const std::string path = dir_.File("other.db");
  {
    RawDb raw(path);
    ASSERT_EQ(raw.Exec("CREATE TABLE users (id INTEGER); INSERT INTO users VALUES (1)"), "");
  }
  SqliteStateStoreOptions options;
  options.path = path;
  StatusOr<std::unique_ptr<StateStore>> store = OpenSqliteStateStore(options);
  ASSERT_FALSE(store.ok());
  EXPECT_EQ(store.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_THAT(store.status().message(), HasSubstr("not a Parallax state database"));
  EXPECT_THAT(store.status().message(), HasSubstr("'users'"));
  RawDb raw(path);
  EXPECT_EQ(raw.Query("SELECT count(*) FROM sqlite_master"), "1");
  EXPECT_EQ(raw.Query("PRAGMA journal_mode"), "delete");
  EXPECT_EQ(raw.Query("PRAGMA user_version"), "0");
}

TEST_F(SqliteStateStoreTest, RefusesDatabaseFromNewerParallax) {
  store_.reset();
  {
    RawDb raw(path_);
    ASSERT_EQ(raw.Exec("PRAGMA user_version = 99"), "");
  }
  StatusOr<std::unique_ptr<StateStore>> store = Open();
  ASSERT_FALSE(store.ok());
  EXPECT_EQ(store.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_THAT(store.status().message(), HasSubstr("'" + path_ + "'"));
  EXPECT_THAT(store.status().message(),
              HasSubstr("(schema 99 > " + std::to_string(LatestSchemaVersion()) + ")"));
  EXPECT_THAT(store.status().message(), HasSubstr("upgrade parallax-coordinator"));
  RawDb raw(path_);
  EXPECT_EQ(raw.Query("PRAGMA user_version"), "99");
}

TEST_F(SqliteStateStoreTest, MissingDirectoryIsUnavailableNamingPath) {
  SqliteStateStoreOptions options;
  options.path = dir_.File("no/such/dir/state.db");
  StatusOr<std::unique_ptr<StateStore>> store = OpenSqliteStateStore(options);
  ASSERT_FALSE(store.ok());
  EXPECT_EQ(store.status().code(), StatusCode::kUnavailable);
  EXPECT_THAT(store.status().message(), HasSubstr(options.path));

  options.path = "";
  EXPECT_EQ(OpenSqliteStateStore(options).status().code(), StatusCode::kInvalidArgument);
}

TEST_F(SqliteStateStoreTest, InMemoryDatabaseWorks) {
  SqliteStateStoreOptions options;
  options.path = ":memory:";
  StatusOr<std::unique_ptr<StateStore>> store = OpenSqliteStateStore(options);
  ASSERT_TRUE(store.ok()) << store.status().ToString();
  StatusOr<JobRecord> job = (*store)->CreateJob(NewJob{"mem", 1, "", "", ""}, 1);
  ASSERT_TRUE(job.ok()) << job.status().ToString();
  EXPECT_EQ((*store)->GetJob(job->id)->name, "mem");
}

TEST_F(SqliteStateStoreTest, MigratesVersionOneDatabaseKeepingData) {
  store_.reset();
  const std::string path = dir_.File("old.db");
  SqliteStateStoreOptions options;
  options.path = path;
  options.max_schema_version = 1;
  int64_t job_id = 0;
  {
    StatusOr<std::unique_ptr<StateStore>> old = OpenSqliteStateStore(options);
    ASSERT_TRUE(old.ok()) << old.status().ToString();
    StatusOr<JobRecord> job = (*old)->CreateJob(NewJob{"old", 3, "text", "", "bob"}, 100);
    ASSERT_TRUE(job.ok()) << job.status().ToString();
    job_id = job->id;
  }
  {
    RawDb raw(path);
    EXPECT_EQ(raw.Query("PRAGMA user_version"), "1");
    EXPECT_EQ(raw.Query("SELECT count(*) FROM sqlite_master WHERE name = 'plans'"), "0");
    // A version-1 agent row has no draining column yet.
    ASSERT_EQ(raw.Exec("INSERT INTO agents (name, address, slots, gpus, hostname, version, "
                       "registered, last_seen) VALUES ('h1', 'h1:7000', 4, 0, 'h1', '0.0.9', "
                       "10, 20)"),
              "");
  }

  options.max_schema_version = 0;
  StatusOr<std::unique_ptr<StateStore>> store = OpenSqliteStateStore(options);
  ASSERT_TRUE(store.ok()) << store.status().ToString();
  {
    RawDb raw(path);
    EXPECT_EQ(raw.Query("PRAGMA user_version"), std::to_string(LatestSchemaVersion()));
  }
  StatusOr<JobRecord> job = (*store)->GetJob(job_id);
  ASSERT_TRUE(job.ok()) << job.status().ToString();
  EXPECT_EQ(job->name, "old");
  EXPECT_EQ(job->workers, 3);
  EXPECT_EQ(job->submitted_by, "bob");
  StatusOr<std::vector<AgentRecord>> agents = (*store)->ListAgents();
  ASSERT_TRUE(agents.ok()) << agents.status().ToString();
  ASSERT_EQ(agents->size(), 1u);
  EXPECT_EQ((*agents)[0].name, "h1");
  EXPECT_EQ((*agents)[0].registered, 10);
  EXPECT_FALSE((*agents)[0].draining);
  EXPECT_FALSE((*agents)[0].ps_host);  // registered before roles: a worker

  ASSERT_TRUE((*store)->PutPlan(job_id, 1, "{\"p\":1}", 200).ok());
  EXPECT_EQ((*store)->GetPlan(job_id, 1)->value_or(""), "{\"p\":1}");
  CheckpointRecord checkpoint;
  checkpoint.job_id = job_id;
  checkpoint.attempt = 1;
  checkpoint.step = 10;
  checkpoint.path = "/ckpt/10";
  ASSERT_TRUE((*store)->CommitCheckpoint(checkpoint, 300).ok());
  EXPECT_EQ((*store)->ListCheckpoints(job_id)->size(), 1u);
  AgentRecord drained = (*agents)[0];
  drained.draining = true;
  ASSERT_TRUE((*store)->UpsertAgent(drained, 400).ok());
  EXPECT_TRUE((*(*store)->ListAgents())[0].draining);
}

TEST(SqliteMigrationsTest, EmbeddedSchemaParses) {
  StatusOr<std::vector<SqlMigration>> migrations = ParseMigrations(kStateSql);
  ASSERT_TRUE(migrations.ok()) << migrations.status().ToString();
  ASSERT_GE(migrations->size(), 2u);
  EXPECT_EQ(static_cast<int>(migrations->size()), LatestSchemaVersion());
  for (size_t i = 0; i < migrations->size(); ++i) {
    EXPECT_EQ((*migrations)[i].version, static_cast<int>(i) + 1);
  }
  EXPECT_THAT((*migrations)[0].sql, HasSubstr("CREATE TABLE jobs"));
  EXPECT_THAT((*migrations)[1].sql, HasSubstr("draining"));
}

TEST(SqliteMigrationsTest, RejectsGapsDuplicatesAndEmptySections) {
  EXPECT_TRUE(ParseMigrations("-- header\n-- migrate: 1\nCREATE TABLE a (x);\n").ok());
  EXPECT_FALSE(ParseMigrations("-- migrate: 2\nCREATE TABLE a (x);\n").ok());
  EXPECT_FALSE(
      ParseMigrations("-- migrate: 1\nCREATE TABLE a (x);\n-- migrate: 1\nCREATE TABLE b (x);\n")
          .ok());
  EXPECT_FALSE(ParseMigrations("-- migrate: 1\n-- only a comment\n").ok());
  EXPECT_FALSE(ParseMigrations("-- migrate: one\nCREATE TABLE a (x);\n").ok());
  EXPECT_FALSE(ParseMigrations("CREATE TABLE a (x);\n").ok());
}

// ---- FaultInjectionStateStore ----

class FaultInjectionStateStoreTest : public SqliteStateStoreTest {
 protected:
  void SetUp() override {
    SqliteStateStoreTest::SetUp();
    faulty_ = std::make_unique<FaultInjectionStateStore>(store_.get());
  }
  std::unique_ptr<FaultInjectionStateStore> faulty_;
};

TEST_F(FaultInjectionStateStoreTest, FailsOnlyTheNthWriteWithoutForwardingIt) {
  faulty_->FailNthWrite(2);
  StatusOr<JobRecord> first = faulty_->CreateJob(NewJob{"first", 1, "", "", ""}, 1);
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  // Reads are neither counted nor failed.
  EXPECT_TRUE(faulty_->GetJob(first->id).ok());
  EXPECT_TRUE(faulty_->ListJobs({}).ok());

  Status second = faulty_->KvSet("k", "v", 2);
  EXPECT_EQ(second.code(), StatusCode::kUnavailable);
  EXPECT_EQ(second.message(), "injected fault");
  EXPECT_FALSE(store_->KvGet("k")->has_value());  // not forwarded

  StatusOr<JobRecord> third = faulty_->TransitionJob(first->id, JobState::kPlacing, "", 3);
  ASSERT_TRUE(third.ok()) << third.status().ToString();
  EXPECT_EQ(faulty_->writes_seen(), 3);
  EXPECT_EQ(faulty_->writes_failed(), 1);
  EXPECT_EQ(store_->GetJob(first->id)->state, JobState::kPlacing);
}

TEST_F(FaultInjectionStateStoreTest, FailAllWritesFailsEveryKindOfWrite) {
  JobRecord job = MustCreate("lm");
  faulty_->FailAllWrites(true);
  const std::vector<EventRecord> events_before = Events(0);
  EXPECT_EQ(faulty_->CreateJob(NewJob{"x", 1, "", "", ""}, 1).status().code(),
            StatusCode::kUnavailable);
  EXPECT_FALSE(faulty_->TransitionJob(job.id, JobState::kCancelled, "", 1).ok());
  EXPECT_FALSE(faulty_->AppendEvent(job.id, "note", "x", 1).ok());
  EXPECT_FALSE(faulty_->UpsertAgent(Agent("h1"), 1).ok());
  EXPECT_FALSE(faulty_->TouchAgents({{"h1", 1}}).ok());
  TaskRecord task;
  task.job_id = job.id;
  EXPECT_FALSE(faulty_->UpsertTask(task).ok());
  EXPECT_FALSE(faulty_->PutPlan(job.id, 1, "{}", 1).ok());
  EXPECT_FALSE(faulty_->KvSet("k", "v", 1).ok());
  EXPECT_FALSE(faulty_->KvAdd("n", 1, 1).ok());
  MetricRecord point;
  point.job_id = job.id;
  point.step = 9;
  EXPECT_FALSE(faulty_->RecordMetrics({point}, 1).ok());
  CheckpointRecord checkpoint;
  checkpoint.job_id = job.id;
  checkpoint.path = "/c";
  EXPECT_FALSE(faulty_->CommitCheckpoint(checkpoint, 1).ok());
  EXPECT_EQ(faulty_->writes_seen(), 11);
  EXPECT_EQ(faulty_->writes_failed(), 11);

  // Nothing reached the real store.
  EXPECT_EQ(store_->ListJobs({})->size(), 1u);
  EXPECT_EQ(Events(0).size(), events_before.size());
  EXPECT_TRUE(store_->ListAgents()->empty());
  EXPECT_TRUE(store_->ListTasks(job.id)->empty());
  EXPECT_FALSE(store_->GetPlan(job.id, 1)->has_value());
  EXPECT_FALSE(store_->KvGet("n")->has_value());
  EXPECT_EQ(store_->GetJob(job.id)->step, 0);
  EXPECT_TRUE(store_->ListCheckpoints(job.id)->empty());

  faulty_->FailAllWrites(false);
  EXPECT_TRUE(faulty_->KvSet("k", "v", 1).ok());
  EXPECT_EQ(store_->KvGet("k")->value_or(""), "v");
}

}  // namespace
}  // namespace parallax::coordinator
