// Placing a variable's partitions on PS shards so that the bytes each shard
// serves per step are balanced, from the measured row frequencies (a Zipf
// head makes some partitions much busier than others).
#ifndef PARALLAX_CORE_PLAN_PLACEMENT_H_
#define PARALLAX_CORE_PLAN_PLACEMENT_H_

#include <cstdint>
#include <functional>
#include <span>
#include <unordered_map>
#include <vector>

namespace parallax::plan {

// Expected load of each of `partitions` partitions: the sum of the
// frequencies of the rows `partition_of` maps to it. `row_frequency` maps a
// row to how often it is touched per step (any unit; absent rows: never).
std::vector<double> PartitionLoads(const std::unordered_map<int64_t, double>& row_frequency,
                                   uint32_t partitions,
                                   const std::function<uint32_t(int64_t)>& partition_of);

struct Placement {
  std::vector<uint32_t> partition_shard;  // partition → shard
  std::vector<double> shard_load;         // per shard
  // max shard load / mean shard load − 1: 0 is perfect balance.
  double imbalance() const;
};

// Longest-processing-time-first (partitions by decreasing load, each to the
// least-loaded shard, ties to the lowest id), then moves and swaps off the
// busiest shard while they lower its load. Deterministic.
Placement PlacePartitions(std::span<const double> partition_load, uint32_t shards);

}  // namespace parallax::plan

#endif  // PARALLAX_CORE_PLAN_PLACEMENT_H_
