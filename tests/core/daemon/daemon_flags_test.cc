#include "core/daemon/daemon_flags.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <CLI/CLI.hpp>

#include "core/base/daemon.h"

namespace parallax {
namespace {

using ::testing::HasSubstr;

// Parses `args` with the flags of `spec` and resolves them (no environment).
StatusOr<DaemonSettings> Parse(const DaemonFlagsSpec& spec, std::vector<std::string> args) {
  DaemonFlags flags(spec);
  CLI::App app;
  flags.AddTo(&app);
  args.insert(args.begin(), "daemon");
  std::vector<const char*> argv;
  for (const std::string& a : args) argv.push_back(a.c_str());
  app.parse(static_cast<int>(argv.size()), argv.data());
  return flags.Resolve(DaemonEnvironment{});
}

DaemonFlagsSpec Spec(const std::string& program, const std::string& listen, bool serves,
                     bool calls_coordinator) {
  DaemonFlagsSpec spec;
  spec.program = program;
  spec.default_listen = listen;
  spec.serves = serves;
  spec.calls_coordinator = calls_coordinator;
  return spec;
}

DaemonFlagsSpec Coordinator() { return Spec("parallax-coordinator", "127.0.0.1:7070", true, false); }

TEST(DaemonFlagsTest, LoopbackIsThisMachineOnly) {
  for (const char* host : {"127.0.0.1", "127.9.8.7", "::1", "localhost"}) {
    EXPECT_TRUE(IsLoopbackHost(host)) << host;
  }
  for (const char* host : {"", "0.0.0.0", "::", "10.1.2.3", "192.168.0.1"}) {
    EXPECT_FALSE(IsLoopbackHost(host)) << host;
  }
}

TEST(DaemonFlagsTest, ListeningBeyondThisMachineWithoutASecretIsWarnedAbout) {
  std::string warning = ExposureWarning("parallax-coordinator", "0.0.0.0", "0.0.0.0:7070", false);
  EXPECT_THAT(warning, HasSubstr("parallax-coordinator serves 0.0.0.0:7070"));
  EXPECT_THAT(warning, HasSubstr("--secret-file"));
  EXPECT_EQ(ExposureWarning("parallax-coordinator", "0.0.0.0", "0.0.0.0:7070", true), "");
  EXPECT_EQ(ExposureWarning("parallax-coordinator", "127.0.0.1", "127.0.0.1:7070", false), "");
}

TEST(DaemonFlagsTest, ResolvesTheListenAddressAndTheConnectionCap) {
  StatusOr<DaemonSettings> s = Parse(Coordinator(), {"--listen", "0.0.0.0:0"});
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_EQ(s->listen_host, "0.0.0.0");
  EXPECT_EQ(s->listen_port, 0);
  EXPECT_EQ(s->limits.max_connections, DefaultMaxConnections(OpenFileLimit()));
  ThriftServerOptions server = s->ServerOptions("coordinator");
  EXPECT_EQ(server.host, "0.0.0.0");
  EXPECT_EQ(server.what, "coordinator");

  s = Parse(Coordinator(), {"--max-connections", "50"});
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_EQ(s->listen_host, "127.0.0.1");
  EXPECT_EQ(s->listen_port, 7070);
  EXPECT_EQ(s->ServerOptions("c").limits.max_connections, 50);
}

TEST(DaemonFlagsTest, BadFlagsAreRefusedNamingTheFlag) {
  StatusOr<DaemonSettings> s = Parse(Coordinator(), {"--listen", "nowhere"});
  EXPECT_EQ(s.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(s.status().message(), HasSubstr("--listen"));
  s = Parse(Coordinator(), {"--tls-cert", "/nonexistent.pem"});
  EXPECT_THAT(s.status().message(), HasSubstr("--tls-key"));
  s = Parse(Spec("parallax-agent", "127.0.0.1:0", true, true), {"--tls-ca", "/nonexistent-ca.pem"});
  EXPECT_THAT(s.status().message(), HasSubstr("--tls-ca"));
}

TEST(DaemonFlagsTest, ADaemonGetsOnlyTheFlagsItsSpecAsksFor) {
  DaemonFlags flags(Spec("parallax-ps", "", false, true));
  CLI::App app;
  flags.AddTo(&app);
  EXPECT_EQ(app.get_option_no_throw("--listen"), nullptr);
  EXPECT_EQ(app.get_option_no_throw("--tls-cert"), nullptr);
  EXPECT_EQ(app.get_option_no_throw("--max-connections"), nullptr);
  EXPECT_NE(app.get_option_no_throw("--tls-ca"), nullptr);
  EXPECT_NE(app.get_option_no_throw("--secret-file"), nullptr);
}

}  // namespace
}  // namespace parallax
