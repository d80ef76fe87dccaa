// Security of the control plane with real processes: parallax-coordinator and
// parallax-agent started with --secret-file, the real CLI, raw sockets for
// oversized requests. See docs/RELIABILITY.md, "Security".
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sqlite3.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>
#include <thread>

#include "tests/testing/build_paths.h"
#include "tests/testing/coordinator_process.h"
#include "tests/testing/proc_scan.h"
#include "tests/testing/subprocess.h"
#include "tests/testing/temp_dir.h"

namespace parallax {
namespace {

using testing::ChildProcess;
using testing::LastLine;
using testing::RunProcess;
using testing::RunResult;
using Clock = std::chrono::steady_clock;

const std::string kBin = ::parallax::testing::BuildBinDir();

class SecurityTest : public ::testing::Test {
 protected:
  void SetUp() override {
    marker_ = "PX_TEST_MARK=" + std::to_string(getpid()) + "-" +
              ::testing::UnitTest::GetInstance()->current_test_info()->name();
    std::random_device rd;
    std::ostringstream s;
    s << "px-secret-" << std::hex << rd() << rd() << rd();
    secret_ = s.str();
    secret_file_ = WriteSecret("secret", secret_);
  }
  void TearDown() override {
    agent_.reset();
    coordinator_.reset();
    testing::KillAllWithEnv({marker_});
  }

  std::string WriteSecret(const std::string& name, const std::string& secret) {
    std::string path = dir_.File(name);
    std::ofstream(path) << secret << "\n";
    chmod(path.c_str(), 0600);
    return path;
  }

  void StartCoordinator(std::vector<std::string> extra = {}) {
    extra.insert(extra.begin(), {"--secret-file", secret_file_});
    testing::CoordinatorProcessOptions options;
    options.extra_args = extra;
    coordinator_ = std::make_unique<testing::CoordinatorProcess>(kBin, dir_.path(), options);
    ASSERT_TRUE(coordinator_->ok()) << coordinator_->error();
    port_ = coordinator_->port();
    address_ = coordinator_->address();
  }

