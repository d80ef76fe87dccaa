// The real launcher, and the agent driving real processes.
#include "agent/process_launcher.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <thread>

#include "agent/agent.h"
#include "agent/task_env.h"
#include "tests/agent/fake_link.h"
#include "tests/agent/test_util.h"
#include "tests/testing/subprocess.h"
#include "tests/testing/temp_dir.h"

namespace parallax::agent {
namespace {

using testing::Assignment;
using testing::FakeCoordinatorLink;
using testing::Key;
using testing::ReadAll;
using testing::Start;
using testing::StopTasks;
using testing::WaitUntil;

class ProcessLauncherTest : public ::testing::Test {
 protected:
  LaunchSpec Spec(std::vector<std::string> argv) {
    LaunchSpec spec;
    spec.argv = std::move(argv);
    spec.env = {"PATH=/usr/bin:/bin", "GREETING=hi"};
    spec.cwd = dir_.path();
    spec.log_path = dir_.File("task.log");
    return spec;
  }

  // Waits for `pid` to end and reaps it.
  std::optional<ProcessExit> WaitExit(int pid) {
    std::optional<ProcessExit> exit;
    WaitUntil([&] { return (exit = launcher_->Reap(pid)).has_value(); });
    return exit;
  }

  parallax::testing::TempDir dir_;
  std::unique_ptr<ProcessLauncher> launcher_ = NewProcessLauncher();
};

TEST_F(ProcessLauncherTest, RunsInItsDirWithItsEnvAndLogsOutput) {
  StatusOr<int> pid = launcher_->Launch(
      Spec({"/bin/sh", "-c", "echo $GREETING; pwd; echo oops >&2; exit 3"}));
  ASSERT_TRUE(pid.ok()) << pid.status().ToString();
  EXPECT_EQ(getpgid(*pid), *pid);  // leads its own process group
  std::optional<ProcessExit> exit = WaitExit(*pid);
  ASSERT_TRUE(exit.has_value());
  EXPECT_EQ(exit->exit_code, 3);
  EXPECT_EQ(exit->signal, 0);
  std::string real_dir = std::filesystem::canonical(dir_.path()).string();
  EXPECT_EQ(ReadAll(dir_.File("task.log")), "hi\n" + real_dir + "\noops\n");
}

TEST_F(ProcessLauncherTest, LogIsAppended) {
  std::ofstream(dir_.File("task.log")) << "before\n";
  StatusOr<int> pid = launcher_->Launch(Spec({"/bin/sh", "-c", "echo after"}));
  ASSERT_TRUE(pid.ok());
  WaitExit(*pid);
  EXPECT_EQ(ReadAll(dir_.File("task.log")), "before\nafter\n");
}

TEST_F(ProcessLauncherTest, MissingBinaryIsALaunchError) {
  StatusOr<int> pid = launcher_->Launch(Spec({dir_.File("no-such-binary")}));
  ASSERT_FALSE(pid.ok());
  EXPECT_EQ(pid.status().message(),
            "cannot execute '" + dir_.File("no-such-binary") + "': No such file or directory");
  pid = launcher_->Launch(Spec({"px-no-such-command-anywhere"}));
  ASSERT_FALSE(pid.ok());
  EXPECT_NE(pid.status().message().find("No such file or directory"), std::string::npos);
}

TEST_F(ProcessLauncherTest, BareNamesAreLookedUpInPath) {
  StatusOr<int> pid = launcher_->Launch(Spec({"sh", "-c", "exit 0"}));
  ASSERT_TRUE(pid.ok()) << pid.status().ToString();
  EXPECT_EQ(WaitExit(*pid)->exit_code, 0);
}

TEST_F(ProcessLauncherTest, ReportsDeathBySignalAndStartTime) {
  StatusOr<int> pid = launcher_->Launch(Spec({"/bin/sleep", "30"}));
  ASSERT_TRUE(pid.ok());
  EXPECT_GT(launcher_->StartTime(*pid), 0);
  EXPECT_FALSE(launcher_->Reap(*pid).has_value());
  launcher_->SignalGroup(*pid, SIGTERM);
  std::optional<ProcessExit> exit = WaitExit(*pid);
  ASSERT_TRUE(exit.has_value());
  EXPECT_EQ(exit->signal, SIGTERM);
  EXPECT_EQ(launcher_->StartTime(*pid), -1);
}

// ---- The agent with real processes ----

class AgentProcessTest : public ::testing::Test {
 protected:
  std::unique_ptr<Agent> NewAgent(int64_t grace_ms) {
    AgentOptions o;
    o.name = "real";
    o.workdir = dir_.File("work");
    o.bin_dir = dir_.path();
    o.coordinator = "127.0.0.1:1";
    o.bind_addr = "127.0.0.1";
    o.grace_ms = grace_ms;
    o.inherited_env = {"PATH=/usr/bin:/bin"};
    o.allow_env = {"PX_TEST_*"};  // the test task's own variables
    auto agent = std::make_unique<Agent>(o, &link_, launcher_.get(), RealClock());
    Status s = agent->Init();
    EXPECT_TRUE(s.ok()) << s.ToString();
    return agent;
  }

