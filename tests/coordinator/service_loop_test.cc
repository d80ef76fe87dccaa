// The service with its background loop running: submits and reads return
// while the orchestrator is in the middle of a pass, and the pass then
// handles what arrived meanwhile.
#include <gtest/gtest.h>

#include <chrono>
#include <condition_variable>
#include <future>
#include <memory>
#include <mutex>
#include <thread>

#include "coordinator/service/service.h"
#include "coordinator/store/sqlite_state_store.h"
#include "schemas/coordinator_constants.h"
#include "tests/coordinator/fault_injection_state_store.h"
#include "tests/testing/temp_dir.h"

namespace parallax::coordinator {
namespace {

using Clock = std::chrono::steady_clock;

// Holds every write that starts an attempt (a pass that places a job)
// until released.
class HeldPlacementStore : public FaultInjectionStateStore {
 public:
  using FaultInjectionStateStore::FaultInjectionStateStore;

  void Hold() {
    std::lock_guard<std::mutex> lock(mu_);
    held_ = true;
  }
  void Release() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      held_ = false;
    }
    cv_.notify_all();
  }
  // Waits up to 10 s until a placement is held inside its write.
  bool WaitUntilHolding() {
    std::unique_lock<std::mutex> lock(mu_);
    return cv_.wait_for(lock, std::chrono::seconds(10), [&] { return holding_ > 0; });
  }

  StatusOr<std::vector<JobRecord>> ApplyChanges(const StateChanges& changes,
                                                int64_t now) override {
    if (!changes.attempts.empty()) {
      std::unique_lock<std::mutex> lock(mu_);
      ++holding_;
      cv_.notify_all();
      cv_.wait_for(lock, std::chrono::seconds(30), [&] { return !held_; });
      --holding_;
    }
    return FaultInjectionStateStore::ApplyChanges(changes, now);
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool held_ = false;
  int holding_ = 0;
};

class ServiceLoopTest : public ::testing::Test {
 protected:
  void SetUp() override {
    SqliteStateStoreOptions options;
    options.path = dir_.File("state.db");
    base_ = std::move(OpenSqliteStateStore(options)).value();
    store_ = std::make_unique<HeldPlacementStore>(base_.get());
    ServiceOptions service_options;
    service_options.heartbeat_flush_ms = 60'000;  // only events wake the loop
    service_ = std::make_unique<CoordinatorService>(store_.get(), RealClock(), service_options);
    ASSERT_TRUE(service_->Init().ok());
    service_->StartBackground();
    header_.protocol_version = rpc::g_coordinator_constants.PROTOCOL_VERSION;
    header_.__set_client("test");
    rpc::AgentInfo a;
    a.name = "a";
    a.address = "a:1";
    a.slots = 4;
    service_->RegisterAgent(header_, a);
  }
  void TearDown() override {
    store_->Release();
    service_->Stop();
  }

  rpc::JobInfo Submit() {
    rpc::SubmitJobRequest r;
    r.job_text =
        "[job]\nname = \"t\"\nworkers = 1\narch = \"allreduce\"\n[trainer]\ncommand = [\"/bin/true\"]\n";
    rpc::JobInfo info;
    service_->SubmitJob(info, header_, r);
    return info;
  }
  rpc::JobInfo Get(int64_t id) {
    rpc::JobInfo info;
    service_->GetJob(info, header_, id);
    return info;
  }
  // A long poll of agent "a" on another thread.
  std::future<rpc::PollResponse> PollAsync(int64_t timeout_ms) {
    return std::async(std::launch::async, [this, timeout_ms] {
      rpc::PollRequest r;
      r.agent_name = "a";
      r.timeout_ms = timeout_ms;
      rpc::PollResponse out;
      service_->PollAssignments(out, header_, r);
      return out;
    });
  }
  // Waits up to 10 s for the job to leave PENDING.
  rpc::JobState::type WaitPlaced(int64_t id) {
    const auto deadline = Clock::now() + std::chrono::seconds(10);
    rpc::JobInfo info = Get(id);
    while (info.state == rpc::JobState::PENDING && Clock::now() < deadline) {
      std::this_thread::yield();
      info = Get(id);
    }
    return info.state;
  }

  testing::TempDir dir_;
  std::unique_ptr<StateStore> base_;
  std::unique_ptr<HeldPlacementStore> store_;
  std::unique_ptr<CoordinatorService> service_;
  rpc::RequestHeader header_;
};

TEST_F(ServiceLoopTest, SubmitsAndReadsReturnWhileAPassIsHeld) {
  store_->Hold();
  rpc::JobInfo first = Submit();
  EXPECT_EQ(first.state, rpc::JobState::PENDING);
  // The loop is now inside the first job's placement, and stays there.
  ASSERT_TRUE(store_->WaitUntilHolding());
  rpc::JobInfo second = Submit();  // does not wait for the pass
  EXPECT_EQ(second.state, rpc::JobState::PENDING);
  EXPECT_GT(second.id, first.id);
  EXPECT_EQ(Get(first.id).state, rpc::JobState::PENDING);
  EXPECT_EQ(Get(second.id).state, rpc::JobState::PENDING);
  store_->Release();
  // Both are placed: the first by the held pass, the second by it or the
  // next one, woken by the second submit.
  EXPECT_EQ(WaitPlaced(first.id), rpc::JobState::PLACING);
  EXPECT_EQ(WaitPlaced(second.id), rpc::JobState::PLACING);
}

TEST_F(ServiceLoopTest, ALongPollReturnsWhenThePassPlacesWorkOnItsAgent) {
  auto poll = PollAsync(30'000);
  Submit();
  rpc::PollResponse work = poll.get();  // would take 30 s if the poll were not woken
  ASSERT_EQ(work.start.size(), 1u);
  EXPECT_EQ(work.start[0].key.attempt, 1);
}

TEST_F(ServiceLoopTest, StopWakesALongPoll) {
  auto poll = PollAsync(60'000);
  service_->Stop();
  // Whether the poll was waiting or arrives after Stop(), it fails promptly.
  EXPECT_THROW(poll.get(), rpc::CoordinatorError);
}

}  // namespace
}  // namespace parallax::coordinator
