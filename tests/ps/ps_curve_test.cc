// CURVE on the PS data plane with real processes: parallax-coordinator with a
// secret file, parallax-ps started as an agent would start it (with
// PARALLAX_TOKEN, so CURVE is on). A plain ZeroMQ client and a CURVE client
// whose key was never published get nothing; the real client works.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <zmq.hpp>

#include "core/ps/client.h"
#include "core/ps/curve.h"
#include "core/ps/discovery.h"
#include "schemas/ps_wire.h"
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

constexpr char kJob[] = "[job]\nname = \"ps-curve\"\nworkers = 1\n[trainer]\nmodel = \"lm\"\n";
constexpr char kSecret[] = "ps-curve-test-secret";
constexpr int64_t kNothingMs = 1'500;  // how long "gets nothing" is watched

class PsCurveTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string secret_file = dir_.File("secret");
    std::ofstream(secret_file) << kSecret << "\n";
    chmod(secret_file.c_str(), 0600);
    parallax::testing::CoordinatorProcessOptions options;
    options.extra_args = {"--secret-file", secret_file};
    coordinator_ =
        std::make_unique<parallax::testing::CoordinatorProcess>(BinDir(), dir_.path(), options);
    ASSERT_TRUE(coordinator_->ok()) << coordinator_->error();
    port_ = coordinator_->port_text();
    CoordinatorClientOptions copts;
    copts.auth_token = kSecret;
    auto coord = parallax::testing::ConnectToCoordinator(*coordinator_, copts);
    ASSERT_TRUE(coord.ok()) << coord.status().ToString();
    coord_ = std::move(coord).value();
    plan_ = OneShardAsyncPlan(4);
    auto job = SubmitJobWithPsPlan(coord_.get(), kJob, dir_.File("job.toml"), plan_);
    ASSERT_TRUE(job.ok()) << job.status().ToString();
    job_id_ = job->job_id;
    attempt_ = job->attempt;
    shard_ = std::make_unique<parallax::testing::ChildProcess>(
        std::vector<std::string>{BinDir() + "/parallax-ps"}, dir_.File("shard.log"),
        std::vector<std::string>{
            "PARALLAX_JOB_ID=" + std::to_string(job_id_),
            "PARALLAX_ATTEMPT=" + std::to_string(attempt_), "PARALLAX_SHARD=0",
            "PARALLAX_COORDINATOR=127.0.0.1:" + port_, "PARALLAX_BIND_ADDR=127.0.0.1",
            std::string("PARALLAX_TOKEN=") + kSecret});
    auto endpoints = ResolveShardEndpoints(coord_.get(), job_id_, attempt_, 1, 20'000);
    ASSERT_TRUE(endpoints.ok()) << endpoints.status().ToString();
    endpoints_ = *endpoints;
    auto keys = ResolveShardCurveKeys(coord_.get(), job_id_, attempt_, 1, 1'000);
    ASSERT_TRUE(keys.ok()) << "the shard published no CURVE key: " << keys.status().ToString();
    shard_keys_ = *keys;
    ASSERT_EQ(shard_keys_[0].size(), 40u);
  }

  void TearDown() override {
    if (shard_) {
      shard_->Signal(SIGTERM);
      int status = shard_->Wait(10'000);
      EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
    }
  }

  std::unique_ptr<PsClient> Client(const std::vector<std::string>& shard_keys,
                                   const CurveKeyPair& keys) {
    PsClientOptions o;
    o.plan = plan_;
    o.shard_endpoints = endpoints_;
    o.attempt = static_cast<uint32_t>(attempt_);
    o.shard_curve_keys = shard_keys;
    o.curve_keys = keys;
    auto client = PsClient::Create(o);
    EXPECT_TRUE(client.ok()) << client.status().ToString();
    return client.ok() ? std::move(client).value() : nullptr;
  }

  // A push+pull of row 3; the client's Wait result.
  Status PushPull(PsClient* client, int64_t wait_ms, std::vector<float>* rows) {
    std::vector<int64_t> ids = {3};
    std::vector<float> g = {1, 2, 3, 4};
    auto t = client->PushPull(0, ids, g, 0, rows);
    if (!t.ok()) return t.status();
    return client->Wait(*t, DeadlineIn(wait_ms));
  }

  parallax::testing::TempDir dir_;
  std::unique_ptr<parallax::testing::CoordinatorProcess> coordinator_;
  std::unique_ptr<parallax::testing::ChildProcess> shard_;
  std::unique_ptr<CoordinatorClient> coord_;
  std::string port_;
  int64_t job_id_ = 0;
  int32_t attempt_ = 0;
  PsPlan plan_;
  std::vector<std::string> endpoints_;
  std::vector<std::string> shard_keys_;
};

TEST_F(PsCurveTest, APlainZeroMqClientGetsNothing) {
  // The PS client without CURVE.
  auto plain = Client({}, {});
  ASSERT_NE(plain, nullptr);
  std::vector<float> rows;
  EXPECT_EQ(PushPull(plain.get(), kNothingMs, &rows).code(), StatusCode::kDeadlineExceeded);
  // A bare DEALER sending a well-formed Stats request.
  zmq::context_t ctx;
  zmq::socket_t dealer(ctx, zmq::socket_type::dealer);
  dealer.set(zmq::sockopt::linger, 0);
  dealer.connect(endpoints_[0]);
  // (Even a malformed request gets an error reply from a shard that let it in.)
  ps_wire::Header h;
  h.op = static_cast<uint8_t>(ps_wire::Op::kStats);
  dealer.send(zmq::buffer(&h, sizeof(h)), zmq::send_flags::sndmore);
  dealer.send(zmq::str_buffer(""), zmq::send_flags::sndmore);
  dealer.send(zmq::str_buffer(""), zmq::send_flags::none);
  zmq::pollitem_t item{dealer.handle(), 0, ZMQ_POLLIN, 0};
  EXPECT_EQ(zmq::poll(&item, 1, std::chrono::milliseconds(kNothingMs)), 0) << "the shard replied";
}

TEST_F(PsCurveTest, ACurveClientWithAnUnpublishedOrWrongKeyGetsNothing) {
  auto keys = NewCurveKeyPair();
  ASSERT_TRUE(keys.ok()) << keys.status().ToString();
  auto stranger = Client(shard_keys_, *keys);  // never published
  std::vector<float> rows;
  EXPECT_EQ(PushPull(stranger.get(), kNothingMs, &rows).code(), StatusCode::kDeadlineExceeded);
  // A published client key, but the wrong key for the shard.
  ASSERT_TRUE(PublishClientCurveKey(coord_.get(), job_id_, attempt_, keys->public_key, "test").ok());
  auto impostor = NewCurveKeyPair();
  ASSERT_TRUE(impostor.ok());
  auto wrong_server = Client({impostor->public_key}, *keys);
  EXPECT_EQ(PushPull(wrong_server.get(), kNothingMs, &rows).code(),
            StatusCode::kDeadlineExceeded);
  std::ifstream log(dir_.File("shard.log"));
  std::string text((std::istreambuf_iterator<char>(log)), std::istreambuf_iterator<char>());
  EXPECT_NE(text.find("refused a connection"), std::string::npos) << text;
}

TEST_F(PsCurveTest, APublishedClientKeyWorks) {
  auto keys = NewCurveKeyPair();
  ASSERT_TRUE(keys.ok());
  ASSERT_TRUE(PublishClientCurveKey(coord_.get(), job_id_, attempt_, keys->public_key, "rank 0").ok());
  auto client = Client(shard_keys_, *keys);
  std::vector<float> rows;
  Status s = PushPull(client.get(), 20'000, &rows);
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_FLOAT_EQ(rows[3], -0.04f);  // default SGD lr 0.01
  // The key is remembered: a second client with it connects too.
  auto again = Client(shard_keys_, *keys);
  EXPECT_TRUE(PushPull(again.get(), 20'000, &rows).ok());
}

}  // namespace
}  // namespace parallax::ps
