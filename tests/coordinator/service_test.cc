// The coordinator service, served in-process on an ephemeral port over a
// real SQLite file, driven through the real Thrift client.
#include "coordinator/service/service.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <future>
#include <thread>

#include "coordinator/service/server.h"
#include "coordinator/store/sqlite_state_store.h"
#include "core/rpc/coordinator_client.h"
#include "tests/coordinator/fault_injection_state_store.h"
#include "tests/testing/temp_dir.h"

namespace parallax::coordinator {
namespace {

constexpr char kJob[] = R"(
[job]
name = "svc-test"
workers = 2

[trainer]
model = "lm"
)";

class CoordinatorServiceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    SqliteStateStoreOptions options;
    options.path = dir_.File("state.db");
    auto store = OpenSqliteStateStore(options);
    ASSERT_TRUE(store.ok()) << store.status().ToString();
    sqlite_ = std::move(store).value();
    faulty_ = std::make_unique<FaultInjectionStateStore>(sqlite_.get());
  }

  void TearDown() override { StopServer(); }

  void StartService(ServiceOptions options = {}) {
    service_ = std::make_shared<CoordinatorService>(faulty_.get(), &clock_, options);
    ASSERT_TRUE(service_->Init().ok());
    auto server = StartServer(ServerOptions{}, service_);
    ASSERT_TRUE(server.ok()) << server.status().ToString();
    server_ = std::move(server).value();
  }

  void StopServer() {
    if (service_) service_->Stop();
    if (server_) server_->Stop();
  }

  std::string Address() const { return "127.0.0.1:" + std::to_string(server_->port()); }

  std::unique_ptr<CoordinatorClient> Connect(const std::string& token = "") {
    CoordinatorClientOptions options;
    options.address = Address();
    options.auth_token = token;
    options.client_name = "test";
    auto client = CoordinatorClient::Connect(options);
    EXPECT_TRUE(client.ok()) << client.status().ToString();
    return client.ok() ? std::move(client).value() : nullptr;
  }

  rpc::AgentInfo Agent(const std::string& name) {
    rpc::AgentInfo a;
    a.name = name;
    a.address = "127.0.0.1:9000";
    a.slots = 2;
    a.gpus = 0;
    return a;
  }

  testing::TempDir dir_;
  FakeClock clock_;
  std::unique_ptr<StateStore> sqlite_;
  std::unique_ptr<FaultInjectionStateStore> faulty_;
  std::shared_ptr<CoordinatorService> service_;
  std::unique_ptr<Server> server_;
};

TEST_F(CoordinatorServiceTest, HelloReportsProtocolVersion) {
  StartService();
  auto client = Connect();
  ASSERT_NE(client, nullptr);
  EXPECT_EQ(client->hello().protocol_version, 1);
  EXPECT_EQ(client->hello().server_time, clock_.NowMillis());
}

TEST_F(CoordinatorServiceTest, VersionMismatchIsRefusedWithBothVersions) {
  StartService();
  CoordinatorClientOptions options;
  options.address = Address();
  options.protocol_version = 99;
  auto client = CoordinatorClient::Connect(options);
  ASSERT_FALSE(client.ok());
  EXPECT_EQ(client.status().code(), StatusCode::kPermissionDenied);
  EXPECT_NE(client.status().message().find("client speaks version 99"), std::string::npos)
      << client.status().message();
  EXPECT_NE(client.status().message().find("coordinator speaks version 1"), std::string::npos);
}

TEST_F(CoordinatorServiceTest, WrongTokenIsRefused) {
  ServiceOptions options;
  options.auth_token = "s3cret";
  StartService(options);
  CoordinatorClientOptions copts;
  copts.address = Address();
  copts.auth_token = "guess";
  auto bad = CoordinatorClient::Connect(copts);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), StatusCode::kPermissionDenied);
  EXPECT_NE(bad.status().message().find("authentication failed"), std::string::npos);
  auto good = Connect("s3cret");
  ASSERT_NE(good, nullptr);
  EXPECT_TRUE(good->ListJobs().ok());
}

