// The planner's machine figures and their sources (core/plan/host_figures.h).
#include "core/plan/host_figures.h"
#include "schemas/kv_keys.h"

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
  EXPECT_EQ(kv_keys::HostFigures("h1"), "host/h1/figures");
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

TEST(HostFiguresTest, TheTrainersCallsBeatTheDefaultsAndTheJobFileBeatsThem) {
  std::vector<HostFigures> hosts(2);
  hosts[0].host = hosts[1].host = "node";  // namespaces: one hostname, two addresses
  hosts[0].address = "10.0.0.1";
  hosts[1].address = "10.0.0.2";
  hosts[0].link_bytes_per_s = 5e9;  // an agent's figure: the trainers' wins
  const MeasuredCalls job7{.measured_unix_s = kWhen, .job_id = 7, .workers = 2, .hosts = 2};
  for (int i = 0; i < 2; ++i) {
    hosts[i].collective_calls = hosts[i].ps_calls = job7;
    hosts[i].collective_calls.collective_latency_s = 1e-3 * (i + 1);
    hosts[i].ps_calls.ps_rtt_s = 4e-4 / (i + 1);
  }
  hosts[0].link_calls = job7;
  hosts[0].link_calls.job_id = 6;  // each kind keeps the job that measured it
  hosts[0].link_calls.link_bytes_per_s = 1.2e8;
  hosts[0].link_calls.link_peer = "10.0.0.2";
  CostOptions cost;
  FigureSources s = ApplyFigures({}, hosts, 2, &cost);
  // The slowest host's: the longer round trip. The collective call is
  // shown, not planned with (the default stands in for the all-gather
  // path's CPU work, which the cost model leaves out).
  EXPECT_DOUBLE_EQ(cost.collective_latency_s, kDefaultCollectiveLatencyS);
  EXPECT_EQ(s.collective,
            "default; measured by job 7's trainers on node (10.0.0.2) at 2026-11-18 11:06 UTC, "
            "2 workers on 2 hosts: 2000 us, not used (the cost model leaves out the all-gather "
            "path's CPU work)");
  EXPECT_DOUBLE_EQ(cost.ps_rtt_s, 4e-4);
  EXPECT_NE(s.ps_rtt.find("on node (10.0.0.1)"), std::string::npos) << s.ps_rtt;
  EXPECT_DOUBLE_EQ(cost.bandwidth_bytes_per_s, 1.2e8);
  EXPECT_NE(s.link.find("(toward 10.0.0.2)"), std::string::npos) << s.link;
  EXPECT_EQ(s.link.rfind("measured by job 6's trainers", 0), 0u) << s.link;

  JobConfig::Plan plan;
  plan.collective_latency_us = 30;
  plan.ps_rtt_us = 50;
  plan.link_bytes_per_s = 1e9;
  cost = {};
  s = ApplyFigures(plan, hosts, 2, &cost);
  EXPECT_DOUBLE_EQ(cost.collective_latency_s, 30e-6);
  EXPECT_DOUBLE_EQ(cost.ps_rtt_s, 50e-6);
  EXPECT_DOUBLE_EQ(cost.bandwidth_bytes_per_s, 1e9);
  EXPECT_EQ(s.collective, "job file [plan]");
  EXPECT_EQ(s.ps_rtt, "job file [plan]");
  EXPECT_EQ(s.link, "job file [plan]");
}

TEST(HostFiguresTest, TheTrainersCallsAreStoredAsJsonUnderTheHostsAddress) {
  const MeasuredCalls c{.measured_unix_s = kWhen, .job_id = 3, .workers = 8, .hosts = 8,
                        .collective_latency_s = 2e-3, .allreduce_call_s = 5e-2,
                        .allreduce_bytes = 4, .ps_rtt_s = 1e-3, .ps_pull_s = 9e-3,
                        .ps_pull_rows = 3000, .link_bytes_per_s = 1.2e8,
                        .link_peer = "10.0.0.2"};
  EXPECT_EQ(MeasuredCallsKey("10.0.0.1", CallKind::kPs), "host/10.0.0.1/calls/ps");
  EXPECT_EQ(MeasuredCallsKey("10.0.0.1", CallKind::kLink), "host/10.0.0.1/calls/link");
  StatusOr<MeasuredCalls> back = ParseMeasuredCalls(MeasuredCallsToJson(c));
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->job_id, 3);
  EXPECT_EQ(back->workers, 8);
  EXPECT_DOUBLE_EQ(back->collective_latency_s, 2e-3);
  EXPECT_DOUBLE_EQ(back->ps_rtt_s, 1e-3);
  EXPECT_DOUBLE_EQ(back->ps_pull_rows, 3000);
  EXPECT_DOUBLE_EQ(back->link_bytes_per_s, 1.2e8);
  EXPECT_EQ(back->link_peer, "10.0.0.2");
  EXPECT_EQ(ParseMeasuredCalls("{\"job_id\": 3}").status().code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace parallax::plan
