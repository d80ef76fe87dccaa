// The real CoordinatorLink against a small in-process Thrift coordinator.
#include "agent/coordinator_link.h"

#include <gtest/gtest.h>
#include <thrift/protocol/TBinaryProtocol.h>
#include <thrift/server/TThreadedServer.h>
#include <thrift/transport/TBufferTransports.h>
#include <thrift/transport/TServerSocket.h>

#include <chrono>
#include <condition_variable>
#include <future>
#include <mutex>
#include <thread>

#include "schemas/Coordinator.h"
#include "schemas/coordinator_constants.h"
#include "tests/agent/test_util.h"

namespace parallax::agent {
namespace {

using apache::thrift::protocol::TBinaryProtocolFactory;
using apache::thrift::server::TServerEventHandler;
using apache::thrift::server::TThreadedServer;
using apache::thrift::transport::TFramedTransportFactory;
using apache::thrift::transport::TServerSocket;

// Answers the calls an agent makes; PollAssignments waits until Release().
class FakeCoordinator : public rpc::CoordinatorNull {
 public:
  void Hello(rpc::HelloResponse& out, const rpc::RequestHeader& header) override {
    if (header.auth_token != "tok") {
      rpc::CoordinatorError e;
      e.code = rpc::ErrorCode::UNAUTHENTICATED;
      e.message = "wrong token";
      throw e;
    }
    out.protocol_version = rpc::g_coordinator_constants.PROTOCOL_VERSION;
    out.server_version = "test";
  }
  void RegisterAgent(const rpc::RequestHeader&, const rpc::AgentInfo& agent) override {
    std::lock_guard<std::mutex> lock(mu_);
    if (agent.name == "taken") {
      rpc::CoordinatorError e;
      e.code = rpc::ErrorCode::ALREADY_EXISTS;
      e.message = "agent \"taken\" is already registered";
      throw e;
    }
    registered_.push_back(agent.name);
  }
  void Heartbeat(rpc::HeartbeatResponse& out, const rpc::RequestHeader&,
                 const rpc::HeartbeatRequest& request) override {
    std::lock_guard<std::mutex> lock(mu_);
    out.known = std::find(registered_.begin(), registered_.end(), request.agent_name) !=
                registered_.end();
  }
  void PollAssignments(rpc::PollResponse& out, const rpc::RequestHeader&,
                       const rpc::PollRequest& request) override {
    std::unique_lock<std::mutex> lock(mu_);
    ++polls_;
    cv_.notify_all();
    cv_.wait_for(lock, std::chrono::milliseconds(request.timeout_ms), [&] { return released_; });
    out.known = true;
    out.stop = request.running;
  }
  void ReportTasks(const rpc::RequestHeader&, const std::string&,
                   const std::vector<rpc::TaskReport>& reports) override {
    std::lock_guard<std::mutex> lock(mu_);
    reports_ += static_cast<int>(reports.size());
  }

  void Release() {
    std::lock_guard<std::mutex> lock(mu_);
    released_ = true;
    cv_.notify_all();
  }
  bool WaitForPoll() {
    std::unique_lock<std::mutex> lock(mu_);
    return cv_.wait_for(lock, std::chrono::seconds(10), [&] { return polls_ > 0; });
  }
  int reports() {
    std::lock_guard<std::mutex> lock(mu_);
    return reports_;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<std::string> registered_;
  int polls_ = 0;
  int reports_ = 0;
  bool released_ = false;
};

class ReadySignal : public TServerEventHandler {
 public:
  explicit ReadySignal(std::promise<void> ready) : ready_(std::move(ready)) {}
  void preServe() override { ready_.set_value(); }

 private:
  std::promise<void> ready_;
};

class CoordinatorLinkTest : public ::testing::Test {
 protected:
  void SetUp() override {
    socket_ = std::make_shared<TServerSocket>("127.0.0.1", 0);
    server_ = std::make_shared<TThreadedServer>(
        std::make_shared<rpc::CoordinatorProcessor>(coordinator_), socket_,
        std::make_shared<TFramedTransportFactory>(), std::make_shared<TBinaryProtocolFactory>());
    std::promise<void> ready;
    std::future<void> listening = ready.get_future();
    server_->setServerEventHandler(std::make_shared<ReadySignal>(std::move(ready)));
    thread_ = std::thread([this] { server_->serve(); });
    ASSERT_EQ(listening.wait_for(std::chrono::seconds(10)), std::future_status::ready);
  }
  void TearDown() override {
    coordinator_->Release();
    server_->stop();
    thread_.join();
  }

  std::unique_ptr<CoordinatorLink> Link(const std::string& token = "tok") {
    CoordinatorLinkOptions o;
    o.address = "127.0.0.1:" + std::to_string(socket_->getPort());
    o.auth_token = token;
    o.agent_name = "a1";
    return NewCoordinatorLink(o);
  }

  std::shared_ptr<FakeCoordinator> coordinator_ = std::make_shared<FakeCoordinator>();
  std::shared_ptr<TServerSocket> socket_;
  std::shared_ptr<TThreadedServer> server_;
  std::thread thread_;
};

TEST_F(CoordinatorLinkTest, RegistersHeartbeatsPollsAndReports) {
  auto link = Link();
  StatusOr<bool> known = link->Heartbeat("a1");
  ASSERT_TRUE(known.ok()) << known.status().ToString();
  EXPECT_FALSE(*known);
  rpc::AgentInfo info;
  info.name = "a1";
  ASSERT_TRUE(link->Register(info).ok());
  EXPECT_TRUE(*link->Heartbeat("a1"));
  coordinator_->Release();
  rpc::PollRequest request;
  request.agent_name = "a1";
  request.timeout_ms = 10'000;
  request.running = {testing::Key(1, 1, 0)};
  StatusOr<rpc::PollResponse> response = link->Poll(request);
  ASSERT_TRUE(response.ok()) << response.status().ToString();
  EXPECT_EQ(response->stop, request.running);
  rpc::TaskReport report;
  report.key = testing::Key(1, 1, 0);
  report.state = rpc::TaskState::RUNNING;
  ASSERT_TRUE(link->Report("a1", {report, report}).ok());
  EXPECT_EQ(coordinator_->reports(), 2);
}

TEST_F(CoordinatorLinkTest, RefusalsAreNotRetryable) {
  rpc::AgentInfo info;
  info.name = "taken";
  EXPECT_EQ(Link()->Register(info).code(), StatusCode::kAlreadyExists);
  EXPECT_EQ(Link("wrong")->Register(info).code(), StatusCode::kPermissionDenied);
}

TEST_F(CoordinatorLinkTest, UnreachableIsUnavailable) {
  CoordinatorLinkOptions o;
  o.address = "127.0.0.1:1";
  o.agent_name = "a1";
  EXPECT_EQ(NewCoordinatorLink(o)->Heartbeat("a1").status().code(), StatusCode::kUnavailable);
}

TEST_F(CoordinatorLinkTest, CancelPollEndsALongPollAtOnce) {
  auto link = Link();
  rpc::PollRequest request;
  request.agent_name = "a1";
  request.timeout_ms = 60'000;
  auto start = std::chrono::steady_clock::now();
  std::future<Status> poll =
      std::async(std::launch::async, [&] { return link->Poll(request).status(); });
  ASSERT_TRUE(coordinator_->WaitForPoll());
  link->CancelPoll();
  ASSERT_EQ(poll.wait_for(std::chrono::seconds(10)), std::future_status::ready);
  EXPECT_EQ(poll.get().code(), StatusCode::kUnavailable);
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(10));
}

}  // namespace
}  // namespace parallax::agent
