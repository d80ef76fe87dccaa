// Choosing the number of partitions P of a large sparse variable the way
// Parallax does: time a few short trial attempts at values of P, fit
//   t(P) = b/P + a·(P−1) + c
// (b/P: work and bytes spread over more partitions; a·(P−1): per-partition
// overhead — messages, stragglers), and take the P in the tested range that
// minimises the fit.
//
//   PartitionSearch search({.start = 2, .max = 256});
//   while (auto p = search.Next()) search.Record(*p, TimeTrial(*p));
//   uint32_t best = search.Best();
//
// Next() doubles P from `start` while the time falls, then tries the value
// just below the first one that got worse (back), always at least
// `min_trials` values.
#ifndef PARALLAX_CORE_PLAN_PARTITION_SEARCH_H_
#define PARALLAX_CORE_PLAN_PARTITION_SEARCH_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "parallax/status.h"

namespace parallax::plan {

struct PartitionFit {
  double a = 0, b = 0, c = 0;
  double At(double p) const { return b / p + a * (p - 1) + c; }
};

struct Trial {
  uint32_t partitions = 0;
  double seconds = 0;  // per step
};

// Least squares of t(P) = b/P + a·(P−1) + c over the trials (at least 3
// distinct P). INVALID_ARGUMENT with fewer.
StatusOr<PartitionFit> FitPartitionCurve(const std::vector<Trial>& trials);

// The integer P in [lo, hi] minimising the fit.
uint32_t MinimizeFit(const PartitionFit& fit, uint32_t lo, uint32_t hi);

struct PartitionSearchOptions {
  uint32_t start = 1;  // first P tried (e.g. the number of shards)
  uint32_t max = 1024;  // never more (e.g. rows)
  int min_trials = 3;
  int max_trials = 8;
};

class PartitionSearch {
 public:
  explicit PartitionSearch(const PartitionSearchOptions& options);

  // The next P to try, or nullopt when the search is done.
  std::optional<uint32_t> Next() const;
  void Record(uint32_t partitions, double seconds);

  // The chosen P: the minimum of the fit within the tested range (the
  // fastest trial when the fit fails). REQUIRES: at least one Record().
  uint32_t Best() const;
  const std::vector<Trial>& trials() const { return trials_; }
  // One line per trial and the fit, for the job's events.
  std::string Describe() const;

 private:
  bool Tried(uint32_t p) const;

  PartitionSearchOptions options_;
  std::vector<Trial> trials_;
};

}  // namespace parallax::plan

#endif  // PARALLAX_CORE_PLAN_PARTITION_SEARCH_H_