TEST_F(CoordinatorServiceTest, SubmitStoresJobPendingWithEvent) {
  StartService();
  auto client = Connect();
  auto job = client->SubmitJob(kJob, "/jobs/svc.toml");
  ASSERT_TRUE(job.ok()) << job.status().ToString();
  EXPECT_GT(job->id, 0);
  EXPECT_EQ(job->name, "svc-test");
  EXPECT_EQ(job->workers, 2);
  EXPECT_EQ(job->state, rpc::JobState::PENDING);
  EXPECT_EQ(job->created, clock_.NowMillis());

  auto got = client->GetJob(job->id);
  ASSERT_TRUE(got.ok());
  EXPECT_EQ(got->job_text, kJob);
  EXPECT_EQ(got->job_path, "/jobs/svc.toml");
  EXPECT_EQ(got->submitted_by, "test");

  auto events = client->GetEvents(job->id, 0, 0);
  ASSERT_TRUE(events.ok());
  ASSERT_EQ(events->size(), 1u);
  EXPECT_EQ(events->front().kind, "submitted");
}

TEST_F(CoordinatorServiceTest, InvalidJobIsRefusedAndNothingIsStored) {
  StartService();
  auto client = Connect();
  auto job = client->SubmitJob("[job]\nname = \"x\"\nworkers = 0\n[trainer]\nmodel = \"lm\"\n",
                               "bad.toml");
  ASSERT_FALSE(job.ok());
  EXPECT_EQ(job.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(job.status().message().find("bad.toml:3:"), std::string::npos)
      << job.status().message();
  EXPECT_NE(job.status().message().find("job.workers"), std::string::npos);
  auto jobs = client->ListJobs();
  ASSERT_TRUE(jobs.ok());
  EXPECT_TRUE(jobs->empty());
}

TEST_F(CoordinatorServiceTest, OversizedJobIsRefused) {
  ServiceOptions options;
  options.max_job_text_bytes = 64;
  StartService(options);
  auto client = Connect();
  auto job = client->SubmitJob(std::string(kJob) + std::string(100, '#'), "");
  ASSERT_FALSE(job.ok());
  EXPECT_EQ(job.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(job.status().message().find("limit"), std::string::npos);
}

TEST_F(CoordinatorServiceTest, UnknownJobIsNotFound) {
  StartService();
  auto client = Connect();
  EXPECT_EQ(client->GetJob(42).status().code(), StatusCode::kNotFound);
  EXPECT_EQ(client->CancelJob(42, "").status().code(), StatusCode::kNotFound);
  EXPECT_EQ(client->GetEvents(42, 0, 0).status().code(), StatusCode::kNotFound);
  EXPECT_EQ(client->GetJob(-1).status().code(), StatusCode::kInvalidArgument);
}

TEST_F(CoordinatorServiceTest, CancelIsRecordedAndOnlyOnce) {
  StartService();
  auto client = Connect();
  auto job = client->SubmitJob(kJob, "");
  ASSERT_TRUE(job.ok());
  clock_.Advance(5000);
  auto cancelled = client->CancelJob(job->id, "");
  ASSERT_TRUE(cancelled.ok()) << cancelled.status().ToString();
  EXPECT_EQ(cancelled->state, rpc::JobState::CANCELLED);
  EXPECT_EQ(cancelled->updated, job->created + 5000);
  EXPECT_EQ(cancelled->reason, "cancelled by test");

  auto again = client->CancelJob(job->id, "");
  ASSERT_FALSE(again.ok());
  EXPECT_EQ(again.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(again.status().message().find("already CANCELLED"), std::string::npos)
      << again.status().message();

  auto events = client->GetEvents(job->id, 0, 0);
  ASSERT_TRUE(events.ok());
  ASSERT_EQ(events->size(), 2u);
  EXPECT_EQ(events->back().kind, "state");
}

// `parallax replan` of a job that is not running, or that writes no
// checkpoint to re-plan at, is refused by name and records nothing.
TEST_F(CoordinatorServiceTest, ReplanOnlyOfARunningJobThatCheckpoints) {
  StartService();
  auto client = Connect();
  EXPECT_EQ(client->ReplanJob(42, "").status().code(), StatusCode::kNotFound);
  EXPECT_EQ(client->ReplanJob(0, "").status().code(), StatusCode::kInvalidArgument);
  auto job = client->SubmitJob(kJob, "");
  ASSERT_TRUE(job.ok()) << job.status().ToString();
  auto pending = client->ReplanJob(job->id, "new hardware");
  ASSERT_FALSE(pending.ok());
  EXPECT_EQ(pending.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(pending.status().message().find("is PENDING; only a RUNNING job re-plans"),
            std::string::npos)
      << pending.status().message();
  auto events = client->GetEvents(job->id, 0, 0);
  ASSERT_TRUE(events.ok());
  for (const rpc::Event& e : *events) EXPECT_NE(e.kind, "replan") << e.message;
}

TEST_F(CoordinatorServiceTest, ListJobsFiltersByState) {
  StartService();
  auto client = Connect();
  auto a = client->SubmitJob(kJob, "");
  auto b = client->SubmitJob(kJob, "");
  ASSERT_TRUE(a.ok() && b.ok());
  ASSERT_TRUE(client->CancelJob(a->id, "no").ok());
  rpc::ListJobsRequest request;
  request.__set_states({rpc::JobState::PENDING});
  auto pending = client->ListJobs(request);
  ASSERT_TRUE(pending.ok());
  ASSERT_EQ(pending->size(), 1u);
  EXPECT_EQ(pending->front().id, b->id);
}

TEST_F(CoordinatorServiceTest, HeartbeatKeepsAgentAliveAndIsFlushedInBatches) {
  StartService();
  auto client = Connect();
  auto unknown = client->Heartbeat("ghost");
  ASSERT_TRUE(unknown.ok());
  EXPECT_FALSE(unknown->known);

  ASSERT_TRUE(client->RegisterAgent(Agent("host-a")).ok());
  int64_t registered = clock_.NowMillis();
  clock_.Advance(3000);
  auto hb = client->Heartbeat("host-a");
  ASSERT_TRUE(hb.ok());
  EXPECT_TRUE(hb->known);

  auto agents = client->ListAgents();
  ASSERT_TRUE(agents.ok());
  ASSERT_EQ(agents->size(), 1u);
  EXPECT_TRUE(agents->front().alive);
  EXPECT_EQ(agents->front().last_seen, registered + 3000);
  EXPECT_EQ(agents->front().registered, registered);

  // Not yet in the database: heartbeats do not write on the caller's path.
  auto stored = sqlite_->ListAgents();
  ASSERT_TRUE(stored.ok());
  EXPECT_EQ(stored->front().last_seen, registered);
  int writes_before = faulty_->writes_seen();
  ASSERT_TRUE(service_->FlushHeartbeats().ok());
  EXPECT_EQ(faulty_->writes_seen(), writes_before + 1);
  stored = sqlite_->ListAgents();
  EXPECT_EQ(stored->front().last_seen, registered + 3000);

  clock_.Advance(11'000);  // past the default 10 s timeout
  agents = client->ListAgents();
  EXPECT_FALSE(agents->front().alive);
}

TEST_F(CoordinatorServiceTest, RestartedServiceAsksAgentsToRegisterAgainAndKeepsThem) {
  StartService();
  ASSERT_TRUE(Connect()->RegisterAgent(Agent("host-b")).ok());
  int64_t registered = clock_.NowMillis();
  StopServer();
  service_.reset();
  server_.reset();
  clock_.Advance(1000);
  StartService();
  auto client = Connect();
  // Still listed from the database...
  auto agents = client->ListAgents();
  ASSERT_TRUE(agents.ok());
  ASSERT_EQ(agents->size(), 1u);
  // ...but the new coordinator process wants it to register again (and say
  // what it runs) before it trusts it with tasks.
  auto hb = client->Heartbeat("host-b");
  ASSERT_TRUE(hb.ok());
  EXPECT_FALSE(hb->known);
  ASSERT_TRUE(client->RegisterAgent(Agent("host-b")).ok());
  EXPECT_TRUE(client->Heartbeat("host-b")->known);
  EXPECT_EQ(client->ListAgents()->front().registered, registered);
}

TEST_F(CoordinatorServiceTest, RegisterAgentValidatesFields) {
  StartService();
  auto client = Connect();
  rpc::AgentInfo a = Agent("");
  EXPECT_EQ(client->RegisterAgent(a).code(), StatusCode::kInvalidArgument);
  a = Agent("x");
  a.slots = -1;
  EXPECT_EQ(client->RegisterAgent(a).code(), StatusCode::kInvalidArgument);
  a = Agent("x");
  a.address = "";
  EXPECT_EQ(client->RegisterAgent(a).code(), StatusCode::kInvalidArgument);
}

TEST_F(CoordinatorServiceTest, KvGetWaitsUntilEveryKeyIsSet) {
  StartService();
  auto waiter = Connect();
  auto setter = Connect();
  ASSERT_TRUE(setter->KvSet("job/1/1/comm/0", "addr0").ok());
  std::promise<void> started;
  auto result = std::async(std::launch::async, [&] {
    started.set_value();
    return waiter->KvGet({"job/1/1/comm/0", "job/1/1/comm/1"}, 10'000);
  });
  started.get_future().wait();
  // The second key appears later; the waiting call returns both values.
  ASSERT_TRUE(setter->KvSet("job/1/1/comm/1", std::string("\0bin", 4)).ok());
  auto values = result.get();
  ASSERT_TRUE(values.ok()) << values.status().ToString();
  ASSERT_EQ(values->size(), 2u);
  EXPECT_EQ((*values)[0], "addr0");
  EXPECT_EQ((*values)[1], std::string("\0bin", 4));
}

TEST_F(CoordinatorServiceTest, KvGetDeadlineNamesMissingKeys) {
  StartService();
  auto client = Connect();
  ASSERT_TRUE(client->KvSet("present", "1").ok());
  auto values = client->KvGet({"present", "absent"}, 50);
  ASSERT_FALSE(values.ok());
  EXPECT_EQ(values.status().code(), StatusCode::kDeadlineExceeded);
  EXPECT_NE(values.status().message().find("\"absent\""), std::string::npos);
  EXPECT_EQ(values.status().message().find("\"present\""), std::string::npos);
  // The connection is still usable after a deadline.
  EXPECT_TRUE(client->KvSet("after", "ok").ok());
}

TEST_F(CoordinatorServiceTest, KvAddIsAtomicAcrossClients) {
  StartService();
  constexpr int kClients = 4, kAdds = 25;
  std::vector<std::thread> threads;
  for (int c = 0; c < kClients; ++c) {
    threads.emplace_back([&] {
      auto client = Connect();
      for (int i = 0; i < kAdds; ++i) {
        rpc::KvAddRequest r;
        r.key = "counter";
        r.delta = 1;
        int64_t v = 0;
        ASSERT_TRUE(client->Call([&](rpc::CoordinatorClient& s) { v = s.KvAdd(client->Header(), r); }).ok());
      }
    });
  }
  for (auto& t : threads) t.join();
  auto value = Connect()->KvGet({"counter"}, 0);
  ASSERT_TRUE(value.ok());
  EXPECT_EQ(value->front(), std::to_string(kClients * kAdds));
}

TEST_F(CoordinatorServiceTest, BlockedCallsDoNotStarveHeartbeats) {
  StartService();
  ASSERT_TRUE(Connect()->RegisterAgent(Agent("busy-host")).ok());
  constexpr int kWaiters = 16;
  std::vector<std::future<StatusOr<std::vector<std::string>>>> waiters;
  std::vector<std::unique_ptr<CoordinatorClient>> clients;
  for (int i = 0; i < kWaiters; ++i) clients.push_back(Connect());
  for (int i = 0; i < kWaiters; ++i) {
    waiters.push_back(std::async(std::launch::async, [&, i] {
      return clients[i]->KvGet({"release"}, 60'000);
    }));
  }
  auto agent = Connect();
  for (int i = 0; i < 100; ++i) {
    auto hb = agent->Heartbeat("busy-host");
    ASSERT_TRUE(hb.ok()) << hb.status().ToString();
    ASSERT_TRUE(hb->known);
  }
  // All 100 heartbeats were answered while every waiter was still blocked.
  for (auto& w : waiters) {
    EXPECT_EQ(w.wait_for(std::chrono::seconds(0)), std::future_status::timeout);
  }
  ASSERT_TRUE(agent->KvSet("release", "go").ok());
  for (auto& w : waiters) {
    auto v = w.get();
    ASSERT_TRUE(v.ok()) << v.status().ToString();
    EXPECT_EQ(v->front(), "go");
  }
}

TEST_F(CoordinatorServiceTest, GetPlanWaitsForPutPlan) {
  StartService();
  auto client = Connect();
  auto job = client->SubmitJob(kJob, "");
  ASSERT_TRUE(job.ok());
  std::string plan;
  Status missing = client->Call(
      [&](rpc::CoordinatorClient& c) { c.GetPlan(plan, client->Header(), job->id, 1, 20); }, 20);
  EXPECT_EQ(missing.code(), StatusCode::kDeadlineExceeded);

  auto waiter = Connect();
  auto got = std::async(std::launch::async, [&] {
    std::string out;
    Status s = waiter->Call(
        [&](rpc::CoordinatorClient& c) { c.GetPlan(out, waiter->Header(), job->id, 1, 10'000); },
        10'000);
    return std::make_pair(s, out);
  });
  rpc::PutPlanRequest put;
  put.job_id = job->id;
  put.attempt = 1;
  put.plan_json = R"({"variables":[]})";
  ASSERT_TRUE(client->Call([&](rpc::CoordinatorClient& c) { c.PutPlan(client->Header(), put); }).ok());
  auto [status, text] = got.get();
  ASSERT_TRUE(status.ok()) << status.ToString();
  EXPECT_EQ(text, put.plan_json);
}

TEST_F(CoordinatorServiceTest, MetricsRaiseJobStep) {
  StartService();
  auto client = Connect();
  auto job = client->SubmitJob(kJob, "");
  ASSERT_TRUE(job.ok());
  std::vector<rpc::MetricPoint> points(2);
  for (int r = 0; r < 2; ++r) {
    points[r].job_id = job->id;
    points[r].attempt = 1;
    points[r].rank = r;
    points[r].step = 10 + r;
    points[r].loss = 2.5;
    points[r].throughput = 1000;
  }
  points[1].__set_values({{"ps_push_sent_bytes", 1234.5}, {"compute_ms", 0.25}});
  ASSERT_TRUE(client->Call([&](rpc::CoordinatorClient& c) { c.ReportMetrics(client->Header(), points); }).ok());
  EXPECT_EQ(client->GetJob(job->id)->step, 11);
  std::vector<rpc::MetricPoint> got;
  rpc::GetMetricsRequest req;
  req.job_id = job->id;
  ASSERT_TRUE(client->Call([&](rpc::CoordinatorClient& c) { c.GetMetrics(got, client->Header(), req); }).ok());
  ASSERT_EQ(got.size(), 2u);
  // Named values (bytes per path, step-time breakdown) come back as sent.
  EXPECT_FALSE(got[0].__isset.values);
  ASSERT_TRUE(got[1].__isset.values);
  EXPECT_EQ(got[1].values, points[1].values);

  points[0].job_id = 999;
  Status bad = client->Call([&](rpc::CoordinatorClient& c) { c.ReportMetrics(client->Header(), points); });
  EXPECT_EQ(bad.code(), StatusCode::kNotFound);
}

TEST_F(CoordinatorServiceTest, CheckpointsAreListedNewestFirst) {
  StartService();
  auto client = Connect();
  auto job = client->SubmitJob(kJob, "");
  ASSERT_TRUE(job.ok());
  for (int64_t step : {100, 200}) {
    rpc::CheckpointInfo c;
    c.job_id = job->id;
    c.attempt = 1;
    c.step = step;
    c.path = "/ckpt/" + std::to_string(step);
    c.manifest_sha256 = "abc";
    ASSERT_TRUE(client->Call([&](rpc::CoordinatorClient& s) { s.CommitCheckpoint(client->Header(), c); }).ok());
  }
  std::vector<rpc::CheckpointInfo> list;
  ASSERT_TRUE(client->Call([&](rpc::CoordinatorClient& s) { s.ListCheckpoints(list, client->Header(), job->id); }).ok());
  ASSERT_EQ(list.size(), 2u);
  EXPECT_EQ(list[0].step, 200);
}

// A retried CommitCheckpoint (its first reply lost) reaches the service
// twice: both calls succeed and the job has one checkpoint and one event.
TEST_F(CoordinatorServiceTest, CommitCheckpointTwiceRecordsOneCheckpoint) {
  StartService();
  auto client = Connect();
  auto job = client->SubmitJob(kJob, "");
  ASSERT_TRUE(job.ok());
  rpc::CheckpointInfo c;
  c.job_id = job->id;
  c.attempt = 1;
  c.step = 100;
  c.path = "/ckpt/100";
  c.manifest_sha256 = "abc";
  Status first = client->CommitCheckpoint(c);
  ASSERT_TRUE(first.ok()) << first.ToString();
  Status second = client->CommitCheckpoint(c);
  EXPECT_TRUE(second.ok()) << second.ToString();
  c.step = 200;
  c.path = "/ckpt/200";
  ASSERT_TRUE(client->CommitCheckpoint(c).ok());

  std::vector<rpc::CheckpointInfo> list;
  ASSERT_TRUE(client->Call([&](rpc::CoordinatorClient& s) { s.ListCheckpoints(list, client->Header(), job->id); }).ok());
  ASSERT_EQ(list.size(), 2u);
  EXPECT_EQ(list[0].step, 200);
  EXPECT_EQ(list[1].step, 100);
  auto events = client->GetEvents(job->id, 0, 0);
  ASSERT_TRUE(events.ok()) << events.status().ToString();
  std::vector<std::string> checkpointed;
  for (const rpc::Event& e : *events) {
    if (e.kind == "checkpoint") checkpointed.push_back(e.message);
  }
  ASSERT_EQ(checkpointed.size(), 2u);
  EXPECT_NE(checkpointed[0].find("/ckpt/100"), std::string::npos) << checkpointed[0];
  EXPECT_NE(checkpointed[1].find("/ckpt/200"), std::string::npos) << checkpointed[1];
}

TEST_F(CoordinatorServiceTest, FailedWriteIsReportedAndServiceKeepsServing) {
  StartService();
  auto client = Connect();
  faulty_->FailNthWrite(1);  // the next write fails
  auto failed = client->SubmitJob(kJob, "");
  ASSERT_FALSE(failed.ok());
  EXPECT_EQ(failed.status().code(), StatusCode::kAborted);
  EXPECT_NE(failed.status().message().find("injected fault"), std::string::npos);

  auto ok = client->SubmitJob(kJob, "");
  ASSERT_TRUE(ok.ok()) << ok.status().ToString();
  auto jobs = client->ListJobs();
  ASSERT_TRUE(jobs.ok());
  ASSERT_EQ(jobs->size(), 1u);
  EXPECT_EQ(jobs->front().id, ok->id);
}

// Sends raw bytes to the server on a fresh TCP connection, then closes it.
void SendRaw(int port, const std::string& bytes) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(fd, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  ASSERT_EQ(write(fd, bytes.data(), bytes.size()), static_cast<ssize_t>(bytes.size()));
  close(fd);
}

TEST_F(CoordinatorServiceTest, GarbageAndHalfSentRequestsDoNotHurtTheServer) {
  StartService();
  auto client = Connect();
  ASSERT_TRUE(client->SubmitJob(kJob, "").ok());
  SendRaw(server_->port(), "GET / HTTP/1.1\r\nHost: x\r\n\r\n");     // not Thrift at all
  SendRaw(server_->port(), std::string("\x7f\xff\xff\xff", 4));       // a 2 GiB frame length
  SendRaw(server_->port(), std::string("\x00\x00\x01\x00\x80\x01", 6));  // a frame cut short
  // A valid frame header announcing a huge string.
  SendRaw(server_->port(), std::string("\x00\x00\x00\x10\x80\x01\x00\x01\x7f\xff\xff\xf0"
                                       "Hell",
                                       16));
  auto jobs = client->ListJobs();
  ASSERT_TRUE(jobs.ok()) << jobs.status().ToString();
  EXPECT_EQ(jobs->size(), 1u);
  EXPECT_NE(Connect(), nullptr);
}

TEST_F(CoordinatorServiceTest, StopWakesBlockedCalls) {
  StartService();
  auto client = Connect();
  auto blocked = std::async(std::launch::async, [&] { return client->KvGet({"never"}, 60'000); });
  // Whether the call is already waiting or arrives after Stop(), it must
  // return an error promptly instead of waiting out its 60 s.
  service_->Stop();
  auto result = blocked.get();
  ASSERT_FALSE(result.ok());
}

}  // namespace
}  // namespace parallax::coordinator
