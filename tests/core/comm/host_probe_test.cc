// The host probe (core/comm/host_probe.h): real loopback sockets and a real
// shared-memory segment; the figures are positive and the probe keeps to its
// deadline. No figure is asserted: it depends on the machine.
#include "core/comm/host_probe.h"

#include <gtest/gtest.h>

namespace parallax::comm {
namespace {

TEST(HostProbeTest, MeasuresLoopbackAndSharedMemoryQuickly) {
  HostProbeOptions o;
  o.bytes = 4u << 20;
  const auto start = std::chrono::steady_clock::now();
  StatusOr<HostProbe> probe = ProbeHost(o);
  const auto took = std::chrono::steady_clock::now() - start;
  ASSERT_TRUE(probe.ok()) << probe.status().ToString();
  EXPECT_GT(probe->loopback_bytes_per_s, 0);
  EXPECT_GT(probe->shm_bytes_per_s, 0);
  // Two deadlines of 2 s at most, whatever the load.
  EXPECT_LT(took, std::chrono::seconds(5));
}

TEST(HostProbeTest, AProbeThatCannotFitItsDeadlineSaysSo) {
  HostProbeOptions o;
  o.bytes = 256u << 20;
  o.rounds = 1000;
  o.deadline = std::chrono::milliseconds(1);
  StatusOr<double> loopback = MeasureLoopback(o);
  ASSERT_FALSE(loopback.ok());
  EXPECT_EQ(loopback.status().code(), StatusCode::kDeadlineExceeded) << loopback.status().ToString();
}

TEST(HostProbeTest, AMissingShmDirectoryIsUnavailable) {
  HostProbeOptions o;
  o.shm_directory = "/no/such/dir";
  StatusOr<double> shm = MeasureSharedMemory(o);
  ASSERT_FALSE(shm.ok());
  EXPECT_NE(shm.status().message().find("/no/such/dir"), std::string::npos)
      << shm.status().ToString();
}

}  // namespace
}  // namespace parallax::comm
