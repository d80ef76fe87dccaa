// The statistics every C++ benchmark reports over its runs, one JSON line
// each (docs/PERFORMANCE.md): the median, the fastest and the slowest run.
// One definition, so that "median" means the same in every bench: the
// middle value of an odd count, the mean of the two middle values of an
// even one.
#ifndef PARALLAX_BENCH_BENCH_STATS_H_
#define PARALLAX_BENCH_BENCH_STATS_H_

#include <algorithm>
#include <limits>
#include <utility>
#include <vector>

namespace parallax::bench {

struct Spread {
  double median = std::numeric_limits<double>::quiet_NaN();
  double min = std::numeric_limits<double>::quiet_NaN();
  double max = std::numeric_limits<double>::quiet_NaN();
};

// NaN each when `v` is empty (a JSON line then says null, not a figure).
inline Spread SpreadOf(std::vector<double> v) {
  Spread s;
  if (v.empty()) return s;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  s.median = n % 2 == 1 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
  s.min = v.front();
  s.max = v.back();
  return s;
}

inline double Median(std::vector<double> v) { return SpreadOf(std::move(v)).median; }

}  // namespace parallax::bench

#endif  // PARALLAX_BENCH_BENCH_STATS_H_
