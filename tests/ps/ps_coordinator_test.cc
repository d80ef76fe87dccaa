// parallax-ps started the way an agent starts it: only environment
// variables. It fetches its plan from a real parallax-coordinator, binds port
// 0 and publishes its endpoint under job/<id>/<attempt>/ps/<shard>, where a
// worker finds it.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <thread>

#include "core/ps/client.h"
#include "core/ps/discovery.h"
#include "core/rpc/coordinator_client.h"
#include "tests/testing/coordinator_connect.h"
#include "tests/testing/coordinator_process.h"
#include "tests/testing/subprocess.h"
#include "tests/ps/ps_job_util.h"
#include "tests/testing/temp_dir.h"
#include "schemas/kv_keys.h"
#include "tests/testing/build_paths.h"

namespace parallax::ps {
namespace {

std::string BinDir() { return testing::BinDirOr(::parallax::testing::BuildBinDir()); }

constexpr char kJob[] = R"(
[job]
name = "ps-discovery"
workers = 1

[trainer]
model = "lm"
)";

class PsCoordinatorTest : public ::testing::Test {
 protected:
  parallax::testing::TempDir dir_;
};

TEST_F(PsCoordinatorTest, ShardFetchesPlanAndPublishesEndpointFromEnvironment) {
  parallax::testing::CoordinatorProcess coordinator(BinDir(), dir_.path());
  ASSERT_TRUE(coordinator.ok()) << coordinator.error();
  const std::string port = coordinator.port_text();
  auto coord = parallax::testing::ConnectToCoordinator(coordinator);
  ASSERT_TRUE(coord.ok()) << coord.status().ToString();
  const PsPlan plan = OneShardAsyncPlan(4);
  auto job = SubmitJobWithPsPlan(coord->get(), kJob, dir_.File("job.toml"), plan);
  ASSERT_TRUE(job.ok()) << job.status().ToString();
  const int64_t job_id = job->job_id;
  const int32_t attempt = job->attempt;

  parallax::testing::ChildProcess shard(
      {BinDir() + "/parallax-ps"}, dir_.File("shard.log"),
      {"PARALLAX_JOB_ID=" + std::to_string(job_id), "PARALLAX_ATTEMPT=" + std::to_string(attempt),
       "PARALLAX_SHARD=0", "PARALLAX_COORDINATOR=127.0.0.1:" + port, "PARALLAX_BIND_ADDR=127.0.0.1"});
  auto endpoints = ResolveShardEndpoints(coord->get(), job_id, attempt, 1, 20'000);
  ASSERT_TRUE(endpoints.ok()) << endpoints.status().ToString();
  EXPECT_EQ((*endpoints)[0].rfind("tcp://127.0.0.1:", 0), 0u) << (*endpoints)[0];
  EXPECT_EQ(kv_keys::ShardEndpoint(job_id, attempt, 0),
            "job/" + std::to_string(job_id) + "/" + std::to_string(attempt) + "/ps/0");

  PsClientOptions o;
  o.plan = plan;
  o.shard_endpoints = *endpoints;
  o.attempt = static_cast<uint32_t>(attempt);
  auto client = PsClient::Create(o);
  ASSERT_TRUE(client.ok());
  std::vector<int64_t> ids = {3};
  std::vector<float> g = {1, 2, 3, 4}, rows;
  auto t = (*client)->PushPull(0, ids, g, 0, &rows);
  ASSERT_TRUE(t.ok());
  ASSERT_TRUE((*client)->Wait(*t, DeadlineIn(20'000)).ok());
  EXPECT_FLOAT_EQ(rows[3], -0.04f);  // default SGD lr 0.01

  shard.Signal(SIGTERM);
  const int status = shard.Wait(10'000);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
}

}  // namespace
}  // namespace parallax::ps
