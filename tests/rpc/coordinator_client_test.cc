// CoordinatorClient's retries against a real parallax-coordinator that is
// SIGKILLed and restarted on the same port and database between two calls
// and during a blocking call (core/rpc/coordinator_client.h, "Retries").
#include "core/rpc/coordinator_client.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <future>
#include <thread>

#include "tests/testing/build_paths.h"
#include "tests/testing/coordinator_connect.h"
#include "tests/testing/coordinator_process.h"
#include "tests/testing/temp_dir.h"

namespace parallax {
namespace {

using testing::CoordinatorProcess;
using Clock = std::chrono::steady_clock;

const char kJob[] =
    "[job]\nname = \"retry\"\nworkers = 1\narch = \"allreduce\"\n"
    "[trainer]\ncommand = [\"/bin/true\"]\n";

class CoordinatorClientRetryTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(coordinator_.ok()) << coordinator_.error();
    client_ = Connect(CoordinatorClientOptions{});
    ASSERT_NE(client_, nullptr);
  }

  std::unique_ptr<CoordinatorClient> Connect(CoordinatorClientOptions o) {
    o.retry_initial_backoff_ms = 10;
    o.retry_max_backoff_ms = 100;
    auto c = testing::ConnectToCoordinator(coordinator_, o);
    EXPECT_TRUE(c.ok()) << c.status().ToString();
    return c.ok() ? std::move(c).value() : nullptr;
  }

  testing::TempDir dir_;
  CoordinatorProcess coordinator_{testing::BinDirOr(::parallax::testing::BuildBinDir()), dir_.path()};
  std::unique_ptr<CoordinatorClient> client_;
};

// The first call after a restart would go out on the connection the old
// process left behind; it is made on a new one instead.
TEST_F(CoordinatorClientRetryTest, FirstCallAfterARestartSucceeds) {
  ASSERT_TRUE(client_->KvSet("job/1/1/k", "v").ok());
  ASSERT_TRUE(coordinator_.Kill());
  ASSERT_TRUE(coordinator_.Restart()) << coordinator_.error();
  StatusOr<std::vector<std::string>> got = client_->KvGet({"job/1/1/k"}, 1'000);
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_EQ(*got, std::vector<std::string>{"v"});  // from the database, across the restart
  // Not idempotent, but no call was in flight: the dead connection was replaced.
  StatusOr<rpc::JobInfo> job = client_->SubmitJob(kJob, "");
  EXPECT_TRUE(job.ok()) << job.status().ToString();
}

// An idempotent call made while the coordinator is down waits for it to
// come back; a non-idempotent one fails at once.
TEST_F(CoordinatorClientRetryTest, IdempotentCallWaitsForTheRestartOthersFail) {
  ASSERT_TRUE(coordinator_.Kill());
  StatusOr<rpc::JobInfo> submit = client_->SubmitJob(kJob, "");
  ASSERT_FALSE(submit.ok());
  EXPECT_EQ(submit.status().code(), StatusCode::kUnavailable) << submit.status().ToString();

  std::future<Status> set =
      std::async(std::launch::async, [&] { return client_->KvSet("job/1/1/k", "after"); });
  // Down for as long as the call keeps retrying (it cannot finish before
  // the coordinator is back).
  EXPECT_EQ(set.wait_for(std::chrono::milliseconds(300)), std::future_status::timeout);
  ASSERT_TRUE(coordinator_.Restart()) << coordinator_.error();
  Status s = set.get();
  EXPECT_TRUE(s.ok()) << s.ToString();
  auto other = Connect(CoordinatorClientOptions{});
  ASSERT_NE(other, nullptr);
  StatusOr<std::vector<std::string>> got = other->KvGet({"job/1/1/k"}, 1'000);
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_EQ(*got, std::vector<std::string>{"after"});
}

// A blocking KvGet in flight when the coordinator dies is sent again and
// returns the value set after the restart.
TEST_F(CoordinatorClientRetryTest, BlockingCallInFlightSurvivesAKill) {
  std::future<StatusOr<std::vector<std::string>>> get =
      std::async(std::launch::async, [&] { return client_->KvGet({"job/1/1/late"}, 60'000); });
  ASSERT_EQ(get.wait_for(std::chrono::milliseconds(200)), std::future_status::timeout);
  ASSERT_TRUE(coordinator_.Kill());
  ASSERT_TRUE(coordinator_.Restart()) << coordinator_.error();
  auto other = Connect(CoordinatorClientOptions{});
  ASSERT_NE(other, nullptr);
  ASSERT_TRUE(other->KvSet("job/1/1/late", "here").ok());
  StatusOr<std::vector<std::string>> got = get.get();
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_EQ(*got, std::vector<std::string>{"here"});
}

// Retries end at the deadline with a message that says so.
TEST_F(CoordinatorClientRetryTest, GivesUpAfterTheDeadline) {
  CoordinatorClientOptions o;
  o.retry_deadline_ms = 400;
  auto client = Connect(o);
  ASSERT_NE(client, nullptr);
  ASSERT_TRUE(coordinator_.Kill());
  const Clock::time_point start = Clock::now();
  ::testing::internal::CaptureStderr();
  StatusOr<std::vector<rpc::AgentInfo>> agents = client->ListAgents();
  const std::string log = ::testing::internal::GetCapturedStderr();
  const auto took =
      std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start).count();
  // One line for the outage, not Thrift's "Connection refused" for each of
  // the ~7 tries.
  EXPECT_EQ(log.find("TSocket::open()"), std::string::npos) << log;
  EXPECT_EQ(std::count(log.begin(), log.end(), '\n'), 1) << log;
  EXPECT_NE(log.find("unreachable"), std::string::npos) << log;
  ASSERT_FALSE(agents.ok());
  EXPECT_EQ(agents.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(agents.status().message().find("gave up after"), std::string::npos)
      << agents.status().ToString();
  EXPECT_NE(agents.status().message().find(coordinator_.address()), std::string::npos)
      << agents.status().ToString();
  EXPECT_GE(took, 400);

  // retry_deadline_ms = 0: no retry at all.
  o.retry_deadline_ms = 0;
  ASSERT_TRUE(coordinator_.Restart()) << coordinator_.error();
  auto once = Connect(o);
  ASSERT_NE(once, nullptr);
  ASSERT_TRUE(coordinator_.Kill());
  StatusOr<std::vector<rpc::AgentInfo>> failed = once->ListAgents();
  EXPECT_EQ(failed.status().code(), StatusCode::kUnavailable) << failed.status().ToString();
  EXPECT_EQ(failed.status().message().find("gave up"), std::string::npos);
}

}  // namespace
}  // namespace parallax
