// Authentication before allocation, on Thrift's own encoding: requests
// written by the generated client into memory, read back through
// GuardedFramedTransport over a memory "socket".
#include "core/rpc/guarded_transport.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <thrift/protocol/TBinaryProtocol.h>
#include <thrift/transport/TBufferTransports.h>
#include <thrift/transport/TTransportException.h>

#include <cstring>

#include "core/rpc/request_header.h"
#include "schemas/Coordinator.h"
#include "schemas/coordinator_constants.h"

namespace parallax {
namespace {

using apache::thrift::protocol::TBinaryProtocol;
using apache::thrift::transport::TMemoryBuffer;
using apache::thrift::transport::TTransportException;

rpc::RequestHeader Header(const std::string& token) {
  rpc::RequestHeader h;
  h.protocol_version = rpc::g_coordinator_constants.PROTOCOL_VERSION;
  h.auth_token = token;
  h.__set_client("test");
  return h;
}

// The bytes of one SubmitJob call (no frame header).
std::string SubmitCall(const std::string& token, size_t job_bytes) {
  auto buffer = std::make_shared<TMemoryBuffer>();
  rpc::CoordinatorClient client(std::make_shared<TBinaryProtocol>(buffer));
  rpc::SubmitJobRequest request;
  request.job_text = std::string(job_bytes, 'x');
  client.send_SubmitJob(Header(token), request);
  return buffer->getBufferAsString();
}

std::string Framed(const std::string& body, uint32_t announced = 0) {
  uint32_t size = htonl(announced != 0 ? announced : static_cast<uint32_t>(body.size()));
  std::string frame(reinterpret_cast<const char*>(&size), 4);
  return frame + body;
}

bool Authenticates(const std::string& bytes, size_t prefix, const std::string& token) {
  return RequestPrefixAuthenticates(reinterpret_cast<const uint8_t*>(bytes.data()),
                                    static_cast<uint32_t>(std::min(prefix, bytes.size())), token);
}

TEST(RequestPrefixTest, AHeaderIsFoundInTheFirstBytesOfAnyCall) {
  const std::string call = SubmitCall("s3cret", 1 << 20);
  EXPECT_TRUE(Authenticates(call, 200, "s3cret"));
  EXPECT_FALSE(Authenticates(call, 200, "other"));
  EXPECT_TRUE(Authenticates(call, 200, ""));  // no secret: any readable header
  EXPECT_FALSE(Authenticates(call, 30, "s3cret"));  // cut inside the header
  EXPECT_FALSE(Authenticates(std::string(100, '\x7f'), 100, ""));
  EXPECT_FALSE(Authenticates(SubmitCall("", 10), 200, "s3cret"));
}

class GuardedTransportTest : public ::testing::Test {
 protected:
  static ConnectionLimits Limits() {
    ConnectionLimits limits;
    limits.max_connections = 10;
    return limits;
  }
  // A transport reading `bytes` (as from a socket) for a server with `token`.
  std::shared_ptr<GuardedFramedTransport> Over(const std::string& bytes, const std::string& token) {
    socket_ = std::make_shared<TMemoryBuffer>();
    socket_->write(reinterpret_cast<const uint8_t*>(bytes.data()),
                   static_cast<uint32_t>(bytes.size()));
    GuardedTransportOptions options;
    options.max_frame_bytes = 24 << 20;
    options.unauthenticated_bytes = 64 << 10;
    options.auth_token = token;
    id_ = *guard_.Admit(-1, "peer");
    return std::make_shared<GuardedFramedTransport>(socket_, options, &guard_, id_);
  }
  // Drives one frame through the transport as the processor would.
  static void ReadOneFrame(GuardedFramedTransport& transport) {
    uint8_t byte;
    transport.read(&byte, 1);
  }

  FakeClock clock_;
  ConnectionGuard guard_{Limits(), &clock_, "test", [](int) {}};
  ConnectionGuard::Id id_ = 0;
  std::shared_ptr<TMemoryBuffer> socket_;
};

TEST_F(GuardedTransportTest, ARequestWithTheSecretAuthenticatesAndIsReadWhole) {
  const std::string call = SubmitCall("s3cret", 200 << 10);
  auto transport = Over(Framed(call) + Framed(call), "s3cret");
  ReadOneFrame(*transport);
  EXPECT_TRUE(transport->authenticated());
  EXPECT_EQ(guard_.counts().unauthenticated, 0);
  EXPECT_EQ(socket_->available_read(), call.size() + 4);  // the first frame was read whole
}

TEST_F(GuardedTransportTest, AnUnauthenticatedRequestIsNotReadPastItsFirstBytes) {
  // Announces 20 MiB and sends them, without the secret.
  const std::string call = SubmitCall("wrong", 20 << 20);
  auto transport = Over(Framed(call), "s3cret");
  EXPECT_THROW(ReadOneFrame(*transport), TTransportException);
  EXPECT_FALSE(transport->authenticated());
  EXPECT_EQ(socket_->available_read(), call.size() - (64 << 10));  // 64 KiB read, no more
}

TEST_F(GuardedTransportTest, ASmallUnauthenticatedRequestIsHandedOnForTheServiceToRefuse) {
  const std::string call = SubmitCall("wrong", 100);
  auto transport = Over(Framed(call), "s3cret");
  ReadOneFrame(*transport);  // the service answers UNAUTHENTICATED with its message
  EXPECT_FALSE(transport->authenticated());
  EXPECT_EQ(guard_.counts().unauthenticated, 1);
}

TEST_F(GuardedTransportTest, AFrameOverTheLimitIsRefusedFromItsHeader) {
  auto transport = Over(Framed("", 25 << 20), "");
  try {
    ReadOneFrame(*transport);
    FAIL() << "an oversized frame was accepted";
  } catch (const TTransportException& e) {
    EXPECT_NE(std::string(e.what()).find("oversized frame"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace parallax
