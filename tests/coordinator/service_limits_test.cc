// The coordinator's limits (security): active jobs, key-value
// entries and value sizes, and authentication of every call, through the
// real Thrift client against the service on an ephemeral port.
#include <gtest/gtest.h>

#include "coordinator/service/server.h"
#include "coordinator/service/service.h"
#include "coordinator/store/sqlite_state_store.h"
#include "core/rpc/coordinator_client.h"
#include "tests/testing/temp_dir.h"

namespace parallax::coordinator {
namespace {

constexpr char kJob[] = "[job]\nname = \"limits\"\nworkers = 1\n[trainer]\nmodel = \"lm\"\n";

class ServiceLimitsTest : public ::testing::Test {
 protected:
  void Start(ServiceOptions options) {
    SqliteStateStoreOptions so;
    so.path = dir_.File("state.db");
    auto store = OpenSqliteStateStore(so);
    ASSERT_TRUE(store.ok()) << store.status().ToString();
    store_ = std::move(store).value();
    service_ = std::make_shared<CoordinatorService>(store_.get(), &clock_, options);
    ASSERT_TRUE(service_->Init().ok());
    auto server = StartServer(ServerOptions{}, service_);
    ASSERT_TRUE(server.ok()) << server.status().ToString();
    server_ = std::move(server).value();
    client_ = Connect(options.auth_token);
    ASSERT_NE(client_, nullptr);
  }
  void TearDown() override {
    if (service_) service_->Stop();
    if (server_) server_->Stop();
  }
  std::unique_ptr<CoordinatorClient> Connect(const std::string& token) {
    CoordinatorClientOptions o;
    o.address = "127.0.0.1:" + std::to_string(server_->port());
    o.auth_token = token;
    auto c = CoordinatorClient::Connect(o);
    return c.ok() ? std::move(c).value() : nullptr;
  }

  testing::TempDir dir_;
  FakeClock clock_;
  std::unique_ptr<StateStore> store_;
  std::shared_ptr<CoordinatorService> service_;
  std::unique_ptr<Server> server_;
  std::unique_ptr<CoordinatorClient> client_;
};

TEST_F(ServiceLimitsTest, KeyValueEntriesPerJobAreCappedAndReplacementsStillWork) {
  ServiceOptions o;
  o.max_kv_entries_per_job = 3;
  Start(o);
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(client_->KvSet("job/7/1/k" + std::to_string(i), "v").ok());
  }
  Status s = client_->KvSet("job/7/1/k3", "v");
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("--max-kv-entries-per-job"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("job/7/"), std::string::npos) << s.message();
  EXPECT_TRUE(client_->KvSet("job/7/1/k0", "replaced").ok());  // not a new key
  EXPECT_TRUE(client_->KvSet("job/8/1/k0", "v").ok());         // another job
  auto v = client_->KvGet({"job/7/1/k0"}, 0);
  ASSERT_TRUE(v.ok());
  EXPECT_EQ((*v)[0], "replaced");
}

TEST_F(ServiceLimitsTest, GlobalKeyValueEntriesAndValueSizeAreCapped) {
  ServiceOptions o;
  o.max_kv_global_entries = 2;
  o.max_kv_value_bytes = 16;
  Start(o);
  ASSERT_TRUE(client_->KvSet("a", "1").ok());
  ASSERT_TRUE(client_->KvSet("b", "1").ok());
  ASSERT_TRUE(client_->KvSet("job/1/1/b", "1").ok());  // a job's key: not global
  ASSERT_TRUE(client_->Call([&](rpc::CoordinatorClient& c) {
                rpc::KvAddRequest add;
                add.key = "job/1/1/counter";
                add.delta = 1;
                c.KvAdd(client_->Header(), add);
              }).ok());
  Status s = client_->KvSet("c", "1");
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("--max-kv-global-entries"), std::string::npos) << s.message();
  EXPECT_TRUE(client_->KvSet("job/1/1/c", "1").ok());
  s = client_->KvSet("a", std::string(17, 'x'));
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("--max-kv-value-bytes"), std::string::npos) << s.message();
  EXPECT_TRUE(client_->KvSet("a", std::string(16, 'x')).ok());
  // A restarted coordinator counts the stored keys again.
  client_.reset();
  service_->Stop();
  server_->Stop();
  Start(o);
  s = client_->KvSet("d", "1");
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("--max-kv-global-entries"), std::string::npos) << s.message();
}

