// NetHosts (tests/testing/net_hosts.h): namespaces that reach each other and
// the root namespace, per-host kernel byte counters, a shaped link that
// holds its rate, a link cut, two sets alive at once, and the leftovers of a
// killed process removed. Threads move into a host with setns() and talk
// TCP. Without root the tests skip with the reason.
#include "tests/testing/net_hosts.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <future>
#include <thread>

#include "tests/testing/subprocess.h"

namespace parallax::testing {
namespace {

using Clock = std::chrono::steady_clock;

// A listening socket on address:0; returns the fd and sets *port.
int Listen(const std::string& address, int* port) {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  inet_pton(AF_INET, address.c_str(), &a.sin_addr);
  if (bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 || listen(fd, 4) != 0) {
    close(fd);
    return -1;
  }
  socklen_t len = sizeof a;
  getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  *port = ntohs(a.sin_port);
  return fd;
}

// A connected socket to address:port within timeout_ms, or -1.
int Connect(const std::string& address, int port, int timeout_ms) {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  inet_pton(AF_INET, address.c_str(), &a.sin_addr);
  if (connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 && errno != EINPROGRESS) {
    close(fd);
    return -1;
  }
  pollfd p{fd, POLLOUT, 0};
  int err = 0;
  socklen_t len = sizeof err;
  if (poll(&p, 1, timeout_ms) != 1 || getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0 ||
      err != 0) {
    close(fd);
    return -1;
  }
  fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);
  return fd;
}

// Host `from` sends `bytes` to a listener of host `to` (or of the root
// namespace when `to` < 0). Returns "" or what failed; *receive_s is the
// time from the sender's first send to the receiver's last byte: never less
// than the link took, however late either thread runs (timed from the
// receiver's first byte instead, a receiver that ran late found bytes that
// had already crossed waiting and counted the link faster than its rate).
std::string Transfer(const NetHosts& net, int from, int to, size_t bytes,
                     double* receive_s = nullptr) {
  std::promise<int> port_promise;
  std::future<int> port_future = port_promise.get_future();
  Clock::time_point first_send, last_byte;  // each written by one thread, read after both joined
  std::string receiver_error;
  std::thread receiver([&] {
    if (to >= 0) receiver_error = net.EnterInThisThread(to);
    int port = 0;
    const int fd =
        receiver_error.empty() ? Listen(to >= 0 ? net.Host(to) : net.CoordinatorHost(), &port) : -1;
    port_promise.set_value(fd < 0 ? -1 : port);
    if (fd < 0) return;
    pollfd p{fd, POLLIN, 0};
    const int conn = poll(&p, 1, 20'000) == 1 ? accept4(fd, nullptr, nullptr, SOCK_CLOEXEC) : -1;
    close(fd);
    if (conn < 0) {
      receiver_error = "no connection within 20 s";
      return;
    }
    std::vector<char> buf(1 << 16);
    size_t got = 0;
    for (ssize_t n; (n = recv(conn, buf.data(), buf.size(), 0)) > 0;) {
      got += n;
      last_byte = Clock::now();
    }
    close(conn);
    if (got != bytes) receiver_error = "received " + std::to_string(got) + " bytes";
  });
  std::string sender_error;
  std::thread sender([&] {
    const int port = port_future.get();
    if (port < 0) return;
    if (sender_error = net.EnterInThisThread(from); !sender_error.empty()) return;
    const int fd = Connect(to >= 0 ? net.Host(to) : net.CoordinatorHost(), port, 10'000);
    if (fd < 0) {
      sender_error = "connect failed";
      return;
    }
    std::vector<char> buf(1 << 16, 'x');
    first_send = Clock::now();
    for (size_t sent = 0; sent < bytes;) {
      const ssize_t n = send(fd, buf.data(), std::min(buf.size(), bytes - sent), MSG_NOSIGNAL);
      if (n <= 0) break;
      sent += n;
    }
    close(fd);
  });
  sender.join();
  receiver.join();
  if (receive_s != nullptr) *receive_s = std::chrono::duration<double>(last_byte - first_send).count();
  return receiver_error.empty() ? sender_error : receiver_error;
}

class NetHostsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (geteuid() != 0) GTEST_SKIP() << "needs root for ip netns (euid " << geteuid() << ")";
  }
};

TEST_F(NetHostsTest, HostsReachEachOtherAndTheRootAndCountTheirBytes) {
  NetHosts net({.hosts = 3});
  ASSERT_EQ(net.Create(), "");
  const LinkBytes before[3] = {*net.Bytes(0), *net.Bytes(1), *net.Bytes(2)};
  constexpr size_t kBytes = 4 << 20;
  ASSERT_EQ(Transfer(net, 1, 0, kBytes), "");
  ASSERT_EQ(Transfer(net, 2, -1, 1 << 20), "");
  const LinkBytes after[3] = {*net.Bytes(0), *net.Bytes(1), *net.Bytes(2)};
  // Payload plus headers went out of host 1 and into host 0; host 0 sent
  // only acknowledgements back.
  EXPECT_GE(after[1].sent - before[1].sent, kBytes);
  EXPECT_LT(after[1].sent - before[1].sent, kBytes * 11 / 10);
  EXPECT_GE(after[0].received - before[0].received, kBytes);
  EXPECT_LT(after[0].sent - before[0].sent, kBytes / 10);
  // Host 2 talked only to the root namespace: its megabyte, not host 1's.
  EXPECT_GE(after[2].sent - before[2].sent, 1u << 20);
  EXPECT_LT(after[2].received - before[2].received, kBytes / 10);
}

TEST_F(NetHostsTest, ShapedLinkHoldsItsRateInBothDirections) {
  constexpr uint64_t kRate = 80'000'000;  // 10 MB/s
  NetHosts net({.hosts = 2, .rate_bits_per_s = kRate});
  ASSERT_EQ(net.Create(), "");
  EXPECT_EQ(net.rate_bits_per_s(1), kRate);
  constexpr size_t kBytes = 3 << 20;
  // The receiver cannot get the bytes faster than the rate allows, less
  // one burst (ABurstAfterAnIdleLinkIsNoFasterThanTheRate pins the burst's
  // own rate); load only makes it slower.
  const double floor_s = (kBytes - kMinBurstBytes) / (kRate / 8.0);
  for (auto [from, to] : {std::pair{1, 0}, std::pair{0, 1}}) {
    double receive_s = 0;
    ASSERT_EQ(Transfer(net, from, to, kBytes, &receive_s), "");
    EXPECT_GE(receive_s, 0.95 * floor_s) << from << " -> " << to;
  }
  ASSERT_EQ(net.Shape(1, 0), "");
  EXPECT_EQ(net.rate_bits_per_s(1), 0u);
  RunResult tc = RunProcess({"/usr/sbin/tc", "qdisc", "show", "dev", net.Veth(1)});
  EXPECT_EQ(tc.out.find("tbf"), std::string::npos) << tc.out;
}

// A real link never goes faster than its rate. tbf's bucket alone lets a
// whole burst (kMinBurstBytes) through at memory speed after the link was
// idle, which made a step's short transfers faster than the rate; the peak
// bucket holds a burst to the rate too, past one offload packet.
TEST_F(NetHostsTest, ABurstAfterAnIdleLinkIsNoFasterThanTheRate) {
  constexpr uint64_t kRate = 80'000'000;  // 10 MB/s: the burst alone would take 52 ms
  NetHosts net({.hosts = 2, .rate_bits_per_s = kRate});
  ASSERT_EQ(net.Create(), "");
  constexpr size_t kBytes = kMinBurstBytes;
  const double peak_bytes_per_s = (kRate + kRate / kPeakRateExcess) / 8.0;
  const double floor_s = (kBytes - kPeakBucketBytes) / peak_bytes_per_s;
  // A fresh link: both tbf buckets are full.
  double receive_s = 0;
  ASSERT_EQ(Transfer(net, 1, 0, kBytes, &receive_s), "");
  EXPECT_GE(receive_s, 0.95 * floor_s);
}

TEST_F(NetHostsTest, LinkDownCutsTheHostAndUpRestoresIt) {
  NetHosts net({.hosts = 2});
  ASSERT_EQ(net.Create(), "");
  int port = 0;
  const int listener = Listen(net.CoordinatorHost(), &port);
  ASSERT_GE(listener, 0);
  auto connect_from_host1 = [&](int timeout_ms) {
    bool ok = false;
    std::thread t([&] {
      if (!net.EnterInThisThread(1).empty()) return;
      const int fd = Connect(net.CoordinatorHost(), port, timeout_ms);
      ok = fd >= 0;
      if (ok) close(fd);
    });
    t.join();
    return ok;
  };
  ASSERT_TRUE(connect_from_host1(10'000));
  ASSERT_TRUE(net.SetLink(1, false));
  EXPECT_FALSE(connect_from_host1(500));
  ASSERT_TRUE(net.SetLink(1, true));
  EXPECT_TRUE(connect_from_host1(10'000));
  close(listener);
}

TEST_F(NetHostsTest, TwoSetsAtOnceDoNotCollideAndEachRemovesOnlyItsOwn) {
  auto first = std::make_unique<NetHosts>(NetHostsOptions{.hosts = 1});
  NetHosts second({.hosts = 1});
  ASSERT_EQ(first->Create(), "");
  ASSERT_EQ(second.Create(), "");
  EXPECT_NE(first->Bridge(), second.Bridge());
  EXPECT_NE(first->Ns(0), second.Ns(0));
  EXPECT_NE(first->CoordinatorHost(), second.CoordinatorHost());
  const std::string ns = first->Ns(0), bridge = first->Bridge(), veth = first->Veth(0);
  first.reset();
  EXPECT_FALSE(std::filesystem::exists("/run/netns/" + ns));
  EXPECT_FALSE(std::filesystem::exists("/sys/class/net/" + bridge));
  EXPECT_FALSE(std::filesystem::exists("/sys/class/net/" + veth));
  EXPECT_TRUE(std::filesystem::exists("/run/netns/" + second.Ns(0)));
  EXPECT_EQ(Transfer(second, 0, -1, 1 << 16), "");
}

TEST_F(NetHostsTest, RemoveStaleDeletesWhatAKilledProcessLeft) {
  // The child makes a host and dies without its destructor (as SIGKILL
  // would); its names carry its pid.
  int pipefd[2];
  ASSERT_EQ(pipe(pipefd), 0);
  const pid_t child = fork();
  if (child == 0) {
    close(pipefd[0]);
    auto* net = new NetHosts({.hosts = 1});  // never deleted
    std::string names = net->Create().empty() ? net->Ns(0) + " " + net->Bridge() : "";
    (void)!write(pipefd[1], names.data(), names.size());
    _exit(0);
  }
  close(pipefd[1]);
  char buf[256] = {};
  const ssize_t n = read(pipefd[0], buf, sizeof buf - 1);
  close(pipefd[0]);
  int status = 0;
  waitpid(child, &status, 0);
  ASSERT_GT(n, 0) << "the child could not create its host";
  const std::string names(buf, n);
  const std::string ns = names.substr(0, names.find(' ')), bridge = names.substr(ns.size() + 1);
  ASSERT_TRUE(std::filesystem::exists("/run/netns/" + ns));
  NetHosts mine({.hosts = 1});  // alive: must survive the sweep
  ASSERT_EQ(mine.Create(), "");
  EXPECT_GE(NetHosts::RemoveStale(), 2);
  EXPECT_FALSE(std::filesystem::exists("/run/netns/" + ns));
  EXPECT_FALSE(std::filesystem::exists("/sys/class/net/" + bridge));
  EXPECT_TRUE(std::filesystem::exists("/run/netns/" + mine.Ns(0)));
}

TEST(ParseRateTest, UnitsOfTc) {
  EXPECT_EQ(ParseRate("1gbit"), 1'000'000'000u);
  EXPECT_EQ(ParseRate("2.5gbit"), 2'500'000'000u);
  EXPECT_EQ(ParseRate("100mbit"), 100'000'000u);
  EXPECT_EQ(ParseRate("64kbit"), 64'000u);
  EXPECT_EQ(ParseRate("1234"), 1234u);
  EXPECT_EQ(ParseRate("fast"), std::nullopt);
  EXPECT_EQ(ParseRate("1gb"), std::nullopt);
  EXPECT_EQ(ParseRate(""), std::nullopt);
}

}  // namespace
}  // namespace parallax::testing
