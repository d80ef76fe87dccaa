#include "core/daemon/local_address.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <ifaddrs.h>
#include <netdb.h>

namespace parallax {
namespace {

using ::testing::HasSubstr;

// An IPv4 address of this machine that is not loopback, or "".
std::string NonLoopbackAddress() {
  ifaddrs* all = nullptr;
  if (getifaddrs(&all) != 0) return "";
  std::string found;
  for (ifaddrs* i = all; i != nullptr && found.empty(); i = i->ifa_next) {
    if (i->ifa_addr == nullptr || i->ifa_addr->sa_family != AF_INET) continue;
    char text[NI_MAXHOST];
    if (getnameinfo(i->ifa_addr, sizeof(sockaddr_in), text, sizeof text, nullptr, 0,
                    NI_NUMERICHOST) != 0) {
      continue;
    }
    if (std::string(text).rfind("127.", 0) != 0) found = text;
  }
  freeifaddrs(all);
  return found;
}

TEST(LocalAddressTest, ACoordinatorOnLoopbackIsReachedFromLoopback) {
  StatusOr<std::string> a = LocalAddressToward("127.0.0.1:7070");
  ASSERT_TRUE(a.ok()) << a.status().message();
  EXPECT_EQ(*a, "127.0.0.1");
  a = LocalAddressToward("127.0.0.1");
  ASSERT_TRUE(a.ok()) << a.status().message();
  EXPECT_EQ(*a, "127.0.0.1");
}

TEST(LocalAddressTest, ANameResolvesToANumericAddress) {
  StatusOr<std::string> a = LocalAddressToward("localhost:7070");
  ASSERT_TRUE(a.ok()) << a.status().message();
  EXPECT_TRUE(*a == "127.0.0.1" || *a == "::1") << *a;
}

TEST(LocalAddressTest, TheSourceAddressIsTheOneOnTheRouteNotLoopback) {
  const std::string own = NonLoopbackAddress();
  if (own.empty()) GTEST_SKIP() << "this machine has no IPv4 address besides loopback";
  StatusOr<std::string> a = LocalAddressToward(own + ":7070");
  ASSERT_TRUE(a.ok()) << a.status().message();
  EXPECT_EQ(*a, own);
}

TEST(LocalAddressTest, AnUnknownHostIsNamedInTheError) {
  StatusOr<std::string> a = LocalAddressToward("no-such-host.invalid:7070");
  ASSERT_FALSE(a.ok());
  EXPECT_THAT(a.status().message(), HasSubstr("no-such-host.invalid"));
  EXPECT_FALSE(LocalAddressToward(":7070").ok());
}

}  // namespace
}  // namespace parallax
