// Who may take over a live agent's name, what a clean stop does, and the
// warning for loopback addresses (coordinator/service/agent_registry.h): on its own,
// then through the service's handlers with a FakeClock.
#include "coordinator/service/agent_registry.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "tests/coordinator/service_driver.h"

namespace parallax::coordinator {
namespace {

using ::testing::HasSubstr;

rpc::AgentInfo Info(const std::string& name, const std::string& address,
                    const std::string& workdir_id, const std::string& bind_addr = "") {
  rpc::AgentInfo a;
  a.name = name;
  a.address = address;
  a.slots = 1;
  a.gpus = 0;
  if (!workdir_id.empty()) a.__set_workdir_id(workdir_id);
  if (!bind_addr.empty()) a.__set_bind_addr(bind_addr);
  return a;
}

TEST(AgentRegistryTest, OnlyTheSameWorkdirOrACleanStopFreesALiveName) {
  AgentRegistry registry(/*coordinator_on_loopback=*/true);
  EXPECT_FALSE(registry.MayTakeOver(Info("a", "h:2", "id-1")));  // never registered here
  EXPECT_EQ(registry.Registered(Info("a", "h:1", "id-1")), "");
  EXPECT_TRUE(registry.MayTakeOver(Info("a", "h:2", "id-1")));
  EXPECT_FALSE(registry.MayTakeOver(Info("a", "h:2", "id-2")));
  EXPECT_FALSE(registry.MayTakeOver(Info("a", "h:2", "")));
  EXPECT_FALSE(registry.Deregistered("a", "id-2"));  // not the holder
  EXPECT_FALSE(registry.MayTakeOver(Info("a", "h:2", "id-2")));
  EXPECT_TRUE(registry.Deregistered("a", "id-1"));
  EXPECT_TRUE(registry.MayTakeOver(Info("a", "h:2", "id-2")));
  rpc::AgentInfo shown = Info("a", "h:1", "");
  shown.__set_alive(true);
  registry.Describe(&shown);
  EXPECT_TRUE(shown.stopped);
  EXPECT_FALSE(shown.alive);
  registry.Registered(Info("a", "h:2", "id-2"));
  rpc::AgentInfo again = Info("a", "h:2", "");
  registry.Describe(&again);
  EXPECT_FALSE(again.stopped);
}

TEST(AgentRegistryTest, LoopbackAddressesAreWrongOnlyWhenTheCoordinatorIsNot) {
  AgentRegistry remote(/*coordinator_on_loopback=*/false);
  EXPECT_EQ(remote.Registered(Info("ok", "10.0.0.5:7071", "x", "10.0.0.5")), "");
  std::string w = remote.Registered(Info("a", "127.0.0.1:7071", "x", "127.0.0.1"));
  EXPECT_THAT(w, HasSubstr("agent \"a\" registered its log service at 127.0.0.1:7071 and its "
                           "tasks at 127.0.0.1"));
  EXPECT_THAT(w, HasSubstr("--listen 0.0.0.0:7071"));
  EXPECT_THAT(remote.Registered(Info("b", "[::1]:7071", "x")), HasSubstr("[::1]:7071"));
  EXPECT_THAT(remote.Registered(Info("c", "10.0.0.6:7071", "x", "localhost")),
              HasSubstr("its tasks at localhost"));
  rpc::AgentInfo shown = Info("a", "127.0.0.1:7071", "");
  remote.Describe(&shown);
  EXPECT_EQ(shown.warning, w);
  AgentRegistry local(/*coordinator_on_loopback=*/true);
  EXPECT_EQ(local.Registered(Info("a", "127.0.0.1:7071", "x", "127.0.0.1")), "");
}

class AgentRegistrationTest : public ::testing::Test {
 protected:
  void Register(const rpc::AgentInfo& a) { driver_.service().RegisterAgent(driver_.header(), a); }
  // The error code of a registration, or -1 when it was accepted.
  int RegisterCode(const rpc::AgentInfo& a) {
    try {
      Register(a);
      return -1;
    } catch (const rpc::CoordinatorError& e) {
      message_ = e.message;
      return e.code;
    }
  }
  rpc::AgentInfo Listed(const std::string& name) {
    std::vector<rpc::AgentInfo> agents;
    driver_.service().ListAgents(agents, driver_.header());
    for (const auto& a : agents) {
      if (a.name == name) return a;
    }
    ADD_FAILURE() << "agent " << name << " not listed";
    return {};
  }

  ServiceDriver driver_{10'000};
  std::string message_;
};

// Slots beyond any host are refused by name (two agents of 2^30 slots once
// overflowed the scheduler's total: the coordinator fuzzer's find), and the
// agents already registered keep being served.
TEST_F(AgentRegistrationTest, SlotsBeyondAnyHostAreRefusedByName) {
  rpc::AgentInfo ok = Info("ok", "h:1", "id-ok");
  ok.slots = 4096;
  EXPECT_EQ(RegisterCode(ok), -1) << message_;
  for (auto [slots, gpus] : {std::pair{1090519044, 0}, std::pair{1, 4097}, std::pair{-1, 0}}) {
    rpc::AgentInfo big = Info("big", "h:2", "id-big");
    big.slots = slots;
    big.gpus = gpus;
    EXPECT_EQ(RegisterCode(big), static_cast<int>(rpc::ErrorCode::INVALID_ARGUMENT));
    EXPECT_THAT(message_, HasSubstr("agent \"big\": slots and gpus must be from 0 to 4096, got "
                                    "slots = " + std::to_string(slots)));
  }
  EXPECT_EQ(Listed("ok").slots, 4096);
}

TEST_F(AgentRegistrationTest, AnotherAgentIsRefusedTheLiveNameUntilTheTimeout) {
  Register(Info("a", "10.0.0.1:7071", "id-1"));
  driver_.clock().Advance(1'000);
  EXPECT_EQ(RegisterCode(Info("a", "10.0.0.2:7071", "id-2")), rpc::ErrorCode::ALREADY_EXISTS);
  EXPECT_THAT(message_, HasSubstr("already registered from 10.0.0.1:7071"));
  driver_.clock().Advance(10'001);
  EXPECT_EQ(RegisterCode(Info("a", "10.0.0.2:7071", "id-2")), -1);
}

TEST_F(AgentRegistrationTest, TheSameWorkdirTakesItsNameOverAtOnceFromAnotherAddress) {
  Register(Info("a", "10.0.0.1:7071", "id-1"));
  driver_.clock().Advance(500);
  EXPECT_EQ(RegisterCode(Info("a", "10.0.0.1:40123", "id-1")), -1) << message_;
  EXPECT_EQ(Listed("a").address, "10.0.0.1:40123");
  EXPECT_TRUE(Listed("a").alive);
}

TEST_F(AgentRegistrationTest, ACleanStopFreesTheNameAndShowsTheAgentStopped) {
  Register(Info("a", "10.0.0.1:7071", "id-1"));
  driver_.service().DeregisterAgent(driver_.header(), "a", "id-2");  // not its id: ignored
  EXPECT_FALSE(Listed("a").stopped);
  driver_.service().DeregisterAgent(driver_.header(), "a", "id-1");
  EXPECT_TRUE(Listed("a").stopped);
  EXPECT_FALSE(Listed("a").alive);
  driver_.clock().Advance(500);
  EXPECT_EQ(RegisterCode(Info("a", "10.0.0.9:7071", "id-9")), -1) << message_;
  EXPECT_FALSE(Listed("a").stopped);
  EXPECT_TRUE(Listed("a").alive);
}

}  // namespace
}  // namespace parallax::coordinator