TEST_F(ServiceLimitsTest, ActiveJobsAreCappedAndAFinishedJobMakesRoom) {
  ServiceOptions o;
  o.max_active_jobs = 2;
  Start(o);
  auto a = client_->SubmitJob(kJob, "a.toml");
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  ASSERT_TRUE(client_->SubmitJob(kJob, "b.toml").ok());
  auto c = client_->SubmitJob(kJob, "c.toml");
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("--max-active-jobs"), std::string::npos)
      << c.status().message();
  auto jobs = client_->ListJobs();
  ASSERT_TRUE(jobs.ok());
  EXPECT_EQ(jobs->size(), 2u);
  ASSERT_TRUE(client_->Call([&](rpc::CoordinatorClient& rc) {
                rpc::JobInfo out;
                rc.CancelJob(out, client_->Header(), a->id, "test");
              }).ok());
  EXPECT_TRUE(client_->SubmitJob(kJob, "d.toml").ok());
  // Resuming the cancelled job would make three.
  Status r = client_->Call([&](rpc::CoordinatorClient& rc) {
    rpc::JobInfo out;
    rc.ResumeJob(out, client_->Header(), a->id, {});
  });
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.message().find("--max-active-jobs"), std::string::npos) << r.message();
}

TEST_F(ServiceLimitsTest, EveryCallWithAWrongSecretIsRefusedAndChangesNothing) {
  ServiceOptions o;
  o.auth_token = "right";
  Start(o);
  // Past Hello, every call with a wrong secret in its header is refused.
  auto bad = Connect("right");
  ASSERT_NE(bad, nullptr);
  rpc::RequestHeader h = bad->Header();
  h.auth_token = "wrong";
  auto refused = [&](const std::function<void(rpc::CoordinatorClient&)>& call) {
    Status s = bad->Call(call);
    return !s.ok() && s.code() == StatusCode::kPermissionDenied &&
           s.message().find("authentication failed") != std::string::npos &&
           s.message().find("wrong") == std::string::npos;
  };
  rpc::SubmitJobRequest submit;
  submit.job_text = kJob;
  EXPECT_TRUE(refused([&](rpc::CoordinatorClient& c) {
    rpc::JobInfo out;
    c.SubmitJob(out, h, submit);
  }));
  rpc::KvSetRequest kv;
  kv.key = "job/1/1/x";
  kv.value = "v";
  EXPECT_TRUE(refused([&](rpc::CoordinatorClient& c) { c.KvSet(h, kv); }));
  rpc::AgentInfo agent;
  agent.name = "intruder";
  agent.address = "127.0.0.1:1";
  EXPECT_TRUE(refused([&](rpc::CoordinatorClient& c) { c.RegisterAgent(h, agent); }));
  rpc::PollRequest poll;
  poll.agent_name = "intruder";
  EXPECT_TRUE(refused([&](rpc::CoordinatorClient& c) {
    rpc::PollResponse out;
    c.PollAssignments(out, h, poll);
  }));
  EXPECT_TRUE(refused([&](rpc::CoordinatorClient& c) {
    std::vector<rpc::JobInfo> out;
    c.ListJobs(out, h, rpc::ListJobsRequest());
  }));
  auto jobs = client_->ListJobs();
  ASSERT_TRUE(jobs.ok());
  EXPECT_TRUE(jobs->empty());
  auto agents = client_->ListAgents();
  ASSERT_TRUE(agents.ok());
  EXPECT_TRUE(agents->empty());
  EXPECT_FALSE(client_->KvGet({"job/1/1/x"}, 0).ok());
}

}  // namespace
}  // namespace parallax::coordinator