  // Ticks the agent until a report for `key` with `state` arrives.
  std::optional<rpc::TaskReport> TickUntil(Agent& agent, const rpc::TaskKey& key,
                                           rpc::TaskState::type state) {
    std::optional<rpc::TaskReport> found;
    WaitUntil([&] {
      agent.Tick();
      for (const auto& r : link_.reports()) {
        if (r.key == key && r.state == state) found = r;
      }
      return found.has_value();
    });
    return found;
  }

  parallax::testing::TempDir dir_;
  FakeCoordinatorLink link_;
  std::unique_ptr<ProcessLauncher> launcher_ = NewProcessLauncher();
};

TEST_F(AgentProcessTest, TaskExitCodeAndLogTail) {
  auto agent = NewAgent(5'000);
  rpc::TaskKey key = Key(1, 1, 0);
  agent->HandlePoll(Start({Assignment(key, {"/bin/sh", "-c", "echo hi; exit 3"})}));
  auto report = TickUntil(*agent, key, rpc::TaskState::EXITED);
  ASSERT_TRUE(report.has_value());
  EXPECT_EQ(report->exit_code, 3);
  EXPECT_EQ(report->message, "hi");
  EXPECT_EQ(ReadAll(agent->TaskDir(key) + "/task.log"), "hi\n");
}

TEST_F(AgentProcessTest, TestTaskSeesTheContractEnvironment) {
  auto agent = NewAgent(5'000);
  rpc::TaskKey key = Key(3, 2, 1);
  agent->HandlePoll(Start({Assignment(key, {PX_TEST_TASK_PATH},
                                      {{"PX_TEST_BEHAVIOR", "fail_on_attempt:2:7"}})}));
  auto report = TickUntil(*agent, key, rpc::TaskState::EXITED);
  ASSERT_TRUE(report.has_value());
  EXPECT_EQ(report->exit_code, 7);
  std::string log = ReadAll(agent->TaskDir(key) + "/task.log");
  EXPECT_NE(log.find("PARALLAX_RANK=1\n"), std::string::npos) << log;
  EXPECT_NE(log.find("PARALLAX_ATTEMPT=2\n"), std::string::npos);
  EXPECT_NE(log.find("PARALLAX_TASK_DIR=" + agent->TaskDir(key) + "\n"), std::string::npos);
  EXPECT_NE(log.find("failing on attempt 2 with exit code 7"), std::string::npos);
}

TEST_F(AgentProcessTest, MissingCommandIsReportedLost) {
  auto agent = NewAgent(5'000);
  rpc::TaskKey key = Key(1, 1, 0);
  agent->HandlePoll(Start({Assignment(key, {"./missing-binary"})}));
  auto reports = link_.reports();
  ASSERT_EQ(reports.size(), 1u);
  EXPECT_EQ(reports[0].state, rpc::TaskState::LOST);
  EXPECT_EQ(reports[0].message,
            "cannot execute '/jobs/test/missing-binary': No such file or directory");
}

TEST_F(AgentProcessTest, StopKillsTheWholeGroupAfterGrace) {
  auto agent = NewAgent(200);
  rpc::TaskKey key = Key(1, 1, 0);
  std::string grandchild_pid = dir_.File("grandchild.pid");
  // Both the task and its child ignore SIGTERM.
  agent->HandlePoll(Start({Assignment(
      key, {"/bin/sh", "-c",
            "trap '' TERM; sleep 1000 & echo $! > " + grandchild_pid + "; echo ready; wait"})}));
  ASSERT_TRUE(WaitUntil([&] {
    return ReadAll(agent->TaskDir(key) + "/task.log") == "ready\n";
  }));
  int grandchild = std::stoi(ReadAll(grandchild_pid));
  ASSERT_EQ(kill(grandchild, 0), 0);
  agent->HandlePoll(StopTasks({key}));
  auto report = TickUntil(*agent, key, rpc::TaskState::KILLED);
  ASSERT_TRUE(report.has_value());
  EXPECT_EQ(report->signal, SIGKILL);
  // The grandchild (reparented away from us) is gone too.
  EXPECT_TRUE(WaitUntil([&] { return launcher_->StartTime(grandchild) == -1; }));
}

TEST_F(AgentProcessTest, AdoptsALiveProcessAndStopsIt) {
  parallax::testing::ChildProcess sleeper({"/bin/sleep", "30"}, dir_.File("sleep.log"));
  int64_t start_time = launcher_->StartTime(sleeper.pid());
  ASSERT_GT(start_time, 0);
  rpc::TaskKey key = Key(4, 1, 0);
  std::string task_dir = dir_.File("work") + "/tasks/" + TaskDirName(key);
  std::filesystem::create_directories(task_dir);
  std::ofstream(task_dir + "/pid") << sleeper.pid() << " " << start_time << "\n";
  auto agent = NewAgent(5'000);
  EXPECT_EQ(agent->RunningTasks(), std::vector<rpc::TaskKey>{key});
  agent->Tick();
  EXPECT_TRUE(link_.reports().empty());  // still alive
  agent->HandlePoll(StopTasks({key}));
  auto report = TickUntil(*agent, key, rpc::TaskState::LOST);
  ASSERT_TRUE(report.has_value());
  EXPECT_EQ(report->message, "exit status unknown (task adopted after an agent restart)");
  EXPECT_TRUE(agent->RunningTasks().empty());
}

// An agent that is killed while its task runs, and comes
// back, adopts the task; the task's supervisor records how it ended, so the
// adopting agent reports its real exit code (the job keeps its attempt)
// instead of LOST.
TEST_F(AgentProcessTest, AdoptedTaskIsReportedWithItsRealExitCode) {
  const rpc::TaskKey key = Key(6, 1, 0);
  const std::string go = dir_.File("go");
  int pid = -1;
  {
    auto first = NewAgent(5'000);
    first->HandlePoll(Start({Assignment(
        key, {"/bin/sh", "-c",
              "echo waiting; while [ ! -e " + go + " ]; do sleep 0.01; done; exit 5"})}));
    ASSERT_EQ(first->RunningTasks(), std::vector<rpc::TaskKey>{key});
    ASSERT_TRUE(
        WaitUntil([&] { return ReadAll(first->TaskDir(key) + "/task.log") == "waiting\n"; }));
    pid = std::stoi(ReadAll(first->TaskDir(key) + "/pid"));
  }  // this agent is gone; a cluster agent leaves its tasks running
  // The second agent takes the workdir (the task holds none of the first
  // agent's descriptors, its lock included) and adopts the task.
  auto second = NewAgent(5'000);
  ASSERT_EQ(second->RunningTasks(), std::vector<rpc::TaskKey>{key});
  second->Tick();
  EXPECT_EQ(link_.reports().size(), 1u) << "only the first agent's RUNNING report";
  std::ofstream(go) << "go\n";
  auto report = TickUntil(*second, key, rpc::TaskState::EXITED);
  ASSERT_TRUE(report.has_value());
  EXPECT_EQ(report->exit_code, 5);
  EXPECT_EQ(report->message, "waiting");
  for (const auto& r : link_.reports()) EXPECT_NE(r.state, rpc::TaskState::LOST);
  EXPECT_TRUE(second->RunningTasks().empty());
  int status = 0;
  EXPECT_EQ(waitpid(pid, &status, 0), pid);  // the supervisor was this process's child
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 5) << status;
}

// The supervisor ends the way its task did, for the agent that launched it.
TEST_F(ProcessLauncherTest, SupervisorRecordsAndMirrorsTheTasksEnd) {
  LaunchSpec spec = Spec({"/bin/sh", "-c", "kill -TERM $$"});
  spec.exit_status_path = dir_.File("exit-status");
  StatusOr<int> pid = launcher_->Launch(spec);
  ASSERT_TRUE(pid.ok()) << pid.status().ToString();
  std::optional<ProcessExit> exit = WaitExit(*pid);
  ASSERT_TRUE(exit.has_value());
  EXPECT_EQ(exit->signal, SIGTERM);
  std::optional<ProcessExit> recorded = ReadExitStatus(spec.exit_status_path);
  ASSERT_TRUE(recorded.has_value());
  EXPECT_EQ(recorded->signal, SIGTERM);
  EXPECT_EQ(recorded->exit_code, -1);

  spec.argv = {"/bin/sh", "-c", "exit 42"};
  pid = launcher_->Launch(spec);
  ASSERT_TRUE(pid.ok());
  EXPECT_EQ(WaitExit(*pid)->exit_code, 42);
  EXPECT_EQ(ReadExitStatus(spec.exit_status_path)->exit_code, 42);
  EXPECT_FALSE(ReadExitStatus(dir_.File("missing")).has_value());
}

// An agent that stops its tasks when Run() ends (parallax run's, parallax
// slurm's), fast ticks.
AgentOptions StoppingAgent(const std::string& name, const std::string& workdir) {
  AgentOptions o;
  o.name = name;
  o.workdir = workdir;
  o.coordinator = "127.0.0.1:1";
  o.grace_ms = 200;
  o.tick_ms = 5;
  o.heartbeat_ms = 5;
  o.stop_tasks_on_exit = true;
  return o;
}

TEST_F(AgentProcessTest, StopTasksOnExitStopsEveryTaskWhenRunEnds) {
  Agent agent(StoppingAgent("run", dir_.File("work")), &link_, launcher_.get(), RealClock());
  ASSERT_TRUE(agent.Init().ok());
  rpc::TaskKey polite = Key(1, 1, 0), stubborn = Key(1, 1, 1);
  link_.QueuePoll(Start({Assignment(polite, {"/bin/sleep", "1000"}),
                         Assignment(stubborn, {"/bin/sh", "-c", "trap '' TERM; echo ready; "
                                                                "while :; do sleep 1; done"})}));
  std::thread run([&] { EXPECT_TRUE(agent.Run().ok()); });
  ASSERT_TRUE(link_.WaitForReports([](const std::vector<rpc::TaskReport>& r) { return r.size() == 2; }));
  ASSERT_TRUE(WaitUntil([&] {
    return ReadAll(agent.TaskDir(stubborn) + "/task.log") == "ready\n";
  }));
  agent.Stop();
  run.join();
  EXPECT_TRUE(agent.RunningTasks().empty());
  auto reports = link_.reports();
  ASSERT_EQ(reports.size(), 4u);
  for (size_t i = 2; i < 4; ++i) {
    EXPECT_EQ(reports[i].state, rpc::TaskState::KILLED);
    EXPECT_EQ(reports[i].signal, reports[i].key == polite ? SIGTERM : SIGKILL);
  }
}

// parallax slurm's agents (--no-report-on-stop): Slurm kills the ranks with
// the same SIGTERM as the agent, and reporting those ends would fail the job
// before parallax slurm records the cancel. Once stopped, an agent reports
// nothing more; what the tasks ended with stays in their directories.
TEST_F(AgentProcessTest, WithoutReportOnStopTheEndsOfStoppedTasksAreSavedNotReported) {
  AgentOptions o = StoppingAgent("slurm-node", dir_.File("work"));
  o.report_on_stop = false;
  Agent agent(o, &link_, launcher_.get(), RealClock());
  ASSERT_TRUE(agent.Init().ok());
  rpc::TaskKey key = Key(1, 1, 0);
  link_.QueuePoll(Start({Assignment(key, {"/bin/sleep", "1000"})}));
  std::thread run([&] { EXPECT_TRUE(agent.Run().ok()); });
  ASSERT_TRUE(link_.WaitForReports([](const std::vector<rpc::TaskReport>& r) { return r.size() == 1; }));
  agent.Stop();
  run.join();
  EXPECT_TRUE(agent.RunningTasks().empty());
  const auto reports = link_.reports();
  ASSERT_EQ(reports.size(), 1u);  // RUNNING, before the stop
  EXPECT_EQ(reports[0].state, rpc::TaskState::RUNNING);
  EXPECT_FALSE(ReadAll(agent.TaskDir(key) + "/result").empty()) << "the end is saved";
}

TEST_F(AgentProcessTest, DeadPidFileIsNotAdopted) {
  rpc::TaskKey key = Key(4, 1, 0);
  std::string task_dir = dir_.File("work") + "/tasks/" + TaskDirName(key);
  std::filesystem::create_directories(task_dir);
  // Our own pid with the wrong start time: a reused pid.
  std::ofstream(task_dir + "/pid") << getpid() << " 1\n";
  auto agent = NewAgent(5'000);
  EXPECT_TRUE(agent->RunningTasks().empty());
}

}  // namespace
}  // namespace parallax::agent
