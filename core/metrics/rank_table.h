// The per-rank table of a job's newest metric points: what `parallax status
// JOB` prints and what the job's web page shows, built in one place so the
// two show the same columns (RankTableTest compares them).
#ifndef PARALLAX_CORE_METRICS_RANK_TABLE_H_
#define PARALLAX_CORE_METRICS_RANK_TABLE_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace parallax {

// One rank's newest point. `values` must outlive the call.
struct RankPoint {
  int rank = 0;
  int64_t step = 0;
  double loss = 0;
  double throughput = 0;  // samples (or tokens) per second
  const std::map<std::string, double>* values = nullptr;
};

enum class RankTableStyle {
  kTerminal,  // compact cells ("1.2KB/3.4KB", "12.34ms"), for a terminal's columns
  kPage,      // spaced cells ("1.2 KB / 3.4 KB", "12.34 ms"), for the web page
};

struct RankTable {
  // rank, step, loss, samples/s, compute, dense wait, sparse wait, then
  // "<path> S/R" (bytes sent / received per step) for every path of
  // schemas/metric_names.h, and when a point has row-cache values "cache
  // hits" (the share of a step's distinct rows the caches served).
  std::vector<std::string> columns;
  std::vector<std::vector<std::string>> rows;  // one per point, in the given order
};

RankTable BuildRankTable(const std::vector<RankPoint>& points, RankTableStyle style);

}  // namespace parallax

#endif  // PARALLAX_CORE_METRICS_RANK_TABLE_H_
