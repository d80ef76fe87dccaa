// ChildProcess (tests/testing/subprocess.h): Stop() returns once the child
// is stopped, not merely signalled, and says so when the child exited
// first. Tests that freeze a process to hold what it would answer rely on
// it.
#include "tests/testing/subprocess.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "tests/testing/temp_dir.h"

namespace parallax::testing {
namespace {

// The state letter of every thread of `pid` (/proc/<pid>/task/<tid>/stat),
// e.g. "T" for one stopped thread; "" when the process is gone.
std::string ThreadStates(int pid) {
  std::string states;
  std::error_code ec;
  const std::filesystem::path tasks = "/proc/" + std::to_string(pid) + "/task";
  for (const auto& task : std::filesystem::directory_iterator(tasks, ec)) {
    std::ifstream stat(task.path() / "stat");
    std::string line;
    std::getline(stat, line);
    const size_t paren = line.rfind(')');
    if (paren != std::string::npos && paren + 2 < line.size()) states += line[paren + 2];
  }
  return states;
}

// A child that keeps a CPU busy: when merely signalled it is runnable (or
// running) until the scheduler lets it take the stop.
std::unique_ptr<ChildProcess> BusyChild(const TempDir& dir) {
  return std::make_unique<ChildProcess>(
      std::vector<std::string>{"/bin/sh", "-c", "while :; do :; done"}, dir.File("busy.log"));
}

TEST(ChildProcessTest, StopReturnsOnceEveryThreadOfTheChildIsStopped) {
  TempDir dir;
  for (int round = 0; round < 20; ++round) {
    auto child = BusyChild(dir);
    const int pid = child->pid();
    ASSERT_TRUE(child->Stop(20'000)) << "round " << round;
    const std::string states = ThreadStates(pid);
    ASSERT_FALSE(states.empty());
    EXPECT_EQ(states.find_first_not_of('T'), std::string::npos)
        << "round " << round << ": thread states \"" << states << "\" right after Stop()";
    // The stop was reported, not the exit: the child is still there to kill.
    EXPECT_TRUE(child->running());
    child->Signal(SIGKILL);
    const int status = child->Wait(20'000);
    ASSERT_TRUE(WIFSIGNALED(status)) << "wait status " << status;
    EXPECT_EQ(WTERMSIG(status), SIGKILL);
  }
}

TEST(ChildProcessTest, StopOfAChildThatExitedIsFalseAndReapsIt) {
  TempDir dir;
  ChildProcess child({"/bin/sh", "-c", "exit 3"}, dir.File("exit.log"));
  // Exited, not yet reaped: a zombie, which a signal no longer stops.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (ThreadStates(child.pid()) != "Z") {
    ASSERT_LT(std::chrono::steady_clock::now(), deadline) << ThreadStates(child.pid());
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  EXPECT_FALSE(child.Stop(20'000));
  EXPECT_FALSE(child.running());
  EXPECT_FALSE(child.Stop(20'000));  // nothing left to stop
}

}  // namespace
}  // namespace parallax::testing
