// A job's [trainer.env] must not make an allowed trainer run other code
// (core/base/env_allow_list.h): variables of the dynamic loader, of shells and
// of interpreters, on a compiled trainer (parallax-trainer) and on script
// trainers (bash, Python). Each payload leaves a mark in the task's directory
// if it runs; the control cases, on an agent that allows the variables, show
// that each payload does run when let through (as every agent let it before
// the allow-list).
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <thread>

#include "tests/testing/build_paths.h"
#include "tests/testing/coordinator_process.h"
#include "tests/testing/subprocess.h"
#include "tests/testing/temp_dir.h"

namespace parallax {
namespace {

using testing::ChildProcess;
using testing::LastLine;
using testing::RunProcess;
using testing::RunResult;
using Clock = std::chrono::steady_clock;

const std::string kBin = testing::BinDirOr(::parallax::testing::BuildBinDir());

// What a job sets and which trainer runs it.
struct Injection {
  std::string name;
  std::string trainer;  // "compiled", "bash", "python"
  std::vector<std::string> variables;
  std::vector<std::string> marks;  // files the payloads leave in the task directory
};

void PrintTo(const Injection& injection, std::ostream* out) { *out << injection.name; }

class EnvInjectionTest : public ::testing::TestWithParam<Injection> {
 protected:
  void SetUp() override {
    std::filesystem::create_directories(dir_.File("bin"));
    std::filesystem::create_directories(dir_.File("evil"));
    Script("bin/trainer.sh", "#!/bin/bash\ntouch \"$PARALLAX_TASK_DIR/trainer-ran\"\n");
    Script("bin/trainer.py",
           "#!/usr/bin/env python3\nimport os\n"
           "open(os.environ['PARALLAX_TASK_DIR'] + '/trainer-ran', 'w').close()\n");
    Script("evil/bash_env.sh", "touch \"$PARALLAX_TASK_DIR/bash-env-ran\"\n");
    Script("evil/sitecustomize.py",
           "import os\nopen(os.environ['PARALLAX_TASK_DIR'] + '/site-ran', 'w').close()\n");
    Script("evil/evilwarn.py",
           "import os\nopen(os.environ['PARALLAX_TASK_DIR'] + '/warnings-ran', 'w').close()\n"
           "class W(Warning):\n    pass\n");
    testing::CoordinatorProcessOptions options;
    coordinator_ = std::make_unique<testing::CoordinatorProcess>(kBin, dir_.path(), options);
    ASSERT_TRUE(coordinator_->ok()) << coordinator_->error();
  }

  void Script(const std::string& name, const std::string& text) {
    std::ofstream(dir_.File(name)) << text;
    chmod(dir_.File(name).c_str(), 0755);
  }

  // The value a payload variable takes.
  std::string Value(const std::string& variable) const {
    if (variable == "LD_PRELOAD") return PX_TEST_PRELOAD_LIB;
    if (variable == "BASH_ENV") return dir_.File("evil/bash_env.sh");
    if (variable == "PYTHONPATH") return dir_.File("evil");
    if (variable == "PYTHONWARNINGS") return "ignore::evilwarn.W";
    return "x";
  }

