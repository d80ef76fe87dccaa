#include "agent/agent.h"

#include <gtest/gtest.h>
#include <signal.h>

#include <filesystem>
#include <fstream>
#include <thread>

#include "agent/task_env.h"
#include "agent/task_log.h"
#include "tests/agent/fake_launcher.h"
#include "tests/agent/fake_link.h"
#include "tests/agent/test_util.h"
#include "tests/testing/temp_dir.h"

namespace parallax::agent {
namespace {

using testing::Assignment;
using testing::FakeCoordinatorLink;
using testing::FakeLauncher;
using testing::Key;
using testing::ReadAll;
using testing::Start;
using testing::StopTasks;

class AgentTest : public ::testing::Test {
 protected:
  AgentOptions Options() {
    AgentOptions o;
    o.name = "a1";
    o.workdir = dir_.File("work");
    o.address = "127.0.0.1:9999";
    o.slots = 4;
    o.bin_dir = "/opt/px/bin";
    o.coordinator = "127.0.0.1:7070";
    o.bind_addr = "127.0.0.1";
    o.grace_ms = 5'000;
    return o;
  }

  std::unique_ptr<Agent> NewAgent(AgentOptions o) {
    auto agent = std::make_unique<Agent>(std::move(o), &link_, &launcher_, &clock_);
    Status s = agent->Init();
    EXPECT_TRUE(s.ok()) << s.ToString();
    return agent;
  }

  std::vector<rpc::TaskReport> ReportsFor(const rpc::TaskKey& key) {
    std::vector<rpc::TaskReport> out;
    for (const auto& r : link_.reports()) {
      if (r.key == key) out.push_back(r);
    }
    return out;
  }

