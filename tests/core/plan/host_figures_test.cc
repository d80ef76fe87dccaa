// The planner's machine figures and their sources (core/plan/host_figures.h).
#include "core/plan/host_figures.h"

#include <gtest/gtest.h>

namespace parallax::plan {
namespace {

// 2026-11-18 11:06:40 UTC.
constexpr int64_t kWhen = 1'795'000'000;

TEST(HostFiguresTest, TheJobFileBeatsAMeasurementWhichBeatsTheDefault) {
  const std::vector<HostFigures> hosts = {
      {.host = "a", .measured_unix_s = kWhen, .link_bytes_per_s = 1.25e9,
       .loopback_bytes_per_s = 4e9, .shm_bytes_per_s = 9e9},
      {.host = "b", .measured_unix_s = kWhen, .link_bytes_per_s = 1.25e8,
       .loopback_bytes_per_s = 5e9}};
  JobConfig::Plan plan;
  CostOptions cost;
  FigureSources s = ApplyFigures(plan, hosts, /*cluster_hosts=*/2, &cost);
  EXPECT_DOUBLE_EQ(cost.bandwidth_bytes_per_s, 1.25e8);  // the slowest host's link
  EXPECT_EQ(s.link, "measured on b at 2026-11-18 11:06 UTC");
  EXPECT_DOUBLE_EQ(cost.loopback_bytes_per_s, 4e9);
  EXPECT_EQ(s.loopback, "measured on a at 2026-11-18 11:06 UTC");
  EXPECT_DOUBLE_EQ(cost.shm_bytes_per_s, 9e9);  // b measured none
  EXPECT_EQ(s.collective, "default");
  EXPECT_DOUBLE_EQ(cost.collective_latency_s, kDefaultCollectiveLatencyS);

  plan.link_bytes_per_s = 3e9;
  plan.ps_rtt_us = 50;
  cost = {};
  s = ApplyFigures(plan, hosts, 2, &cost);
  EXPECT_DOUBLE_EQ(cost.bandwidth_bytes_per_s, 3e9);
  EXPECT_EQ(s.link, "job file [plan]");
  EXPECT_DOUBLE_EQ(cost.ps_rtt_s, 50e-6);
  EXPECT_EQ(s.ps_rtt, "job file [plan]");

  // Nothing measured, nothing set: the defaults.
  cost = {};
  s = ApplyFigures({}, {}, 2, &cost);
  EXPECT_DOUBLE_EQ(cost.bandwidth_bytes_per_s, kDefaultLinkBytesPerS);
  EXPECT_EQ(s.link, "default");
  EXPECT_EQ(s.loopback, "default");
}

TEST(HostFiguresTest, StoredAsJsonUnderTheHostsKey) {
  const HostFigures h{.host = "h1", .measured_unix_s = kWhen, .loopback_bytes_per_s = 4e9,
                      .shm_bytes_per_s = 9e9};
  EXPECT_EQ(HostFiguresKey("h1"), "host/h1/figures");
  StatusOr<HostFigures> back = ParseHostFigures(HostFiguresToJson(h));
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->host, "h1");
  EXPECT_EQ(back->measured_unix_s, kWhen);
  EXPECT_DOUBLE_EQ(back->loopback_bytes_per_s, 4e9);
  EXPECT_DOUBLE_EQ(back->shm_bytes_per_s, 9e9);
  EXPECT_DOUBLE_EQ(back->link_bytes_per_s, 0);
  StatusOr<HostFigures> bad = ParseHostFigures("[1, 2]");
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace parallax::plan
