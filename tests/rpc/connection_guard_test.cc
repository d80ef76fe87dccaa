#include "core/rpc/connection_guard.h"

#include <gtest/gtest.h>

#include <vector>

namespace parallax {
namespace {

class ConnectionGuardTest : public ::testing::Test {
 protected:
  ConnectionGuard Guard(ConnectionLimits limits) {
    return ConnectionGuard(limits, &clock_, "test", [this](int fd) { closed_.push_back(fd); });
  }
  static ConnectionLimits Cap(int n) {
    ConnectionLimits limits;
    limits.max_connections = n;
    return limits;
  }

  FakeClock clock_;
  std::vector<int> closed_;  // fds, in the order the guard closed them
};

TEST_F(ConnectionGuardTest, AtTheCapTheOldestUnauthenticatedConnectionMakesRoom) {
  ConnectionGuard guard = Guard(Cap(3));
  auto a = guard.Admit(10, "a");
  auto b = guard.Admit(11, "b");
  auto c = guard.Admit(12, "c");
  ASSERT_TRUE(a && b && c);
  guard.SetAuthenticated(*a);  // the oldest has proved itself: it stays
  clock_.Advance(10);
  ASSERT_TRUE(guard.Admit(13, "d"));
  EXPECT_EQ(closed_, (std::vector<int>{11}));
  ASSERT_TRUE(guard.Admit(14, "e"));
  EXPECT_EQ(closed_, (std::vector<int>{11, 12}));
  EXPECT_EQ(guard.counts().open, 3);
  EXPECT_EQ(guard.counts().unauthenticated, 2);
}

TEST_F(ConnectionGuardTest, AConnectionThatNeverSentAByteGoesBeforeOneThatHas) {
  ConnectionGuard guard = Guard(Cap(3));
  auto slow = guard.Admit(10, "slow");
  guard.SetPhase(*slow, ConnectionPhase::kReading);  // started a request, never finished
  ASSERT_TRUE(guard.Admit(11, "client", /*spoke=*/true));
  ASSERT_TRUE(guard.Admit(12, "idle"));
  ASSERT_TRUE(guard.Admit(13, "idle2"));
  EXPECT_EQ(closed_, (std::vector<int>{12}));  // not the older ones that spoke
  ASSERT_TRUE(guard.Admit(14, "idle3"));
  EXPECT_EQ(closed_, (std::vector<int>{12, 13}));
  ASSERT_TRUE(guard.Admit(15, "client2", /*spoke=*/true));
  EXPECT_EQ(closed_, (std::vector<int>{12, 13, 14}));
  ASSERT_TRUE(guard.Admit(16, "client3", /*spoke=*/true));
  EXPECT_EQ(closed_, (std::vector<int>{12, 13, 14, 10}));  // then the oldest that spoke
}

TEST_F(ConnectionGuardTest, ThenTheLongestIdleAuthenticatedOneAndOtherwiseTheNewOneIsRefused) {
  ConnectionGuard guard = Guard(Cap(2));
  auto a = guard.Admit(10, "a");
  auto b = guard.Admit(11, "b");
  guard.SetAuthenticated(*a);
  guard.SetAuthenticated(*b);
  guard.SetPhase(*a, ConnectionPhase::kHandling);  // a long poll: never closed for room
  clock_.Advance(5);
  guard.SetPhase(*b, ConnectionPhase::kReading);
  guard.SetPhase(*b, ConnectionPhase::kIdle);
  ASSERT_TRUE(guard.Admit(12, "c"));
  EXPECT_EQ(closed_, (std::vector<int>{11}));
  auto d = guard.Admit(13, "d");  // c (12) is unauthenticated: it goes
  ASSERT_TRUE(d);
  EXPECT_EQ(closed_, (std::vector<int>{11, 12}));
  guard.SetAuthenticated(*d);
  guard.SetPhase(*d, ConnectionPhase::kHandling);
  EXPECT_FALSE(guard.Admit(14, "e"));  // both busy in requests
  EXPECT_EQ(closed_.size(), 2u);
}

TEST_F(ConnectionGuardTest, AClosedConnectionNoLongerCountsAndIsNeverClosedTwice) {
  ConnectionGuard guard = Guard(Cap(1));
  auto a = guard.Admit(10, "a");
  ASSERT_TRUE(guard.Admit(11, "b"));  // closes a, whose thread has not removed it yet
  EXPECT_EQ(closed_, (std::vector<int>{10}));
  guard.CloseAll();
  EXPECT_EQ(closed_, (std::vector<int>{10, 11}));
  guard.Remove(*a);
  guard.CloseAll();
  EXPECT_EQ(closed_.size(), 2u);
  EXPECT_EQ(guard.counts().open, 0);
}

TEST_F(ConnectionGuardTest, WhileManyClosedConnectionsAreBeingReleasedASilentNewcomerIsRefused) {
  ConnectionGuard guard = Guard(Cap(8));  // at most 8 closing
  std::vector<ConnectionGuard::Id> ids;
  for (int fd = 0; fd < 16; ++fd) ids.push_back(*guard.Admit(fd, "flood"));  // 8 closed for room
  EXPECT_EQ(guard.counts().closing, 8);
  EXPECT_FALSE(guard.Admit(100, "flood"));  // sent nothing: refused, nothing more closed
  EXPECT_EQ(closed_.size(), 8u);
  EXPECT_TRUE(guard.Admit(101, "client", /*spoke=*/true));  // a client with its request in
  EXPECT_EQ(closed_.size(), 9u);
  for (int i = 0; i < 9; ++i) guard.Remove(ids[i]);  // their threads ended
  EXPECT_EQ(guard.counts().closing, 0);
  EXPECT_TRUE(guard.Admit(102, "flood"));
}

TEST_F(ConnectionGuardTest, DeadlinesCloseUnauthenticatedSlowAndOptionallyIdleConnections) {
  ConnectionLimits limits = Cap(100);
  limits.auth_timeout_ms = 1'000;
  limits.request_timeout_ms = 5'000;
  limits.idle_timeout_ms = 20'000;
  ConnectionGuard guard = Guard(limits);
  auto silent = guard.Admit(10, "silent");
  auto slow = guard.Admit(11, "slow");
  auto idle = guard.Admit(12, "idle");
  auto polling = guard.Admit(13, "polling");
  for (auto id : {slow, idle, polling}) guard.SetAuthenticated(*id);
  guard.SetPhase(*slow, ConnectionPhase::kReading);
  guard.SetPhase(*polling, ConnectionPhase::kHandling);
  clock_.Advance(1'000);
  EXPECT_EQ(guard.CloseExpired(), 0);
  clock_.Advance(1);
  EXPECT_EQ(guard.CloseExpired(), 1);
  EXPECT_EQ(closed_, (std::vector<int>{10}));
  clock_.Advance(4'000);
  EXPECT_EQ(guard.CloseExpired(), 1);
  EXPECT_EQ(closed_, (std::vector<int>{10, 11}));
  clock_.Advance(15'000);
  EXPECT_EQ(guard.CloseExpired(), 1);
  EXPECT_EQ(closed_, (std::vector<int>{10, 11, 12}));
  clock_.Advance(1'000'000);
  EXPECT_EQ(guard.CloseExpired(), 0);  // a request in progress is never closed for time
  (void)silent;
  (void)idle;
}

TEST_F(ConnectionGuardTest, WithoutAnIdleTimeoutAnIdleAuthenticatedConnectionStays) {
  ConnectionGuard guard = Guard(Cap(10));
  auto a = guard.Admit(10, "a");
  guard.SetAuthenticated(*a);
  clock_.Advance(24 * 3600 * 1000LL);
  EXPECT_EQ(guard.CloseExpired(), 0);
}

TEST(DefaultMaxConnectionsTest, KeepsAReserveOfTheOpenFileLimit) {
  EXPECT_EQ(DefaultMaxConnections(1024), 896);
  EXPECT_EQ(DefaultMaxConnections(128), 96);
  EXPECT_EQ(DefaultMaxConnections(64), 32);
  EXPECT_EQ(DefaultMaxConnections(20), 16);
  EXPECT_EQ(DefaultMaxConnections(1 << 20), 16'384);
}

}  // namespace
}  // namespace parallax
