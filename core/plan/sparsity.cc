#include "core/plan/sparsity.h"

#include <algorithm>
#include <functional>
#include <unordered_set>

namespace parallax::plan {

Sparsity MeasureSparsity(std::span<const std::vector<int64_t>> batches, int64_t rows,
                         int workers_per_host) {
  Sparsity s;
  s.batches = static_cast<int>(batches.size());
  if (rows <= 0 || batches.empty()) return s;
  workers_per_host = std::max(1, workers_per_host);
  double distinct_sum = 0, host_distinct_sum = 0;
  int host_groups = 0;
  std::unordered_set<int64_t> batch_rows, host_rows;
  for (size_t b = 0; b < batches.size(); ++b) {
    if (b % workers_per_host == 0 && b > 0) {
      host_distinct_sum += static_cast<double>(host_rows.size());
      ++host_groups;
      host_rows.clear();
    }
    batch_rows.clear();
    for (int64_t id : batches[b]) {
      if (id < 0 || id >= rows) continue;
      s.row_frequency[id] += 1;
      batch_rows.insert(id);
      host_rows.insert(id);
    }
    distinct_sum += static_cast<double>(batch_rows.size());
    for (int64_t id : batch_rows) ++s.row_batches[id];
  }
  host_distinct_sum += static_cast<double>(host_rows.size());
  ++host_groups;
  const double n = static_cast<double>(batches.size());
  s.alpha = distinct_sum / n / static_cast<double>(rows);
  s.alpha_host = host_distinct_sum / host_groups / static_cast<double>(rows);
  std::vector<double> sorted;
  sorted.reserve(s.row_frequency.size());
  double total = 0;
  for (auto& [id, f] : s.row_frequency) {
    f /= n;
    total += f;
    sorted.push_back(f);
  }
  if (total > 0) {
    // The top 1% of all rows; rows never touched add nothing to it.
    const size_t top = std::min<size_t>(sorted.size(), std::max<int64_t>(1, rows / 100));
    std::nth_element(sorted.begin(), sorted.begin() + (top - 1), sorted.end(), std::greater<>());
    double head = 0;
    for (size_t i = 0; i < top; ++i) head += sorted[i];
    s.top1pct_share = head / total;
  }
  return s;
}

}  // namespace parallax::plan
