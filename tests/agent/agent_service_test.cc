#include "agent/agent_service.h"

#include <gtest/gtest.h>
#include <thrift/protocol/TBinaryProtocol.h>
#include <thrift/transport/TBufferTransports.h>
#include <thrift/transport/TSocket.h>

#include "schemas/coordinator_constants.h"
#include "tests/agent/test_util.h"

namespace parallax::agent {
namespace {

using apache::thrift::protocol::TBinaryProtocol;
using apache::thrift::transport::TFramedTransport;
using apache::thrift::transport::TSocket;
using testing::Key;

// A LogSource with one task whose log is "hello".
class OneLog : public LogSource {
 public:
  StatusOr<rpc::LogChunk> ReadLog(const rpc::TaskKey& task, int64_t offset,
                                  int32_t max_bytes) override {
    if (!(task == Key(1, 1, 0))) return NotFound("no log of that task");
    rpc::LogChunk c;
    c.data = std::string("hello").substr(static_cast<size_t>(offset == -1 ? 0 : offset),
                                         static_cast<size_t>(max_bytes));
    c.next_offset = 5;
    c.first_offset = 0;
    c.complete = true;
    return c;
  }
};

class AgentServiceTest : public ::testing::Test {
 protected:
  void Serve(const std::string& token) {
    AgentServiceOptions options;
    options.auth_token = token;
    auto service = std::make_shared<AgentService>(&logs_, &clock_, options);
    ThriftServerOptions listen;  // 127.0.0.1, a free port
    StatusOr<std::unique_ptr<AgentServer>> server = StartAgentServer(listen, service);
    ASSERT_TRUE(server.ok()) << server.status().ToString();
    server_ = std::move(server).value();
    socket_ = std::make_shared<TSocket>("127.0.0.1", server_->port());
    transport_ = std::make_shared<TFramedTransport>(socket_);
    client_ = std::make_unique<rpc::AgentClient>(std::make_shared<TBinaryProtocol>(transport_));
    transport_->open();
  }

  void TearDown() override {
    if (transport_) transport_->close();
    if (server_) server_->Stop();
  }

  static rpc::RequestHeader Header(const std::string& token = "", int32_t version = 0) {
    rpc::RequestHeader h;
    h.protocol_version = version ? version : rpc::g_coordinator_constants.PROTOCOL_VERSION;
    h.auth_token = token;
    return h;
  }

  rpc::ErrorCode::type ErrorOf(const std::function<void()>& call, std::string* message = nullptr) {
    try {
      call();
    } catch (const rpc::CoordinatorError& e) {
      if (message) *message = e.message;
      return e.code;
    }
    ADD_FAILURE() << "no error";
    return rpc::ErrorCode::INTERNAL;
  }

  OneLog logs_;
  FakeClock clock_{1234};
  std::unique_ptr<AgentServer> server_;
  std::shared_ptr<TSocket> socket_;
  std::shared_ptr<TFramedTransport> transport_;
  std::unique_ptr<rpc::AgentClient> client_;
};

TEST_F(AgentServiceTest, HelloAndReadLog) {
  Serve("");
  rpc::HelloResponse hello;
  client_->Hello(hello, Header());
  EXPECT_EQ(hello.protocol_version, rpc::g_coordinator_constants.PROTOCOL_VERSION);
  EXPECT_EQ(hello.server_time, 1234);
  rpc::LogChunk chunk;
  client_->ReadLog(chunk, Header(), Key(1, 1, 0), 1, 3);
  EXPECT_EQ(chunk.data, "ell");
  EXPECT_TRUE(chunk.complete);
  EXPECT_EQ(ErrorOf([&] { client_->ReadLog(chunk, Header(), Key(2, 1, 0), 0, 10); }),
            rpc::ErrorCode::NOT_FOUND);
}

TEST_F(AgentServiceTest, RefusesAnotherProtocolVersionNamingBoth) {
  Serve("");
  rpc::HelloResponse hello;
  std::string message;
  EXPECT_EQ(ErrorOf([&] { client_->Hello(hello, Header("", 99)); }, &message),
            rpc::ErrorCode::VERSION_MISMATCH);
  EXPECT_NE(message.find("version 99"), std::string::npos) << message;
  EXPECT_NE(message.find("version " + std::to_string(rpc::g_coordinator_constants.PROTOCOL_VERSION)),
            std::string::npos);
}

TEST_F(AgentServiceTest, ChecksTheTokenWhenSet) {
  Serve("s3cret");
  rpc::HelloResponse hello;
  rpc::LogChunk chunk;
  EXPECT_EQ(ErrorOf([&] { client_->Hello(hello, Header("wrong")); }),
            rpc::ErrorCode::UNAUTHENTICATED);
  EXPECT_EQ(ErrorOf([&] { client_->ReadLog(chunk, Header(""), Key(1, 1, 0), 0, 5); }),
            rpc::ErrorCode::UNAUTHENTICATED);
  client_->Hello(hello, Header("s3cret"));
  client_->ReadLog(chunk, Header("s3cret"), Key(1, 1, 0), 0, 5);
  EXPECT_EQ(chunk.data, "hello");
}

TEST(SplitHostPortTest, ParsesAndRejects) {
  auto a = ParseHostPort("127.0.0.1:0");
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(a->first, "127.0.0.1");
  EXPECT_EQ(a->second, 0);
  EXPECT_EQ(ParseHostPort("[::1]:80")->first, "::1");
  EXPECT_FALSE(ParseHostPort("host").ok());
  EXPECT_FALSE(ParseHostPort("host:70000").ok());
  EXPECT_FALSE(ParseHostPort(":80").ok());
}

}  // namespace
}  // namespace parallax::agent