  parallax::testing::TempDir dir_;
  FakeCoordinatorLink link_;
  FakeLauncher launcher_;
  FakeClock clock_;
};

TEST_F(AgentTest, RegistersItsSlotsAndAddress) {
  auto agent = NewAgent(Options());
  agent->set_address("10.1.1.1:4242");
  ASSERT_TRUE(agent->Register().ok());
  ASSERT_EQ(link_.registrations().size(), 1u);
  EXPECT_EQ(link_.registrations()[0].name, "a1");
  EXPECT_EQ(link_.registrations()[0].address, "10.1.1.1:4242");
  EXPECT_EQ(link_.registrations()[0].slots, 4);
}

TEST_F(AgentTest, StartsAnAssignmentAndReportsRunning) {
  auto agent = NewAgent(Options());
  rpc::TaskKey key = Key(7, 1, 0);
  agent->HandlePoll(Start({Assignment(key)}));
  ASSERT_EQ(launcher_.launches().size(), 1u);
  LaunchSpec spec = launcher_.launches()[0];
  std::string dir = agent->TaskDir(key);
  EXPECT_EQ(dir, std::filesystem::absolute(dir_.File("work")).string() + "/tasks/7-1-trainer-0");
  EXPECT_EQ(spec.argv, std::vector<std::string>{"/opt/px/bin/parallax-trainer"});
  EXPECT_EQ(spec.cwd, dir);
  EXPECT_EQ(spec.log_path, dir + "/task.log");
  EXPECT_EQ(ReadAll(dir + "/job.toml"), "name = \"test\"\n");
  EXPECT_NE(std::find(spec.env.begin(), spec.env.end(), "PARALLAX_JOB_FILE=" + dir + "/job.toml"),
            spec.env.end());
  EXPECT_EQ(ReadAll(dir + "/pid"), std::to_string(launcher_.last_pid()) + " " +
                                       std::to_string(1000 + launcher_.last_pid()) + "\n");
  auto reports = ReportsFor(key);
  ASSERT_EQ(reports.size(), 1u);
  EXPECT_EQ(reports[0].state, rpc::TaskState::RUNNING);
  EXPECT_EQ(agent->RunningTasks(), std::vector<rpc::TaskKey>{key});
  EXPECT_EQ(agent->MakePollRequest().running, std::vector<rpc::TaskKey>{key});
}

TEST_F(AgentTest, AJobEnvironmentOutsideTheAllowListEndsTheTaskUnrun) {
  auto agent = NewAgent(Options());
  rpc::TaskKey key = Key(7, 1, 0);
  agent->HandlePoll(Start({Assignment(
      key, {}, {{"OMP_NUM_THREADS", "2"}, {"LD_PRELOAD", "/tmp/evil.so"}, {"BASH_ENV", "/x"}})}));
  EXPECT_TRUE(launcher_.launches().empty());  // nothing executed
  std::vector<rpc::TaskReport> reports = ReportsFor(key);
  ASSERT_EQ(reports.size(), 1u);
  EXPECT_EQ(reports[0].state, rpc::TaskState::EXITED);
  EXPECT_EQ(reports[0].exit_code, 126);
  EXPECT_NE(reports[0].message.find("sets BASH_ENV, LD_PRELOAD"), std::string::npos)
      << reports[0].message;
  EXPECT_NE(reports[0].message.find("--allow-env BASH_ENV --allow-env LD_PRELOAD"),
            std::string::npos);
  EXPECT_NE(ReadAll(agent->TaskDir(key) + "/task.log").find("refused to start"),
            std::string::npos);
  EXPECT_TRUE(agent->RunningTasks().empty());
}

TEST_F(AgentTest, ATrainerWhoseCheckpointDirIsMissingOnThisHostEndsUnrun) {
  auto job = [](const std::string& checkpoint_dir) {
    return "[job]\nname = \"t\"\nworkers = 1\narch = \"allreduce\"\n[trainer]\nmodel = "
           "\"mlp\"\nsteps = 5\nbatch_size = 8\ncheckpoint_every = 2\ncheckpoint_dir = \"" +
           checkpoint_dir +
           "\"\n[model]\nfeatures = 8\nclasses = 4\nhidden = [16]\n"
           "[optimizer.dense]\ntype = \"sgd\"\nlr = 0.1\n";
  };
  AgentOptions o = Options();
  o.hostname = "host-b";
  auto agent = NewAgent(o);
  rpc::TaskKey missing = Key(7, 1, 0);
  rpc::TaskAssignment a = Assignment(missing);
  a.job_text = job("/nonexistent-px-share/ckpt");
  agent->HandlePoll(Start({a}));
  EXPECT_TRUE(launcher_.launches().empty());
  std::vector<rpc::TaskReport> reports = ReportsFor(missing);
  ASSERT_EQ(reports.size(), 1u);
  EXPECT_EQ(reports[0].state, rpc::TaskState::EXITED);
  EXPECT_EQ(reports[0].exit_code, 126);
  EXPECT_NE(reports[0].message.find("agent 'a1' (host host-b): paths the job names are missing"),
            std::string::npos)
      << reports[0].message;
  EXPECT_NE(reports[0].message.find("/jobs/test/job.toml:"), std::string::npos);
  EXPECT_NE(reports[0].message.find("'/nonexistent-px-share' does not exist"), std::string::npos)
      << reports[0].message;
  // The same job with the directory present here runs.
  rpc::TaskKey present = Key(8, 1, 0);
  a = Assignment(present);
  a.job_text = job(dir_.File("ckpt"));
  agent->HandlePoll(Start({a}));
  EXPECT_EQ(launcher_.launches().size(), 1u);
}

TEST_F(AgentTest, NamesAllowedByTheOperatorReachTheTask) {
  AgentOptions o = Options();
  o.allow_env = {"PX_TEST_*", "LD_PRELOAD"};
  auto agent = NewAgent(o);
  agent->HandlePoll(Start({Assignment(
      Key(7, 1, 0), {}, {{"PX_TEST_MODE", "x"}, {"LD_PRELOAD", "/opt/ok.so"}, {"LANG", "C"}})}));
  ASSERT_EQ(launcher_.launches().size(), 1u);
  const std::vector<std::string> env = launcher_.launches()[0].env;
  for (const char* entry : {"PX_TEST_MODE=x", "LD_PRELOAD=/opt/ok.so", "LANG=C"}) {
    EXPECT_NE(std::find(env.begin(), env.end(), entry), env.end()) << entry;
  }
}

TEST_F(AgentTest, StartIsIdempotent) {
  auto agent = NewAgent(Options());
  rpc::TaskKey key = Key(7, 1, 0);
  agent->HandlePoll(Start({Assignment(key)}));
  agent->HandlePoll(Start({Assignment(key)}));
  EXPECT_EQ(launcher_.launches().size(), 1u);
  // Nor is an ended task started again by a repeated assignment.
  launcher_.Exit(launcher_.last_pid(), 0);
  agent->Tick();
  agent->HandlePoll(Start({Assignment(key)}));
  EXPECT_EQ(launcher_.launches().size(), 1u);
  EXPECT_EQ(ReportsFor(key).size(), 2u);
}

TEST_F(AgentTest, ReportsExitCodeWithTheLogTail) {
  auto agent = NewAgent(Options());
  rpc::TaskKey key = Key(7, 1, 1);
  agent->HandlePoll(Start({Assignment(key)}));
  {
    std::ofstream log(agent->TaskDir(key) + "/task.log", std::ios::app);
    for (int i = 1; i <= 30; ++i) log << "line " << i << "\n";
  }
  agent->Tick();
  EXPECT_EQ(ReportsFor(key).size(), 1u);  // still running
  launcher_.Exit(launcher_.last_pid(), 3);
  agent->Tick();
  auto reports = ReportsFor(key);
  ASSERT_EQ(reports.size(), 2u);
  EXPECT_EQ(reports[1].state, rpc::TaskState::EXITED);
  EXPECT_EQ(reports[1].exit_code, 3);
  EXPECT_EQ(reports[1].message.rfind("line 11\n", 0), 0u) << reports[1].message;
  EXPECT_EQ(reports[1].message.substr(reports[1].message.size() - 7), "line 30");
  EXPECT_TRUE(agent->RunningTasks().empty());
  EXPECT_FALSE(std::filesystem::exists(agent->TaskDir(key) + "/pid"));
}

TEST_F(AgentTest, ReportsDeathBySignal) {
  auto agent = NewAgent(Options());
  rpc::TaskKey key = Key(7, 1, 0);
  agent->HandlePoll(Start({Assignment(key)}));
  launcher_.Kill(launcher_.last_pid(), SIGSEGV);
  agent->Tick();
  auto reports = ReportsFor(key);
  ASSERT_EQ(reports.size(), 2u);
  EXPECT_EQ(reports[1].state, rpc::TaskState::KILLED);
  EXPECT_EQ(reports[1].signal, SIGSEGV);
}

TEST_F(AgentTest, LaunchFailureIsReportedLost) {
  auto agent = NewAgent(Options());
  rpc::TaskKey key = Key(7, 1, 0);
  launcher_.FailNextLaunch(
      FailedPrecondition("cannot execute '/nope': No such file or directory"));
  agent->HandlePoll(Start({Assignment(key, {"/nope"})}));
  auto reports = ReportsFor(key);
  ASSERT_EQ(reports.size(), 1u);
  EXPECT_EQ(reports[0].state, rpc::TaskState::LOST);
  EXPECT_EQ(reports[0].message, "cannot execute '/nope': No such file or directory");
  EXPECT_TRUE(agent->RunningTasks().empty());
  // The reason is in the task's log too, for `parallax logs`.
  EXPECT_NE(ReadAll(agent->TaskDir(key) + "/task.log").find("No such file"), std::string::npos);
}

TEST_F(AgentTest, StopSendsSigtermThenSigkillAfterGrace) {
  auto agent = NewAgent(Options());
  rpc::TaskKey key = Key(7, 1, 0);
  agent->HandlePoll(Start({Assignment(key)}));
  int pid = launcher_.last_pid();
  launcher_.IgnoreTerm(true);
  agent->HandlePoll(StopTasks({key}));
  ASSERT_EQ(launcher_.signals().size(), 1u);
  EXPECT_EQ(launcher_.signals()[0], std::make_pair(pid, SIGTERM));
  clock_.Advance(4'999);
  agent->Tick();
  EXPECT_EQ(launcher_.signals().size(), 1u);
  agent->HandlePoll(StopTasks({key}));  // a repeated stop changes nothing
  EXPECT_EQ(launcher_.signals().size(), 1u);
  clock_.Advance(1);
  agent->Tick();
  ASSERT_GE(launcher_.signals().size(), 2u);
  EXPECT_EQ(launcher_.signals()[1], std::make_pair(pid, SIGKILL));
  agent->Tick();  // reaps it
  auto reports = ReportsFor(key);
  ASSERT_EQ(reports.size(), 2u);
  EXPECT_EQ(reports[1].state, rpc::TaskState::KILLED);
  EXPECT_EQ(reports[1].signal, SIGKILL);
}

TEST_F(AgentTest, StopOfATaskThatHonoursSigtermNeedsNoSigkill) {
  auto agent = NewAgent(Options());
  rpc::TaskKey key = Key(7, 1, 0);
  agent->HandlePoll(Start({Assignment(key)}));
  agent->HandlePoll(StopTasks({key, Key(99, 1, 0)}));  // unknown keys are ignored
  agent->Tick();
  auto reports = ReportsFor(key);
  ASSERT_EQ(reports.size(), 2u);
  EXPECT_EQ(reports[1].state, rpc::TaskState::KILLED);
  EXPECT_EQ(reports[1].signal, SIGTERM);
  EXPECT_TRUE(ReportsFor(Key(99, 1, 0)).empty());
}

TEST_F(AgentTest, FailedReportsAreRetriedInOrder) {
  auto agent = NewAgent(Options());
  rpc::TaskKey key = Key(7, 1, 0);
  link_.FailReports(2);
  agent->HandlePoll(Start({Assignment(key)}));  // RUNNING: first send fails
  launcher_.Exit(launcher_.last_pid(), 0);
  agent->Tick();  // EXITED queued, sent at once: fails again
  EXPECT_EQ(agent->PendingReports(), 2u);
  EXPECT_TRUE(link_.reports().empty());
  agent->Tick();  // backing off
  EXPECT_TRUE(link_.reports().empty());
  clock_.Advance(10'000);
  agent->Tick();
  auto reports = ReportsFor(key);
  ASSERT_EQ(reports.size(), 2u);
  EXPECT_EQ(reports[0].state, rpc::TaskState::RUNNING);
  EXPECT_EQ(reports[1].state, rpc::TaskState::EXITED);
  EXPECT_EQ(agent->PendingReports(), 0u);
}

// A task that exited while the coordinator was away: its report goes out
// before the next poll, backoff or not, so the coordinator never sees a
// poll that leaves out a task it still believes running (it would call the
// task lost and restart the job).
TEST_F(AgentTest, PendingReportsGoOutBeforeThePoll) {
  auto agent = NewAgent(Options());
  rpc::TaskKey key = Key(7, 1, 0);
  link_.FailReports(2);
  agent->HandlePoll(Start({Assignment(key)}));  // RUNNING: the send fails
  launcher_.Exit(launcher_.last_pid(), 0);
  agent->Tick();  // EXITED queued; fails again; backing off now
  EXPECT_EQ(agent->PendingReports(), 2u);
  EXPECT_FALSE(agent->FlushReports());  // within the backoff: not sent
  EXPECT_TRUE(link_.reports().empty());
  EXPECT_TRUE(agent->ReadyToPoll());  // the coordinator is back: sent at once
  auto reports = ReportsFor(key);
  ASSERT_EQ(reports.size(), 2u);
  EXPECT_EQ(reports[1].state, rpc::TaskState::EXITED);
  EXPECT_TRUE(agent->RunningTasks().empty());
  link_.FailReports(2);
  rpc::TaskKey other = Key(8, 1, 0);
  agent->HandlePoll(Start({Assignment(other)}));  // its RUNNING report fails
  EXPECT_FALSE(agent->ReadyToPoll());              // and again: no poll yet
  EXPECT_TRUE(agent->ReadyToPoll());
  EXPECT_EQ(ReportsFor(other).size(), 1u);
}

TEST_F(AgentTest, AnUndeliveredExitReportSurvivesAnAgentRestart) {
  rpc::TaskKey key = Key(7, 1, 0);
  std::string result_file;
  {
    auto agent = NewAgent(Options());
    link_.FailReports(1'000);  // the coordinator is away
    agent->HandlePoll(Start({Assignment(key)}));
    launcher_.Exit(launcher_.last_pid(), 0);
    agent->Tick();
    EXPECT_EQ(agent->PendingReports(), 2u);
    result_file = agent->TaskDir(key) + "/result";
    EXPECT_TRUE(std::filesystem::exists(result_file));
  }
  link_.FailReports(0);
  auto agent = NewAgent(Options());
  EXPECT_TRUE(agent->RunningTasks().empty());
  EXPECT_EQ(agent->PendingReports(), 1u);
  agent->HandlePoll(Start({Assignment(key)}));  // not started again
  EXPECT_TRUE(agent->FlushReports());
  auto reports = ReportsFor(key);
  ASSERT_EQ(reports.size(), 1u);
  EXPECT_EQ(reports[0].state, rpc::TaskState::EXITED);
  EXPECT_EQ(reports[0].exit_code, 0);
  EXPECT_FALSE(std::filesystem::exists(result_file));
  EXPECT_EQ(launcher_.launches().size(), 1u);
}

TEST_F(AgentTest, AdoptsLiveTasksAndReportsThemLostWhenTheyEnd) {
  rpc::TaskKey alive = Key(5, 1, 0), dead = Key(5, 1, 1), reused = Key(5, 1, 2);
  std::string tasks = dir_.File("work") + "/tasks/";
  for (const auto& key : {alive, dead, reused}) {
    std::filesystem::create_directories(tasks + TaskDirName(key));
  }
  std::ofstream(tasks + TaskDirName(alive) + "/pid") << "4242 777\n";
  std::ofstream(tasks + TaskDirName(dead) + "/pid") << "4243 778\n";
  std::ofstream(tasks + TaskDirName(reused) + "/pid") << "4244 779\n";
  launcher_.AddForeign(4242, 777);
  launcher_.AddForeign(4244, 123);  // the pid now belongs to another process
  auto agent = NewAgent(Options());
  EXPECT_EQ(agent->RunningTasks(), std::vector<rpc::TaskKey>{alive});
  EXPECT_EQ(agent->MakePollRequest().running, std::vector<rpc::TaskKey>{alive});
  // The coordinator stops it (an older attempt): its whole group is signalled.
  agent->HandlePoll(StopTasks({alive}));
  EXPECT_EQ(launcher_.signals()[0], std::make_pair(4242, SIGTERM));
  agent->Tick();
  auto reports = ReportsFor(alive);
  ASSERT_EQ(reports.size(), 1u);
  EXPECT_EQ(reports[0].state, rpc::TaskState::LOST);
  EXPECT_EQ(reports[0].message.rfind("exit status unknown (task adopted after an agent restart)", 0),
            0u);
}

// A task that ended while no agent ran: the restarted agent reports how it
// ended (its supervisor's exit-status file), or LOST when nothing says, before
// its first poll; it is not listed as running.
TEST_F(AgentTest, ReportsTasksThatEndedWhileItWasAway) {
  rpc::TaskKey done = Key(8, 1, 0), unknown = Key(8, 1, 1);
  std::string tasks = dir_.File("work") + "/tasks/";
  for (const auto& key : {done, unknown}) {
    std::filesystem::create_directories(tasks + TaskDirName(key));
    std::ofstream(tasks + TaskDirName(key) + "/pid") << "4250 900\n";  // no such process
  }
  std::ofstream(tasks + TaskDirName(done) + "/exit-status") << "exited 0\n";
  auto agent = NewAgent(Options());
  EXPECT_TRUE(agent->RunningTasks().empty());
  ASSERT_TRUE(agent->FlushReports());
  auto reports = ReportsFor(done);
  ASSERT_EQ(reports.size(), 1u);
  EXPECT_EQ(reports[0].state, rpc::TaskState::EXITED);
  EXPECT_EQ(reports[0].exit_code, 0);
  reports = ReportsFor(unknown);
  ASSERT_EQ(reports.size(), 1u);
  EXPECT_EQ(reports[0].state, rpc::TaskState::LOST);
  EXPECT_EQ(reports[0].message, "ended while no agent was running; exit status unknown");
  // Sent once: not again after another restart.
  EXPECT_FALSE(std::filesystem::exists(tasks + TaskDirName(done) + "/pid"));
  agent.reset();
  agent = NewAgent(Options());
  EXPECT_EQ(agent->PendingReports(), 0u);
}

// An adopted task whose supervisor recorded its exit is reported with it.
TEST_F(AgentTest, AdoptedTaskEndsWithTheRecordedExit) {
  rpc::TaskKey key = Key(9, 1, 0);
  std::string dir = dir_.File("work") + "/tasks/" + TaskDirName(key);
  std::filesystem::create_directories(dir);
  std::ofstream(dir + "/pid") << "4260 901\n";
  launcher_.AddForeign(4260, 901);
  auto agent = NewAgent(Options());
  ASSERT_EQ(agent->RunningTasks(), std::vector<rpc::TaskKey>{key});
  std::ofstream(dir + "/exit-status") << "signal 9\n";
  launcher_.Vanish(4260);
  agent->Tick();
  auto reports = ReportsFor(key);
  ASSERT_EQ(reports.size(), 1u);
  EXPECT_EQ(reports[0].state, rpc::TaskState::KILLED);
  EXPECT_EQ(reports[0].signal, 9);
}

TEST_F(AgentTest, ReadLogOfUnknownTaskIsNotFound) {
  auto agent = NewAgent(Options());
  StatusOr<rpc::LogChunk> chunk = agent->ReadLog(Key(1, 1, 0), 0, 100);
  EXPECT_EQ(chunk.status().code(), StatusCode::kNotFound);
}

TEST_F(AgentTest, ReadLogIsCompleteOnlyAfterTheTaskEnded) {
  auto agent = NewAgent(Options());
  rpc::TaskKey key = Key(7, 1, 0);
  agent->HandlePoll(Start({Assignment(key)}));
  std::ofstream(agent->TaskDir(key) + "/task.log") << "hello\n";
  StatusOr<rpc::LogChunk> chunk = agent->ReadLog(key, 0, 100);
  ASSERT_TRUE(chunk.ok()) << chunk.status().ToString();
  EXPECT_EQ(chunk->data, "hello\n");
  EXPECT_FALSE(chunk->complete);
  launcher_.Exit(launcher_.last_pid(), 0);
  agent->Tick();
  chunk = agent->ReadLog(key, 0, 100);
  ASSERT_TRUE(chunk.ok());
  EXPECT_TRUE(chunk->complete);
  EXPECT_EQ(chunk->next_offset, 6);
}

TEST_F(AgentTest, TickRotatesBigLogsAndOffsetsStayAbsolute) {
  AgentOptions o = Options();
  o.max_log_bytes = 100;
  auto agent = NewAgent(o);
  rpc::TaskKey key = Key(7, 1, 0);
  agent->HandlePoll(Start({Assignment(key)}));
  std::string log = agent->TaskDir(key) + "/task.log";
  std::ofstream(log, std::ios::app) << std::string(150, 'a');
  agent->Tick();
  EXPECT_EQ(ReadAll(log + ".1"), std::string(150, 'a'));
  std::ofstream(log, std::ios::app) << "tail";
  StatusOr<rpc::LogChunk> chunk = agent->ReadLog(key, -1, 10);
  ASSERT_TRUE(chunk.ok());
  EXPECT_EQ(chunk->data, "tail");
  EXPECT_EQ(chunk->first_offset, 150);
  EXPECT_EQ(chunk->next_offset, 154);
}

TEST_F(AgentTest, UnwritableWorkdirIsAClearError) {
  std::ofstream(dir_.File("file")) << "x";
  AgentOptions o = Options();
  o.workdir = dir_.File("file") + "/workdir";
  Agent agent(o, &link_, &launcher_, &clock_);
  Status s = agent.Init();
  EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(s.message().rfind("workdir '" + o.workdir + "' is not writable: ", 0), 0u)
      << s.message();
}

TEST_F(AgentTest, SecondAgentOnTheSameWorkdirIsRefused) {
  auto agent = NewAgent(Options());
  Agent second(Options(), &link_, &launcher_, &clock_);
  Status s = second.Init();
  EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(s.message().find("in use by another parallax-agent"), std::string::npos);
}

TEST_F(AgentTest, RunStopsWhenRegistrationIsRefused) {
  auto agent = NewAgent(Options());
  link_.SetRegisterStatus(AlreadyExists("agent 'a1' is already registered from 10.0.0.1:1234"));
  Status s = agent->Run();
  EXPECT_EQ(s.code(), StatusCode::kAlreadyExists);
  EXPECT_NE(s.message().find("refused to register agent 'a1'"), std::string::npos) << s.message();
}

TEST_F(AgentTest, RunPollsStartsAndReportsUntilStopped) {
  AgentOptions o = Options();
  o.tick_ms = 5;
  o.heartbeat_ms = 5;
  auto agent = NewAgent(o);
  rpc::TaskKey key = Key(8, 1, 0);
  link_.QueuePoll(Start({Assignment(key)}));
  std::thread run([&] { EXPECT_TRUE(agent->Run().ok()); });
  ASSERT_TRUE(link_.WaitForReports([&](const std::vector<rpc::TaskReport>& r) {
    return !r.empty() && r.back().state == rpc::TaskState::RUNNING;
  }));
  launcher_.Exit(launcher_.last_pid(), 4);
  ASSERT_TRUE(link_.WaitForReports([&](const std::vector<rpc::TaskReport>& r) {
    return r.size() == 2 && r[1].state == rpc::TaskState::EXITED && r[1].exit_code == 4;
  }));
  agent->Stop();
  run.join();
  EXPECT_EQ(link_.registrations().size(), 1u);
}

TEST_F(AgentTest, AStoppedAgentDeregistersWithItsWorkdirId) {
  AgentOptions o = Options();
  o.tick_ms = 5;
  o.heartbeat_ms = 5;
  auto agent = NewAgent(o);
  std::thread run([&] { EXPECT_TRUE(agent->Run().ok()); });
  ASSERT_TRUE(testing::WaitUntil([&] { return !link_.polls().empty(); }));
  EXPECT_TRUE(link_.deregistrations().empty());
  agent->Stop();
  run.join();
  ASSERT_EQ(link_.registrations().size(), 1u);
  EXPECT_EQ(link_.registrations()[0].workdir_id, agent->workdir_id());
  EXPECT_EQ(link_.registrations()[0].bind_addr, "127.0.0.1");
  EXPECT_EQ(link_.deregistrations(), std::vector<std::string>{"a1 " + agent->workdir_id()});
}

TEST_F(AgentTest, ARefusedAgentDoesNotDeregister) {
  auto agent = NewAgent(Options());
  link_.SetRegisterStatus(AlreadyExists("agent 'a1' is already registered from 10.0.0.1:1234"));
  EXPECT_FALSE(agent->Run().ok());
  EXPECT_TRUE(link_.deregistrations().empty());
}

TEST_F(AgentTest, TheWorkdirIdSurvivesARestartAndDiffersBetweenWorkdirs) {
  std::string first;
  {
    auto agent = NewAgent(Options());
    first = agent->workdir_id();
  }
  EXPECT_EQ(first.size(), 32u);
  EXPECT_EQ(NewAgent(Options())->workdir_id(), first);
  AgentOptions other = Options();
  other.workdir = dir_.File("other");
  EXPECT_NE(NewAgent(other)->workdir_id(), first);
}

TEST_F(AgentTest, RegistersAgainWhenTheCoordinatorForgotIt) {
  AgentOptions o = Options();
  o.tick_ms = 5;
  o.heartbeat_ms = 5;
  auto agent = NewAgent(o);
  link_.SetKnown(false);
  std::thread run([&] { EXPECT_TRUE(agent->Run().ok()); });
  ASSERT_TRUE(testing::WaitUntil([&] { return link_.registrations().size() >= 2; }));
  link_.SetKnown(true);
  agent->Stop();
  run.join();
}

}  // namespace
}  // namespace parallax::agent
