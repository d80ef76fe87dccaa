#include "core/plan/placement.h"

#include <algorithm>
#include <cstddef>
#include <numeric>

namespace parallax::plan {

std::vector<double> PartitionLoads(const std::unordered_map<int64_t, double>& row_frequency,
                                   uint32_t partitions,
                                   const std::function<uint32_t(int64_t)>& partition_of) {
  std::vector<double> load(std::max<uint32_t>(partitions, 1), 0.0);
  for (const auto& [row, frequency] : row_frequency) {
    load[partition_of(row) % load.size()] += frequency;
  }
  return load;
}

double Placement::imbalance() const {
  if (shard_load.empty()) return 0;
  const double total = std::accumulate(shard_load.begin(), shard_load.end(), 0.0);
  if (total <= 0) return 0;
  const double mean = total / shard_load.size();
  return *std::max_element(shard_load.begin(), shard_load.end()) / mean - 1;
}

Placement PlacePartitions(std::span<const double> partition_load, uint32_t shards) {
  Placement placement;
  shards = std::max<uint32_t>(shards, 1);
  placement.partition_shard.assign(partition_load.size(), 0);
  placement.shard_load.assign(shards, 0.0);
  std::vector<uint32_t> order(partition_load.size());
  std::iota(order.begin(), order.end(), 0u);
  std::stable_sort(order.begin(), order.end(), [&](uint32_t a, uint32_t b) {
    return partition_load[a] > partition_load[b];
  });
  for (uint32_t p : order) {
    const auto least = std::min_element(placement.shard_load.begin(), placement.shard_load.end());
    const auto shard = static_cast<uint32_t>(least - placement.shard_load.begin());
    placement.partition_shard[p] = shard;
    *least += partition_load[p];
  }
  // Refine: move a partition off the busiest shard, or swap one of its
  // partitions with a lighter one of another shard, while that lowers the
  // busiest shard's load. Each accepted change lowers the maximum, so this
  // ends; the bound keeps it cheap for thousands of partitions.
  auto& load = placement.shard_load;
  for (int round = 0; round < 4 * static_cast<int>(partition_load.size()) + 16; ++round) {
    const auto max_it = std::max_element(load.begin(), load.end());
    const auto hi = static_cast<uint32_t>(max_it - load.begin());
    double best_gain = 1e-12 * *max_it;
    int best_p = -1, best_q = -1;
    uint32_t best_to = 0;
    for (size_t p = 0; p < partition_load.size(); ++p) {
      if (placement.partition_shard[p] != hi) continue;
      for (uint32_t to = 0; to < shards; ++to) {
        if (to == hi) continue;
        // Move p to `to`: the new pair maximum must fall below the old one.
        const double moved = std::max(load[hi] - partition_load[p], load[to] + partition_load[p]);
        if (load[hi] - moved > best_gain) {
          best_gain = load[hi] - moved;
          best_p = static_cast<int>(p), best_q = -1, best_to = to;
        }
      }
      for (size_t q = 0; q < partition_load.size(); ++q) {
        const uint32_t to = placement.partition_shard[q];
        if (to == hi || partition_load[q] >= partition_load[p]) continue;
        const double delta = partition_load[p] - partition_load[q];
        const double swapped = std::max(load[hi] - delta, load[to] + delta);
        if (load[hi] - swapped > best_gain) {
          best_gain = load[hi] - swapped;
          best_p = static_cast<int>(p), best_q = static_cast<int>(q), best_to = to;
        }
      }
    }
    if (best_p < 0) break;
    load[hi] -= partition_load[best_p];
    load[best_to] += partition_load[best_p];
    placement.partition_shard[best_p] = best_to;
    if (best_q >= 0) {
      load[best_to] -= partition_load[best_q];
      load[hi] += partition_load[best_q];
      placement.partition_shard[best_q] = hi;
    }
  }
  return placement;
}

}  // namespace parallax::plan
