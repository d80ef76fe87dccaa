// The Thrift server's accept loop on a loopback socket.
#include "core/rpc/thrift_server.h"

#include <gtest/gtest.h>
#include <thrift/TProcessor.h>

#include "tests/testing/connect_storm.h"
#include "tests/testing/free_port.h"

namespace parallax {
namespace {

// Closes every connection without reading it.
class ClosingProcessor : public apache::thrift::TProcessor {
 public:
  bool process(std::shared_ptr<apache::thrift::protocol::TProtocol>,
               std::shared_ptr<apache::thrift::protocol::TProtocol>, void*) override {
    return false;
  }
};

// Connections that arrive as the server starts are served on threads that
// may run before StartThriftServer returns. They once read the server's
// acceptor before StartThriftServer had stored it, and a coordinator
// restarted while agents heartbeat died of SIGSEGV.
TEST(ThriftServerTest, ConnectionsArrivingAsTheServerStartsAreServed) {
  const int port = testing::FreePort();
  ASSERT_GT(port, 0);
  testing::ConnectStorm storm(port);
  auto processor = std::make_shared<ClosingProcessor>();
  for (int i = 0; i < 100; ++i) {
    ThriftServerOptions options;
    options.port = port;
    options.what = "test service";
    StatusOr<std::unique_ptr<ThriftServer>> server = StartThriftServer(options, processor);
    ASSERT_TRUE(server.ok()) << server.status().ToString();
    (*server)->Stop();
  }
  EXPECT_GT(storm.connected(), 0) << "no connection reached the server: the test tested nothing";
}

}  // namespace
}  // namespace parallax
