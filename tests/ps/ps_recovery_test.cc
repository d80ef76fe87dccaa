// A PS shard started again alone after it was lost (docs/RELIABILITY.md, "A
// lost PS shard"), with real processes: a parallax-coordinator, a
// parallax-ps of generation 1 that is SIGKILLed with a push in flight, and
// its generation 2, which loads the job's newest committed checkpoint and
// publishes under its generation. The worker's PsClient finds it through the
// coordinator and sends it the push the lost process never answered.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>

#include <filesystem>

#include <nlohmann/json.hpp>

#include "core/base/durable_file.h"
#include "core/checkpoint/rank_files.h"
#include "core/ps/client.h"
#include "core/ps/discovery.h"
#include "core/rpc/coordinator_client.h"
#include "tests/testing/coordinator_connect.h"
#include "tests/testing/coordinator_process.h"
#include "tests/testing/subprocess.h"
#include "tests/ps/ps_job_util.h"
#include "tests/testing/temp_dir.h"
#include "tests/testing/build_paths.h"

namespace parallax::ps {
namespace {

std::string BinDir() { return testing::BinDirOr(::parallax::testing::BuildBinDir()); }

constexpr char kJob[] = R"(
[job]
name = "ps-recovery"
workers = 1
consistency = "async"

[trainer]
model = "lm"
)";

constexpr uint32_t kDim = 4;
constexpr float kLr = 0.5f;

class PsRecoveryTest : public ::testing::Test {
 protected:
  void SetUp() override {
    coordinator_ = std::make_unique<parallax::testing::CoordinatorProcess>(BinDir(), dir_.path());
    ASSERT_TRUE(coordinator_->ok()) << coordinator_->error();
    auto coord = parallax::testing::ConnectToCoordinator(*coordinator_);
    ASSERT_TRUE(coord.ok()) << coord.status().ToString();
    coord_ = std::move(coord).value();
    plan_ = OneShardAsyncPlan(kDim);
    plan_.variables[0].optimizer.type = OptimizerType::kSgd;
    plan_.variables[0].optimizer.lr = kLr;
    auto job = SubmitJobWithPsPlan(coord_.get(), kJob, dir_.File("job.toml"), plan_);
    ASSERT_TRUE(job.ok()) << job.status().ToString();
    job_id_ = job->job_id;
    attempt_ = job->attempt;
  }

  // parallax-ps as an agent starts it, as generation `generation`.
  std::unique_ptr<parallax::testing::ChildProcess> StartShard(uint32_t generation) {
    return std::make_unique<parallax::testing::ChildProcess>(
        std::vector<std::string>{BinDir() + "/parallax-ps"},
        dir_.File("shard-g" + std::to_string(generation) + ".log"),
        std::vector<std::string>{
            "PARALLAX_JOB_ID=" + std::to_string(job_id_),
            "PARALLAX_ATTEMPT=" + std::to_string(attempt_), "PARALLAX_SHARD=0",
            "PARALLAX_SHARD_GENERATION=" + std::to_string(generation),
            "PARALLAX_COORDINATOR=127.0.0.1:" + coordinator_->port_text(),
            "PARALLAX_BIND_ADDR=127.0.0.1"});
  }

