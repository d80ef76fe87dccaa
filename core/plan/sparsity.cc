#include "core/plan/sparsity.h"

#include <algorithm>
#include <functional>

namespace parallax::plan {

Sparsity MeasureSparsity(std::span<const std::vector<int64_t>> batches, int64_t rows,
                         int workers_per_host) {
  Sparsity s;
  s.batches = static_cast<int>(batches.size());
  if (rows <= 0 || batches.empty()) return s;
  workers_per_host = std::max(1, workers_per_host);
  s.row_frequency.assign(rows, 0.0);
  // Distinct counting with a per-row stamp: no hashing, one pass per batch.
  std::vector<int32_t> seen(rows, -1), seen_host(rows, -1);
  double distinct_sum = 0, host_distinct_sum = 0;
  int host_groups = 0;
  int64_t host_distinct = 0;
  for (size_t b = 0; b < batches.size(); ++b) {
    const auto group = static_cast<int32_t>(b / workers_per_host);
    if (b % workers_per_host == 0) {
      if (b > 0) {
        host_distinct_sum += host_distinct;
        ++host_groups;
      }
      host_distinct = 0;
    }
    int64_t distinct = 0;
    for (int64_t id : batches[b]) {
      if (id < 0 || id >= rows) continue;
      s.row_frequency[id] += 1;
      if (seen[id] != static_cast<int32_t>(b)) {
        seen[id] = static_cast<int32_t>(b);
        ++distinct;
      }
      if (seen_host[id] != group) {
        seen_host[id] = group;
        ++host_distinct;
      }
    }
    distinct_sum += distinct;
  }
  host_distinct_sum += host_distinct;
  ++host_groups;
  const double n = static_cast<double>(batches.size());
  s.alpha = distinct_sum / n / static_cast<double>(rows);
  s.alpha_host = host_distinct_sum / host_groups / static_cast<double>(rows);
  double total = 0;
  for (double& f : s.row_frequency) {
    f /= n;
    total += f;
  }
  if (total > 0) {
    std::vector<double> sorted = s.row_frequency;
    const size_t top = std::max<size_t>(1, sorted.size() / 100);
    std::nth_element(sorted.begin(), sorted.begin() + (top - 1), sorted.end(), std::greater<>());
    double head = 0;
    for (size_t i = 0; i < top; ++i) head += sorted[i];
    s.top1pct_share = head / total;
  }
  return s;
}

}  // namespace parallax::plan