  // An agent with the right secret (in its environment, as a systemd unit
  // would give it), the default --allow-exec (its bin dir), and the test
  // task's own variables allowed.
  void StartAgent() {
    agent_ = std::make_unique<ChildProcess>(
        std::vector<std::string>{kBin + "/parallax-agent", "--coordinator", address_, "--name",
                                 "a", "--workdir", dir_.File("agent"), "--slots", "2",
                                 "--heartbeat-ms", "200", "--allow-env", "PX_TEST_*"},
        dir_.File("agent.log"), std::vector<std::string>{"PARALLAX_SECRET_FILE=" + secret_file_});
    auto deadline = Clock::now() + std::chrono::seconds(20);
    while (Clock::now() < deadline) {
      RunResult r = Cli({"agents", "--json"});
      if (r.exit_code == 0 && r.out.find("\"alive\":true") != std::string::npos) return;
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    FAIL() << "agent did not register\n" << testing::ReadWholeFile(dir_.File("agent.log"));
  }

  RunResult Cli(std::vector<std::string> args, const std::string& secret_file = "") {
    std::vector<std::string> argv = {kBin + "/parallax", "--coordinator", address_,
                                     "--secret-file",
                                     secret_file.empty() ? secret_file_ : secret_file};
    argv.insert(argv.end(), args.begin(), args.end());
    return RunProcess(argv, {}, 30'000);
  }

  std::string WriteJob(const std::string& command, const std::string& name = "job.toml",
                       const std::string& behavior = "exit:0") {
    std::string path = dir_.File(name);
    std::ofstream(path) << "[job]\nname = \"sec\"\nworkers = 1\narch = \"allreduce\"\n"
                        << "[trainer]\ncommand = [\"" << command << "\"]\n"
                        << "[trainer.env]\nPX_TEST_BEHAVIOR = \"" << behavior << "\"\n"
                        << "PX_TEST_MARK = \"" << marker_.substr(marker_.find('=') + 1) << "\"\n";
    return path;
  }

  nlohmann::json WaitFor(const std::string& id, const std::string& state) {
    nlohmann::json j;
    auto deadline = Clock::now() + std::chrono::seconds(30);
    while (Clock::now() < deadline) {
      RunResult r = Cli({"status", id, "--json"});
      if (r.exit_code == 0) j = nlohmann::json::parse(r.out)["jobs"][0];
      if (!j.is_null() && j["state"] == state) return j;
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    ADD_FAILURE() << "job " << id << " did not reach " << state << "; last: " << j.dump() << "\n"
                  << testing::ReadWholeFile(dir_.File("coordinator.log"))
                  << testing::ReadWholeFile(dir_.File("agent.log"));
    return j;
  }

  // Rows of the coordinator's jobs table, read with SQLite directly.
  int JobRows() {
    sqlite3* db = nullptr;
    if (sqlite3_open_v2(dir_.File("state.db").c_str(), &db, SQLITE_OPEN_READONLY, nullptr) !=
        SQLITE_OK) {
      sqlite3_close(db);
      return -1;
    }
    sqlite3_stmt* stmt = nullptr;
    int n = -1;
    if (sqlite3_prepare_v2(db, "SELECT COUNT(*) FROM jobs", -1, &stmt, nullptr) == SQLITE_OK &&
        sqlite3_step(stmt) == SQLITE_ROW) {
      n = sqlite3_column_int(stmt, 0);
    }
    sqlite3_finalize(stmt);
    sqlite3_close(db);
    return n;
  }

  // Connects to the coordinator and sends `bytes`; returns whether the
  // coordinator closed the connection (read returns 0 or an error) within 10 s.
  bool SendRawAndExpectClose(const std::string& bytes) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(static_cast<uint16_t>(port_));
    inet_pton(AF_INET, "127.0.0.1", &addr.sin_addr);
    if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
      close(fd);
      return false;
    }
    timeval tv{10, 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    size_t sent = 0;
    while (sent < bytes.size()) {
      ssize_t n = send(fd, bytes.data() + sent, bytes.size() - sent, MSG_NOSIGNAL);
      if (n <= 0) break;  // the server may close while we still send
      sent += static_cast<size_t>(n);
    }
    char buf[256];
    ssize_t n = recv(fd, buf, sizeof(buf), 0);
    bool closed = n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK);
    close(fd);
    return closed;
  }

  testing::TempDir dir_;
  std::string marker_;
  std::string secret_;
  std::string secret_file_;
  std::string address_;
  int port_ = 0;
  std::unique_ptr<testing::CoordinatorProcess> coordinator_;
  std::unique_ptr<ChildProcess> agent_;
};

TEST_F(SecurityTest, AWrongOrMissingSecretIsRefusedAndStoresNothing) {
  StartCoordinator();
  StartAgent();
  std::string job = WriteJob(kBin + "/px_test_task");
  std::string wrong = WriteSecret("wrong", "not-the-secret");
  RunResult r = Cli({"submit", job}, wrong);
  EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
  EXPECT_NE(r.err.find("authentication failed"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("--secret-file"), std::string::npos) << r.err;
  EXPECT_EQ(r.err.find("not-the-secret"), std::string::npos) << "the refusal echoes the secret";
  // No secret at all.
  RunResult none = RunProcess({kBin + "/parallax", "--coordinator", address_, "submit", job}, {},
                              30'000);
  EXPECT_EQ(none.exit_code, 1) << none.err;
  EXPECT_NE(none.err.find("carried none"), std::string::npos) << none.err;
  EXPECT_EQ(JobRows(), 0);
  EXPECT_TRUE(testing::PidsWithEnv({marker_}).empty()) << "a task was started";
  // The right secret still works.
  RunResult ok = Cli({"submit", job});
  ASSERT_EQ(ok.exit_code, 0) << ok.err;
  EXPECT_EQ(JobRows(), 1);
}

TEST_F(SecurityTest, ASecretFileOthersCanReadIsRefusedByEveryBinary) {
  chmod(secret_file_.c_str(), 0644);
  for (std::string bin : {"parallax-coordinator", "parallax-agent", "parallax"}) {
    std::vector<std::string> argv = {kBin + "/" + bin, "--secret-file", secret_file_};
    if (bin == "parallax-agent") {
      argv.insert(argv.end(), {"--coordinator", "127.0.0.1:1", "--name", "x", "--workdir",
                               dir_.File("w")});
    } else if (bin == "parallax-coordinator") {
      argv.insert(argv.end(), {"--listen", "127.0.0.1:0", "--db", dir_.File("x.db")});
    } else {
      argv.insert(argv.end(), {"--coordinator", "127.0.0.1:1", "status"});
    }
    RunResult r = RunProcess(argv, {}, 30'000);
    EXPECT_EQ(r.exit_code, 2) << bin << ": " << r.out << r.err;
    EXPECT_NE(r.err.find("chmod 600 " + secret_file_), std::string::npos) << bin << ": " << r.err;
  }
}

TEST_F(SecurityTest, TheSecretIsInNoLogAndNotInTheDatabase) {
  StartCoordinator();
  StartAgent();
  RunResult r = Cli({"submit", WriteJob(kBin + "/px_test_task")});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  WaitFor(LastLine(r.out), "SUCCEEDED");
  RunResult logs = Cli({"logs", LastLine(r.out)});
  EXPECT_EQ(logs.exit_code, 0) << logs.err;
  EXPECT_NE(logs.out.find("PARALLAX_TOKEN=(set)"), std::string::npos) << logs.out;
  // A task that prints its secret: its own log has it (the agent cannot stop
  // that), but the log lines the agent reports to the coordinator do not.
  RunResult leak = Cli({"submit", WriteJob(kBin + "/px_test_task", "leak.toml", "leak_token,exit:3")});
  ASSERT_EQ(leak.exit_code, 0) << leak.err;
  nlohmann::json failed = WaitFor(LastLine(leak.out), "FAILED");
  EXPECT_NE(failed.value("reason", "").find("my secret is [secret redacted]"), std::string::npos)
      << failed.dump();
  const std::string leaked_log =
      dir_.File("agent/tasks/" + LastLine(leak.out) + "-1-trainer-0/task.log");
  EXPECT_NE(testing::ReadWholeFile(leaked_log).find(secret_), std::string::npos)
      << "leak_token did not leak";
  agent_.reset();
  coordinator_->process()->Signal(SIGTERM);
  coordinator_->process()->Wait(20'000);
  // Every file the cluster wrote: the database (and its WAL), the daemons'
  // logs, every task directory (job file copy, log, pid and result files).
  int files = 0;
  bool saw_db = false, saw_task_log = false;
  for (const auto& entry : std::filesystem::recursive_directory_iterator(dir_.path())) {
    if (!entry.is_regular_file() || entry.path() == secret_file_ ||
        entry.path() == leaked_log) {
      continue;
    }
    ++files;
    saw_db |= entry.path().filename() == "state.db";
    saw_task_log |= entry.path().filename() == "task.log";
    EXPECT_EQ(testing::ReadWholeFile(entry.path()).find(secret_), std::string::npos)
        << "the secret is in " << entry.path();
  }
  EXPECT_TRUE(saw_db);
  EXPECT_TRUE(saw_task_log);
  EXPECT_GE(files, 5);
}

TEST_F(SecurityTest, AnExecutableOutsideTheAllowedDirectoriesIsNotRun) {
  StartCoordinator();
  StartAgent();
  // A script that would leave a mark if it ran.
  std::string script = dir_.File("evil.sh");
  std::ofstream(script) << "#!/bin/sh\ntouch " << dir_.File("ran") << "\n";
  chmod(script.c_str(), 0755);
  RunResult r = Cli({"submit", WriteJob(script)});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  nlohmann::json j = WaitFor(LastLine(r.out), "FAILED");
  std::string reason = j.value("reason", "");
  EXPECT_NE(reason.find("refused to execute"), std::string::npos) << reason;
  EXPECT_NE(reason.find("--allow-exec"), std::string::npos) << reason;
  EXPECT_FALSE(std::filesystem::exists(dir_.File("ran"))) << "the refused program ran";
}

TEST_F(SecurityTest, OversizedAndGarbageFramesCloseTheConnectionAndTheCoordinatorServesOn) {
  StartCoordinator({"--max-request-bytes", "1048576"});
  // A frame header announcing 2 GB, then a little of it.
  std::string huge("\x7f\xff\xff\xff", 4);
  huge += std::string(1024, 'x');
  EXPECT_TRUE(SendRawAndExpectClose(huge));
  // A frame just over the limit, sent in full.
  uint32_t n = (1u << 20) + 16;
  std::string over = {static_cast<char>(n >> 24), static_cast<char>(n >> 16),
                      static_cast<char>(n >> 8), static_cast<char>(n)};
  over += std::string(n, '\x0b');
  EXPECT_TRUE(SendRawAndExpectClose(over));
  // Garbage inside a small frame.
  EXPECT_TRUE(SendRawAndExpectClose(std::string("\0\0\0\x08garbage!", 12)));
  RunResult r = Cli({"status"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  // A job file over the request limit: refused, no job, still serving.
  std::string big = WriteJob(kBin + "/px_test_task", "big.toml");
  std::ofstream(big, std::ios::app) << "[user]\npad = \"" << std::string(2 << 20, 'p') << "\"\n";
  RunResult b = Cli({"submit", big});
  EXPECT_NE(b.exit_code, 0);
  EXPECT_EQ(JobRows(), 0);
  EXPECT_EQ(Cli({"status"}).exit_code, 0);
}

TEST_F(SecurityTest, TheActiveJobLimitRefusesASubmitWithWhatToDo) {
  StartCoordinator({"--max-active-jobs", "2"});
  std::string job = WriteJob(kBin + "/px_test_task");  // no agent: jobs stay PENDING
  ASSERT_EQ(Cli({"submit", job}).exit_code, 0);
  ASSERT_EQ(Cli({"submit", job}).exit_code, 0);
  RunResult r = Cli({"submit", job});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("--max-active-jobs"), std::string::npos) << r.err;
  EXPECT_EQ(JobRows(), 2);
  RunResult cancel = Cli({"cancel", "1"});
  ASSERT_EQ(cancel.exit_code, 0) << cancel.err;
  EXPECT_EQ(Cli({"submit", job}).exit_code, 0);
  EXPECT_EQ(JobRows(), 3);
}

}  // namespace
}  // namespace parallax