  // A worker's client of the job's shard 0 at generation 1, which follows
  // it to its next generations through the coordinator; null on failure.
  std::unique_ptr<PsClient> Client() {
    auto endpoints = ResolveShardEndpoints(coord_.get(), job_id_, attempt_, 1, 20'000);
    EXPECT_TRUE(endpoints.ok()) << endpoints.status().ToString();
    if (!endpoints.ok()) return nullptr;
    PsClientOptions o;
    o.plan = plan_;
    o.shard_endpoints = *endpoints;
    o.attempt = static_cast<uint32_t>(attempt_);
    o.shard_generations = {1};
    o.shard_recovery_timeout_ms = 20'000;
    CoordinatorClientOptions copts = coord_->options();
    o.resolve_shard = [copts, this](uint32_t shard, uint32_t generation,
                                    Deadline deadline) -> StatusOr<ShardAddress> {
      PX_ASSIGN_OR_RETURN(std::unique_ptr<CoordinatorClient> c, CoordinatorClient::Connect(copts));
      return ResolveShardGeneration(c.get(), job_id_, attempt_, shard, generation, false,
                                    deadline);
    };
    auto created = PsClient::Create(o);
    EXPECT_TRUE(created.ok()) << created.status().ToString();
    return created.ok() ? std::move(created).value() : nullptr;
  }

  // One push of gradient 1 to every value of row 5, acknowledged.
  void PushAcked(PsClient* client, int64_t step) {
    auto t = client->Push(0, kRow, kGrad, step);
    ASSERT_TRUE(t.ok());
    Status s = client->Wait(*t, DeadlineIn(20'000));
    ASSERT_TRUE(s.ok()) << s.ToString();
  }

  // Records the checkpoint in `path` as the job's, of step `step`.
  void CommitCheckpoint(int64_t step, const std::string& path) {
    rpc::CheckpointInfo info;
    info.job_id = job_id_;
    info.attempt = attempt_;
    info.step = step;
    info.path = path;
    info.manifest_sha256 = "";
    ASSERT_TRUE(coord_->CommitCheckpoint(info).ok());
  }

  nlohmann::json Stats(PsClient* client) {
    std::vector<std::string> texts;
    auto t = client->Stats(&texts);
    EXPECT_TRUE(t.ok());
    Status s = client->Wait(*t, DeadlineIn(20'000));
    EXPECT_TRUE(s.ok()) << s.ToString();
    return nlohmann::json::parse(texts.at(0));
  }

  float RowValue(PsClient* client) {
    std::vector<float> rows;
    auto t = client->Pull(0, kRow, 0, &rows);
    EXPECT_TRUE(t.ok());
    Status s = client->Wait(*t, DeadlineIn(20'000));
    EXPECT_TRUE(s.ok()) << s.ToString();
    return rows.empty() ? 0.0f : rows[0];
  }

  const std::vector<int64_t> kRow = {5};
  const std::vector<float> kGrad = std::vector<float>(kDim, 1.0f);
  parallax::testing::TempDir dir_;
  std::unique_ptr<parallax::testing::CoordinatorProcess> coordinator_;
  std::unique_ptr<CoordinatorClient> coord_;
  int64_t job_id_ = 0;
  int32_t attempt_ = 0;
  PsPlan plan_;
};

TEST_F(PsRecoveryTest, KilledShardComesBackFromItsCheckpointAndGetsTheUnansweredPush) {
  auto first = StartShard(1);
  std::unique_ptr<PsClient> owned = Client();
  ASSERT_NE(owned, nullptr);
  PsClient* client = owned.get();

  // 10 updates, a checkpoint, 7 more: those 7 are what the loss costs.
  for (int step = 0; step < 10; ++step) PushAcked(client, step);
  const std::string ckpt = dir_.File("step-10");
  std::filesystem::create_directories(ckpt);
  auto save = client->Save(ckpt, 0);
  ASSERT_TRUE(save.ok());
  ASSERT_TRUE(client->Wait(*save, DeadlineIn(20'000)).ok());
  CommitCheckpoint(10, ckpt);
  for (int step = 10; step < 17; ++step) PushAcked(client, step);
  const nlohmann::json before = Stats(client);
  EXPECT_EQ(before["generation"], 1);
  ASSERT_EQ(before["updates_applied"], 17) << before.dump();
  EXPECT_FLOAT_EQ(RowValue(client), -kLr * 17);

  // Frozen, then killed: the push made meanwhile is never applied or answered.
  // Frozen means every thread stopped, not only SIGSTOP sent: a shard still
  // running would apply and answer the push, and nothing would be resent.
  ASSERT_TRUE(first->Stop(20'000)) << "generation 1 did not stop; see " << dir_.path();
  auto in_flight = client->Push(0, kRow, kGrad, 17);
  ASSERT_TRUE(in_flight.ok());
  first->Signal(SIGKILL);
  first->Wait(10'000);
  const Status unanswered = client->Wait(*in_flight, DeadlineIn(0));
  ASSERT_EQ(unanswered.code(), StatusCode::kDeadlineExceeded) << unanswered.ToString();

  auto second = StartShard(2);
  Status s = client->Wait(*in_flight, DeadlineIn(20'000));
  ASSERT_TRUE(s.ok()) << s.ToString() << "; see " << dir_.path();
  // The checkpoint's 10 updates and the resent push; the 7 after the
  // checkpoint are lost.
  const nlohmann::json after = Stats(client);
  EXPECT_EQ(after["generation"], 2);
  EXPECT_EQ(after["updates_applied"], 11) << after.dump();
  EXPECT_EQ(before["updates_applied"].get<int64_t>() - 10, 7);
  EXPECT_FLOAT_EQ(RowValue(client), -kLr * 11);

  // The fence: a worker still at generation 1 is refused by generation 2.
  auto address = ResolveShardGeneration(coord_.get(), job_id_, attempt_, 0, 2, false,
                                        DeadlineIn(20'000));
  ASSERT_TRUE(address.ok()) << address.status().ToString();
  PsClientOptions stale;
  stale.plan = plan_;
  stale.shard_endpoints = {address->endpoint};
  stale.attempt = static_cast<uint32_t>(attempt_);
  stale.shard_generations = {1};
  auto old = PsClient::Create(stale);
  ASSERT_TRUE(old.ok());
  auto refused = (*old)->Push(0, kRow, kGrad, 18);
  ASSERT_TRUE(refused.ok());
  Status r = (*old)->Wait(*refused, DeadlineIn(20'000));
  EXPECT_EQ(r.code(), StatusCode::kPermissionDenied) << r.ToString();
  EXPECT_NE(r.message().find("STALE_GENERATION"), std::string::npos) << r.ToString();

  second->Signal(SIGTERM);
  second->Wait(10'000);
}

// Without a committed checkpoint the next generation starts from the
// initializer: every update the lost process applied is gone.
TEST_F(PsRecoveryTest, WithoutACheckpointTheNextGenerationStartsFromTheInitializer) {
  auto first = StartShard(1);
  std::unique_ptr<PsClient> owned = Client();
  ASSERT_NE(owned, nullptr);
  PsClient* client = owned.get();
  for (int step = 0; step < 5; ++step) PushAcked(client, step);
  EXPECT_EQ(Stats(client)["updates_applied"], 5);

  first->Signal(SIGKILL);
  first->Wait(10'000);
  auto second = StartShard(2);
  // The first request after the loss waits for generation 2, then is served by it.
  EXPECT_FLOAT_EQ(RowValue(client), 0.0f);
  const nlohmann::json after = Stats(client);
  EXPECT_EQ(after["generation"], 2);
  EXPECT_EQ(after["updates_applied"], 0) << after.dump();
  EXPECT_NE(parallax::testing::ReadWholeFile(dir_.File("shard-g2.log")).find("no checkpoint"),
            std::string::npos);
  second->Signal(SIGTERM);
  second->Wait(10'000);
}

// A plan that moved a variable onto the PS since the checkpoint: the
// checkpoint holds it in dense.pxck (the workers' copy), with no partition
// files. A next generation loads it from there by itself (as every shard's
// LOAD does when the attempt resumes), with the checkpoint's step, and the
// rank's requests go on.
TEST_F(PsRecoveryTest, ANextGenerationTakesAVariableTheCheckpointHeldOnWorkersFromItsDenseFile) {
  checkpoint::DenseEntry held;
  held.id = 0;
  held.name = plan_.variables[0].name;
  held.values.resize(static_cast<size_t>(plan_.variables[0].rows) * kDim);
  for (size_t i = 0; i < held.values.size(); ++i) held.values[i] = 0.25f * static_cast<float>(i % 13);
  held.optimizer.steps = {12};
  const std::string ckpt = dir_.File("step-12");
  std::filesystem::create_directories(ckpt);
  ASSERT_TRUE(
      WriteFileDurably(ckpt + "/" + checkpoint::kDenseFile, checkpoint::EncodeDenseFile({held})).ok());
  CommitCheckpoint(12, ckpt);

  auto first = StartShard(1);
  std::unique_ptr<PsClient> owned = Client();
  ASSERT_NE(owned, nullptr);
  PsClient* client = owned.get();
  for (int step = 12; step < 15; ++step) PushAcked(client, step);
  first->Signal(SIGKILL);
  first->Wait(10'000);

  auto second = StartShard(2);
  const float row5 = held.values[5 * kDim];
  EXPECT_FLOAT_EQ(RowValue(client), row5) << "see " << dir_.path();
  EXPECT_EQ(Stats(client)["generation"], 2);
  const std::string log = parallax::testing::ReadWholeFile(dir_.File("shard-g2.log"));
  EXPECT_NE(log.find("held on workers"), std::string::npos) << log;
  PushAcked(client, 15);
  EXPECT_FLOAT_EQ(RowValue(client), row5 - kLr);
  second->Signal(SIGTERM);
  second->Wait(10'000);
}

// A batch (wire version 2) the lost process did not answer goes whole to
// the next generation, and every call in it completes from its one answer.
TEST_F(PsRecoveryTest, AnUnansweredBatchIsSentWholeToTheNextGeneration) {
  auto first = StartShard(1);
  std::unique_ptr<PsClient> owned = Client();
  ASSERT_NE(owned, nullptr);
  PsClient* client = owned.get();
  PushAcked(client, 0);
  ASSERT_TRUE(first->Stop(20'000)) << "generation 1 did not stop; see " << dir_.path();
  std::vector<float> rows;
  const std::vector<BatchCall> calls = {{BatchCall::Kind::kPush, 0, kRow, kGrad, nullptr},
                                        {BatchCall::Kind::kPushPull, 0, kRow, kGrad, &rows}};
  auto tickets = client->Batch(calls, 1);
  ASSERT_TRUE(tickets.ok()) << tickets.status().ToString();
  ASSERT_EQ(tickets->size(), 2u);
  first->Signal(SIGKILL);
  first->Wait(10'000);
  for (Ticket t : *tickets)
    EXPECT_EQ(client->Wait(t, DeadlineIn(0)).code(), StatusCode::kDeadlineExceeded);

  auto second = StartShard(2);
  for (Ticket t : *tickets) {
    Status s = client->Wait(t, DeadlineIn(20'000));
    ASSERT_TRUE(s.ok()) << s.ToString() << "; see " << dir_.path();
  }
  // No checkpoint: the next generation starts from zeros and applies the
  // batch's two pushes, in order; the push-pull answers the row after both.
  ASSERT_EQ(rows.size(), kDim);
  EXPECT_FLOAT_EQ(rows[0], -kLr * 2);
  const nlohmann::json after = Stats(client);
  EXPECT_EQ(after["generation"], 2);
  EXPECT_EQ(after["updates_applied"], 2) << after.dump();
  EXPECT_EQ(after["batches"], 1) << after.dump();
  EXPECT_EQ(after["requests"], 1) << after.dump();  // the batch, sent once to generation 2
  EXPECT_FLOAT_EQ(RowValue(client), -kLr * 2);
  second->Signal(SIGTERM);
  second->Wait(10'000);
}

}  // namespace
}  // namespace parallax::ps
