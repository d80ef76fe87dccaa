// What the trainers' call probe makes of a timed all-reduce call
// (core/calibration/call_probe.h); the probe itself runs in the
// plan-agreement integration test, on real ranks and shards.
#include "core/calibration/call_probe.h"

#include <gtest/gtest.h>

namespace parallax::calibration {
namespace {

TEST(CallProbeTest, CollectiveLatencyIsTheCallLessItsBytesOverTheModelsRounds) {
  plan::CostOptions cost;
  cost.bandwidth_bytes_per_s = 1e8;
  cost.shm_allreduce = false;
  // Gloo's ring at 4 ranks on 4 hosts: 1 MB moves 2·3/4 MB per direction,
  // 15 ms at 1e8 B/s; the rest of a 24 ms call is 1.5·3 rounds of c.
  const plan::ClusterShape ring{.workers = 4, .hosts = 4, .shards = 0};
  EXPECT_NEAR(CollectiveLatencyFromCall(24e-3, 1e6, ring, cost), 9e-3 / 4.5, 1e-9);
  // Hierarchical through shared memory at 4 ranks on 2 hosts: one rank per
  // host on the link (1 MB·2·1/2 = 1 MB, 10 ms), 2 passes over the buffer
  // at shm_bytes_per_s, the fixed shared-memory call, then 1.5·1 rounds.
  cost.shm_allreduce = true;
  cost.shm_bytes_per_s = 1e9;
  cost.shm_call_s = 1e-4;
  const plan::ClusterShape two_hosts{.workers = 4, .hosts = 2, .shards = 0};
  EXPECT_NEAR(CollectiveLatencyFromCall(15.1e-3, 1e6, two_hosts, cost),
              (15.1e-3 - 10e-3 - 2e-3 - 1e-4) / 1.5, 1e-9);
}

TEST(CallProbeTest, NothingToMeasureWithoutACollectiveTheModelCounts) {
  plan::CostOptions cost;
  // One rank; one host whose ranks all-reduce through shared memory.
  EXPECT_EQ(CollectiveLatencyFromCall(1e-3, 4, {.workers = 1, .hosts = 1}, cost), 0);
  EXPECT_EQ(CollectiveLatencyFromCall(1e-3, 4, {.workers = 2, .hosts = 1}, cost), 0);
  // A call faster than its own bytes at the model's rate: the floor.
  cost.shm_allreduce = false;
  cost.bandwidth_bytes_per_s = 1e6;
  EXPECT_EQ(CollectiveLatencyFromCall(1e-3, 1e6, {.workers = 2, .hosts = 2}, cost), 1e-6);
}

}  // namespace
}  // namespace parallax::calibration
