#include "agent/task_env.h"

#include <gtest/gtest.h>

#include <map>

#include "tests/agent/test_util.h"

namespace parallax::agent {
namespace {

using testing::Assignment;
using testing::Key;

std::map<std::string, std::string> AsMap(const std::vector<std::string>& env) {
  std::map<std::string, std::string> m;
  for (const std::string& e : env) {
    size_t eq = e.find('=');
    EXPECT_NE(eq, std::string::npos) << e;
    EXPECT_EQ(m.count(e.substr(0, eq)), 0u) << "duplicate " << e;
    m[e.substr(0, eq)] = e.substr(eq + 1);
  }
  return m;
}

TaskEnvContext Context() {
  TaskEnvContext c;
  c.coordinator = "coord:7070";
  c.bind_addr = "10.0.0.5";
  c.token = "s3cret";
  c.job_file = "/w/tasks/7-2-trainer-1/job.toml";
  c.task_dir = "/w/tasks/7-2-trainer-1";
  return c;
}

TEST(TaskEnvTest, TrainerGetsExactlyTheContractVariables) {
  rpc::TaskAssignment a = Assignment(Key(7, 2, 1));
  a.world_size = 4;
  a.local_rank = 1;
  a.local_world_size = 2;
  a.host_index = 0;
  a.num_hosts = 2;
  a.num_shards = 3;
  auto env = AsMap(BuildTaskEnv(a, Context(), {"HOME=/root", "PATH=/bin"}));
  std::map<std::string, std::string> want = {
      {"HOME", "/root"},
      {"PATH", "/bin"},
      {"PARALLAX_JOB_ID", "7"},
      {"PARALLAX_ATTEMPT", "2"},
      {"PARALLAX_ROLE", "trainer"},
      {"PARALLAX_RANK", "1"},
      {"PARALLAX_WORLD_SIZE", "4"},
      {"PARALLAX_LOCAL_RANK", "1"},
      {"PARALLAX_LOCAL_WORLD_SIZE", "2"},
      {"PARALLAX_HOST_INDEX", "0"},
      {"PARALLAX_NUM_HOSTS", "2"},
      {"PARALLAX_NUM_SHARDS", "3"},
      {"PARALLAX_COORDINATOR", "coord:7070"},
      {"PARALLAX_BIND_ADDR", "10.0.0.5"},
      {"PARALLAX_TOKEN", "s3cret"},
      {"PARALLAX_JOB_FILE", "/w/tasks/7-2-trainer-1/job.toml"},
      {"PARALLAX_JOB_SOURCE", "/jobs/test/job.toml"},
      {"PARALLAX_TASK_DIR", "/w/tasks/7-2-trainer-1"},
  };
  EXPECT_EQ(env, want);
}

TEST(TaskEnvTest, PsGetsShardAndNoRankVariables) {
  rpc::TaskAssignment a = Assignment(Key(7, 1, 2, rpc::TaskRole::PS));
  auto env = AsMap(BuildTaskEnv(a, Context(), {}));
  EXPECT_EQ(env["PARALLAX_ROLE"], "ps");
  EXPECT_EQ(env["PARALLAX_SHARD"], "2");
  EXPECT_EQ(env["PARALLAX_WORLD_SIZE"], "2");
  EXPECT_EQ(env.count("PARALLAX_RANK"), 0u);
  EXPECT_EQ(env.count("PARALLAX_LOCAL_RANK"), 0u);
  EXPECT_EQ(env.count("PARALLAX_LOCAL_WORLD_SIZE"), 0u);
}

TEST(TaskEnvTest, CudaVisibleDevicesOnlyWhenGiven) {
  rpc::TaskAssignment a = Assignment(Key(1, 1, 0));
  EXPECT_EQ(AsMap(BuildTaskEnv(a, Context(), {})).count("CUDA_VISIBLE_DEVICES"), 0u);
  a.__set_cuda_visible_devices("3");
  EXPECT_EQ(AsMap(BuildTaskEnv(a, Context(), {}))["CUDA_VISIBLE_DEVICES"], "3");
}

TEST(TaskEnvTest, CudaVisibleDevicesIndexesTheAgentsOwnDevices) {
  // Under Slurm the agent sees only the step's GPUs ("2,5"): slot 1 is
  // device 5, not device 1.
  rpc::TaskAssignment a = Assignment(Key(1, 1, 0));
  a.__set_cuda_visible_devices("1");
  EXPECT_EQ(AsMap(BuildTaskEnv(a, Context(), {"CUDA_VISIBLE_DEVICES=2,5"}))["CUDA_VISIBLE_DEVICES"],
            "5");
  a.__set_cuda_visible_devices("0");
  EXPECT_EQ(AsMap(BuildTaskEnv(a, Context(), {"CUDA_VISIBLE_DEVICES=GPU-ab12,GPU-cd34"}))
                ["CUDA_VISIBLE_DEVICES"],
            "GPU-ab12");
}

TEST(TaskEnvTest, JobEnvCannotOverrideParallaxVariables) {
  rpc::TaskAssignment a =
      Assignment(Key(1, 1, 0), {}, {{"PARALLAX_RANK", "9"}, {"OMP_NUM_THREADS", "4"},
                                    {"PARALLAX_NEW", "x"}, {"HOME", "/job"}});
  std::vector<std::string> ignored;
  auto env = AsMap(BuildTaskEnv(a, Context(), {"HOME=/root"}, &ignored));
  EXPECT_EQ(env["PARALLAX_RANK"], "0");
  EXPECT_EQ(env.count("PARALLAX_NEW"), 0u);
  EXPECT_EQ(env["OMP_NUM_THREADS"], "4");
  EXPECT_EQ(env["HOME"], "/job");  // other variables: the job's value wins
  EXPECT_EQ(ignored, (std::vector<std::string>{"PARALLAX_NEW", "PARALLAX_RANK"}));
}

TEST(TaskEnvTest, PythonTrainersGetThePackageAndThreadsPerRank) {
  TaskEnvContext c = Context();
  c.python_path = "/opt/px/python";
  c.cpu_cores = 16;
  rpc::TaskAssignment a = Assignment(Key(1, 1, 0));
  a.local_world_size = 3;
  auto env = AsMap(BuildTaskEnv(a, c, {"PYTHONPATH=/site"}));
  EXPECT_EQ(env["PYTHONPATH"], "/opt/px/python:/site");
  EXPECT_EQ(env["OMP_NUM_THREADS"], "5");  // 16 cores shared by 3 ranks
  EXPECT_EQ(env["OPENBLAS_NUM_THREADS"], "5");
  // The agent's environment and then the job's choose otherwise.
  env = AsMap(BuildTaskEnv(a, c, {"OMP_NUM_THREADS=2"}));
  EXPECT_EQ(env["OMP_NUM_THREADS"], "2");
  EXPECT_EQ(env["PYTHONPATH"], "/opt/px/python");
  a = Assignment(Key(1, 1, 0), {}, {{"OPENBLAS_NUM_THREADS", "1"}, {"PYTHONPATH", "/mine"}});
  a.local_world_size = 32;
  env = AsMap(BuildTaskEnv(a, c, {}));
  EXPECT_EQ(env["OMP_NUM_THREADS"], "1");  // never 0
  EXPECT_EQ(env["OPENBLAS_NUM_THREADS"], "1");
  EXPECT_EQ(env["PYTHONPATH"], "/opt/px/python:/mine");
  // PS shards get neither.
  env = AsMap(BuildTaskEnv(Assignment(Key(1, 1, 0, rpc::TaskRole::PS)), c, {}));
  EXPECT_EQ(env.count("PYTHONPATH") + env.count("OMP_NUM_THREADS"), 0u);
}

TEST(TaskEnvTest, InheritedParallaxVariablesAreDropped) {
  auto env = AsMap(BuildTaskEnv(Assignment(Key(1, 1, 0, rpc::TaskRole::PS)), Context(),
                                {"PARALLAX_RANK=5", "PARALLAX_TOKEN=agent-env", "X=1"}));
  EXPECT_EQ(env.count("PARALLAX_RANK"), 0u);
  EXPECT_EQ(env["PARALLAX_TOKEN"], "s3cret");
  EXPECT_EQ(env["X"], "1");
}

TEST(TaskEnvTest, TlsCaOnlyWhenTheAgentHasOne) {
  rpc::TaskAssignment a = Assignment(Key(1, 1, 0));
  // An inherited one is dropped: tasks follow the agent's own --tls-ca.
  EXPECT_EQ(AsMap(BuildTaskEnv(a, Context(), {"PARALLAX_TLS_CA=/stale.pem"}))
                .count("PARALLAX_TLS_CA"),
            0u);
  TaskEnvContext c = Context();
  c.tls_ca_file = "/etc/parallax/ca.pem";
  EXPECT_EQ(AsMap(BuildTaskEnv(a, c, {}))["PARALLAX_TLS_CA"], "/etc/parallax/ca.pem");
}

TEST(TaskEnvTest, ResolvesCommands) {
  rpc::TaskAssignment a = Assignment(Key(1, 1, 0));
  EXPECT_EQ(ResolveCommand(a, "/opt/px/bin"),
            std::vector<std::string>{"/opt/px/bin/parallax-trainer"});
  a.key.role = rpc::TaskRole::PS;
  EXPECT_EQ(ResolveCommand(a, "/opt/px/bin"), std::vector<std::string>{"/opt/px/bin/parallax-ps"});
  a.command = {"./train.sh", "--fast"};
  EXPECT_EQ(ResolveCommand(a, "/b"), (std::vector<std::string>{"/jobs/test/train.sh", "--fast"}));
  a.command = {"../tools/run", "x"};
  EXPECT_EQ(ResolveCommand(a, "/b"), (std::vector<std::string>{"/jobs/tools/run", "x"}));
  a.command = {"python3", "train.py"};
  EXPECT_EQ(ResolveCommand(a, "/b"), (std::vector<std::string>{"python3", "train.py"}));
  a.command = {"/usr/bin/env", "true"};
  EXPECT_EQ(ResolveCommand(a, "/b"), (std::vector<std::string>{"/usr/bin/env", "true"}));
}

TEST(TaskEnvTest, TaskDirNamesRoundTrip) {
  EXPECT_EQ(TaskDirName(Key(7, 2, 3)), "7-2-trainer-3");
  EXPECT_EQ(TaskDirName(Key(7, 2, 0, rpc::TaskRole::PS)), "7-2-ps-0");
  auto key = ParseTaskDirName("12-3-ps-1");
  ASSERT_TRUE(key.has_value());
  EXPECT_EQ(*key, Key(12, 3, 1, rpc::TaskRole::PS));
  EXPECT_FALSE(ParseTaskDirName("12-3-worker-1").has_value());
  EXPECT_FALSE(ParseTaskDirName("12-3-ps").has_value());
  EXPECT_FALSE(ParseTaskDirName("x-3-ps-1").has_value());
  EXPECT_FALSE(ParseTaskDirName("012-3-ps-1").has_value());
}

TEST(TaskEnvTest, AShardsNextGenerationHasItsOwnDirectoryAndEnvironment) {
  rpc::TaskKey second = Key(7, 2, 0, rpc::TaskRole::PS);
  second.__set_generation(2);
  EXPECT_EQ(TaskDirName(second), "7-2-ps-0-g2");
  auto key = ParseTaskDirName("7-2-ps-0-g2");
  ASSERT_TRUE(key.has_value());
  EXPECT_EQ(*key, second);
  EXPECT_EQ(DescribeTask(second), "job 7 attempt 2 ps 0 generation 2");
  for (const char* bad : {"7-2-ps-0-g1", "7-2-ps-0-g", "7-2-ps-0-x2", "7-2-ps-0-g02"}) {
    EXPECT_FALSE(ParseTaskDirName(bad).has_value()) << bad;
  }
  rpc::TaskAssignment a = Assignment(second);
  TaskEnvContext c = Context();
  c.previous_task_dir = "/work/tasks/7-2-ps-0";
  auto env = AsMap(BuildTaskEnv(a, c, {}));
  EXPECT_EQ(env["PARALLAX_SHARD_GENERATION"], "2");
  EXPECT_EQ(env["PARALLAX_SHARD_PREVIOUS_DIR"], "/work/tasks/7-2-ps-0");
  // The attempt's first process: neither.
  env = AsMap(BuildTaskEnv(Assignment(Key(7, 2, 0, rpc::TaskRole::PS)), c, {}));
  EXPECT_EQ(env.count("PARALLAX_SHARD_GENERATION"), 0u);
  EXPECT_EQ(env.count("PARALLAX_SHARD_PREVIOUS_DIR"), 0u);
}

}  // namespace
}  // namespace parallax::agent