  void StartAgent(const std::vector<std::string>& allow_env) {
    std::vector<std::string> argv = {kBin + "/parallax-agent", "--coordinator",
                                     coordinator_->address(), "--name", "a", "--workdir",
                                     dir_.File("agent"), "--slots", "1", "--heartbeat-ms", "200",
                                     "--allow-exec", kBin, "--allow-exec", dir_.File("bin")};
    for (const std::string& name : allow_env) argv.insert(argv.end(), {"--allow-env", name});
    agent_ = std::make_unique<ChildProcess>(argv, dir_.File("agent.log"));
    auto deadline = Clock::now() + std::chrono::seconds(20);
    while (Clock::now() < deadline) {
      RunResult r = Cli({"agents", "--json"});
      if (r.exit_code == 0 && r.out.find("\"alive\":true") != std::string::npos) return;
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    FAIL() << "agent did not register\n" << testing::ReadWholeFile(dir_.File("agent.log"));
  }

  RunResult Cli(std::vector<std::string> args) {
    args.insert(args.begin(), {kBin + "/parallax", "--coordinator", coordinator_->address()});
    return RunProcess(args, {}, 30'000);
  }

  // Submits the injection's job; returns the job's final status and sets
  // *submit_err to what `submit` printed.
  nlohmann::json Run(const Injection& injection, std::string* submit_err) {
    std::string path = dir_.File("job.toml");
    std::ofstream job(path);
    job << "[job]\nname = \"inject\"\nworkers = 1\narch = \"allreduce\"\n[trainer]\n";
    if (injection.trainer == "compiled") {
      job << "model = \"mlp\"\nsteps = 2\nbatch_size = 8\n";
    } else {
      job << "command = [\"" << dir_.File(injection.trainer == "bash" ? "bin/trainer.sh"
                                                                    : "bin/trainer.py")
          << "\"]\n";
    }
    job << "[trainer.env]\n";
    for (const std::string& v : injection.variables) job << v << " = \"" << Value(v) << "\"\n";
    job.close();
    RunResult r = Cli({"submit", path});
    *submit_err = r.err;
    EXPECT_EQ(r.exit_code, 0) << r.err;
    const std::string id = LastLine(r.out);
    nlohmann::json j;
    auto deadline = Clock::now() + std::chrono::seconds(60);
    while (Clock::now() < deadline) {
      RunResult s = Cli({"status", id, "--json"});
      if (s.exit_code == 0) j = nlohmann::json::parse(s.out)["jobs"][0];
      const std::string state = j.is_null() ? "" : j["state"].get<std::string>();
      if (state == "SUCCEEDED" || state == "FAILED") return j;
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    ADD_FAILURE() << "job " << id << " did not end: " << j.dump() << "\n"
                  << testing::ReadWholeFile(dir_.File("agent.log"));
    return j;
  }

  // Every mark any task left.
  std::vector<std::string> Marks() const {
    std::vector<std::string> marks;
    std::error_code ec;
    for (const auto& e : std::filesystem::recursive_directory_iterator(dir_.File("agent"), ec)) {
      const std::string name = e.path().filename().string();
      if (name.size() > 4 && name.compare(name.size() - 4, 4, "-ran") == 0) marks.push_back(name);
    }
    std::sort(marks.begin(), marks.end());
    return marks;
  }

  testing::TempDir dir_;
  std::unique_ptr<testing::CoordinatorProcess> coordinator_;
  std::unique_ptr<ChildProcess> agent_;
};

TEST_P(EnvInjectionTest, TheTaskEndsBeforeAnythingRunsAndTheReasonNamesTheVariableAndTheFlag) {
  const Injection& injection = GetParam();
  StartAgent({});
  std::string submit_err;
  nlohmann::json job = Run(injection, &submit_err);
  EXPECT_EQ(job.value("state", ""), "FAILED");
  const std::string reason = job.value("reason", "");
  for (const std::string& v : injection.variables) {
    EXPECT_NE(reason.find(v), std::string::npos) << reason;
    EXPECT_NE(reason.find("--allow-env " + v), std::string::npos) << reason;
    EXPECT_NE(submit_err.find("sets " + v), std::string::npos) << submit_err;  // submit warned
  }
  EXPECT_NE(reason.find("exited with code 126"), std::string::npos) << reason;
  EXPECT_TRUE(Marks().empty()) << "code ran: " << ::testing::PrintToString(Marks());
}

// The controls run on the script trainers only: the refusal above does not
// depend on the trainer, and parallax-trainer would train a model here.
using EnvInjectionControlTest = EnvInjectionTest;

TEST_P(EnvInjectionControlTest, AllowedByTheOperatorThePayloadRuns) {
  const Injection& injection = GetParam();
  StartAgent(injection.variables);
  std::string submit_err;
  nlohmann::json job = Run(injection, &submit_err);
  EXPECT_EQ(job.value("state", ""), "SUCCEEDED") << job.dump();
  std::vector<std::string> expected = injection.marks;
  expected.push_back("trainer-ran");
  std::sort(expected.begin(), expected.end());
  EXPECT_EQ(Marks(), expected);
}

const Injection kLoaderOnCompiledTrainer{
    "LoaderOnCompiledTrainer", "compiled", {"LD_PRELOAD"}, {"preload-ran"}};
const Injection kLoaderAndShellOnBashTrainer{
    "LoaderAndShellOnBashTrainer", "bash", {"LD_PRELOAD", "BASH_ENV"},
    {"preload-ran", "bash-env-ran"}};
const Injection kInterpreterOnPythonTrainer{
    "InterpreterOnPythonTrainer", "python", {"PYTHONPATH", "PYTHONWARNINGS"},
    {"site-ran", "warnings-ran"}};

std::string Name(const ::testing::TestParamInfo<Injection>& info) { return info.param.name; }

INSTANTIATE_TEST_SUITE_P(Payloads, EnvInjectionTest,
                         ::testing::Values(kLoaderOnCompiledTrainer, kLoaderAndShellOnBashTrainer,
                                           kInterpreterOnPythonTrainer),
                         Name);
INSTANTIATE_TEST_SUITE_P(Payloads, EnvInjectionControlTest,
                         ::testing::Values(kLoaderAndShellOnBashTrainer,
                                           kInterpreterOnPythonTrainer),
                         Name);

}  // namespace
}  // namespace parallax
