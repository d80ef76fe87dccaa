// The web endpoint as parallax-coordinator starts it from its flags: the
// address forms, the token file's rules, the port file and the warning for a
// server beyond loopback without a token.
#include "coordinator/web/http_endpoint.h"

#include <gtest/gtest.h>
#include <httplib.h>
#include <sys/stat.h>

#include <fstream>

#include "tests/coordinator/sqlite_service.h"

namespace parallax::coordinator {
namespace {

class HttpEndpointTest : public ::testing::Test {
 protected:
  void SetUp() override {
    Status s = db_.Open();
    ASSERT_TRUE(s.ok()) << s.ToString();
    sources_ = {db_.store.get(), db_.service.get(), &rpc_stats_, "cluster-secret", "", ""};
  }

  std::string WriteSecret(const std::string& name, const std::string& text) {
    const std::string path = db_.dir.File(name);
    std::ofstream(path) << text << "\n";
    chmod(path.c_str(), 0600);
    return path;
  }

  testing::SqliteService db_;
  RpcStats rpc_stats_;
  HttpEndpointSources sources_;
};

TEST_F(HttpEndpointTest, OffWithoutHttp) {
  auto endpoint = StartHttpEndpoint({}, sources_);
  ASSERT_TRUE(endpoint.ok());
  EXPECT_EQ(*endpoint, nullptr);
  HttpEndpointFlags flags;
  flags.token_file = WriteSecret("token", "viewer");
  EXPECT_EQ(StartHttpEndpoint(flags, sources_).status().code(), StatusCode::kInvalidArgument);
}

TEST_F(HttpEndpointTest, PortAloneListensOnLoopbackAndWritesThePortFile) {
  HttpEndpointFlags flags;
  flags.listen = "0";
  flags.port_file = db_.dir.File("http.port");
  flags.token_file = WriteSecret("token", "viewer");
  auto endpoint = StartHttpEndpoint(flags, sources_);
  ASSERT_TRUE(endpoint.ok()) << endpoint.status().ToString();
  int written = 0;
  std::ifstream(flags.port_file) >> written;
  EXPECT_EQ(written, (*endpoint)->port());
  httplib::Client client("127.0.0.1", written);
  auto r = client.Get("/metrics", {{"Authorization", "Bearer viewer"}});
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  EXPECT_NE(r->body.find("parallax_jobs{state=\"running\"} 0"), std::string::npos) << r->body;
  EXPECT_EQ(client.Get("/metrics")->status, 401);
}

TEST_F(HttpEndpointTest, RefusesTheClusterSecretAsTheReadOnlyToken) {
  HttpEndpointFlags flags;
  flags.listen = ":0";
  flags.token_file = WriteSecret("token", "cluster-secret");
  auto endpoint = StartHttpEndpoint(flags, sources_);
  ASSERT_FALSE(endpoint.ok());
  EXPECT_NE(endpoint.status().message().find("holds the cluster secret"), std::string::npos);
}

TEST_F(HttpEndpointTest, RefusesAReadableTokenFileAndABadAddress) {
  HttpEndpointFlags flags;
  flags.listen = ":0";
  flags.token_file = WriteSecret("token", "viewer");
  chmod(flags.token_file.c_str(), 0644);
  auto endpoint = StartHttpEndpoint(flags, sources_);
  ASSERT_FALSE(endpoint.ok());
  EXPECT_NE(endpoint.status().message().find("--http-token-file"), std::string::npos)
      << endpoint.status().message();
  flags.token_file.clear();
  flags.listen = "127.0.0.1:99999";
  endpoint = StartHttpEndpoint(flags, sources_);
  ASSERT_FALSE(endpoint.ok());
  EXPECT_EQ(endpoint.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(endpoint.status().message().find("--http '127.0.0.1:99999'"), std::string::npos);
}

TEST_F(HttpEndpointTest, WarnsWhenListeningBeyondLoopbackWithoutAToken) {
  HttpEndpointFlags flags;
  flags.listen = "0.0.0.0:0";
  ::testing::internal::CaptureStderr();
  auto open = StartHttpEndpoint(flags, sources_);
  std::string log = ::testing::internal::GetCapturedStderr();
  ASSERT_TRUE(open.ok()) << open.status().ToString();
  EXPECT_NE(log.find("without --http-token-file"), std::string::npos) << log;
  (*open)->Stop();

  flags.token_file = WriteSecret("token", "viewer");
  ::testing::internal::CaptureStderr();
  auto closed = StartHttpEndpoint(flags, sources_);
  log = ::testing::internal::GetCapturedStderr();
  ASSERT_TRUE(closed.ok());
  EXPECT_EQ(log.find("without --http-token-file"), std::string::npos) << log;
  flags.token_file.clear();
  flags.listen = "127.0.0.1:0";
  ::testing::internal::CaptureStderr();
  auto loopback = StartHttpEndpoint(flags, sources_);
  log = ::testing::internal::GetCapturedStderr();
  ASSERT_TRUE(loopback.ok());
  EXPECT_EQ(log.find("without --http-token-file"), std::string::npos) << log;
}

}  // namespace
}  // namespace parallax::coordinator
