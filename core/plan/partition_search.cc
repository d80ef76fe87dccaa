#include "core/plan/partition_search.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <set>

namespace parallax::plan {

StatusOr<PartitionFit> FitPartitionCurve(const std::vector<Trial>& trials) {
  std::set<uint32_t> distinct;
  for (const Trial& t : trials) distinct.insert(t.partitions);
  if (distinct.size() < 3 || distinct.count(0) > 0) {
    return InvalidArgument("fitting t(P) = b/P + a(P-1) + c needs trials at 3 or more distinct P >= 1, got " +
                           std::to_string(distinct.size()));
  }
  // Normal equations for x = (b, a, c), features f = (1/P, P−1, 1).
  double m[3][4] = {};
  for (const Trial& t : trials) {
    const double p = t.partitions;
    const double f[3] = {1.0 / p, p - 1, 1.0};
    for (int i = 0; i < 3; ++i) {
      for (int j = 0; j < 3; ++j) m[i][j] += f[i] * f[j];
      m[i][3] += f[i] * t.seconds;
    }
  }
  // Gaussian elimination with partial pivoting.
  for (int col = 0; col < 3; ++col) {
    int pivot = col;
    for (int r = col + 1; r < 3; ++r) {
      if (std::fabs(m[r][col]) > std::fabs(m[pivot][col])) pivot = r;
    }
    if (std::fabs(m[pivot][col]) < 1e-300) return InvalidArgument("the trials do not determine the fit");
    std::swap(m[col], m[pivot]);
    for (int r = 0; r < 3; ++r) {
      if (r == col) continue;
      const double k = m[r][col] / m[col][col];
      for (int c = col; c < 4; ++c) m[r][c] -= k * m[col][c];
    }
  }
  PartitionFit fit;
  fit.b = m[0][3] / m[0][0];
  fit.a = m[1][3] / m[1][1];
  fit.c = m[2][3] / m[2][2];
  return fit;
}

uint32_t MinimizeFit(const PartitionFit& fit, uint32_t lo, uint32_t hi) {
  lo = std::max<uint32_t>(lo, 1);
  hi = std::max(hi, lo);
  // With a, b > 0 the curve is convex with its minimum at sqrt(b/a); check
  // the integers around it and the ends (covers every other sign case).
  std::vector<double> candidates = {static_cast<double>(lo), static_cast<double>(hi)};
  if (fit.a > 0 && fit.b > 0) {
    const double star = std::sqrt(fit.b / fit.a);
    candidates.push_back(std::floor(star));
    candidates.push_back(std::ceil(star));
  }
  uint32_t best = lo;
  double best_t = fit.At(lo);
  for (double c : candidates) {
    if (c < lo || c > hi) continue;
    const auto p = static_cast<uint32_t>(c);
    if (fit.At(p) < best_t) {
      best_t = fit.At(p);
      best = p;
    }
  }
  return best;
}

PartitionSearch::PartitionSearch(const PartitionSearchOptions& options) : options_(options) {
  options_.start = std::max<uint32_t>(1, std::min(options_.start, options_.max));
}

bool PartitionSearch::Tried(uint32_t p) const {
  return std::any_of(trials_.begin(), trials_.end(),
                     [p](const Trial& t) { return t.partitions == p; });
}

std::optional<uint32_t> PartitionSearch::Next() const {
  if (trials_.empty()) return options_.start;
  if (static_cast<int>(trials_.size()) >= options_.max_trials) return std::nullopt;
  // Doubling phase: continue while every doubling got faster.
  const Trial& last = trials_.back();
  bool improving = true;
  for (size_t i = 1; i < trials_.size(); ++i) {
    if (trials_[i].partitions != trials_[i - 1].partitions * 2 ||
        trials_[i].seconds >= trials_[i - 1].seconds) {
      improving = false;
      break;
    }
  }
  if (improving && last.partitions * 2 <= options_.max && !Tried(last.partitions * 2)) {
    return last.partitions * 2;
  }
  // Back: between the best trial and its slower neighbours.
  const auto best = std::min_element(trials_.begin(), trials_.end(),
                                     [](const Trial& x, const Trial& y) { return x.seconds < y.seconds; });
  const uint32_t b = best->partitions;
  const uint32_t candidates[] = {b + b / 2, b > 1 ? b - std::max<uint32_t>(1, b / 4) : 0u,
                                 b / 2, b * 2, b * 4};
  if (static_cast<int>(trials_.size()) < options_.min_trials) {
    for (uint32_t c : candidates) {
      if (c >= 1 && c <= options_.max && !Tried(c)) return c;
    }
  }
  return std::nullopt;
}

void PartitionSearch::Record(uint32_t partitions, double seconds) {
  trials_.push_back(Trial{partitions, seconds});
}

uint32_t PartitionSearch::Best() const {
  uint32_t lo = UINT32_MAX, hi = 0;
  for (const Trial& t : trials_) {
    lo = std::min(lo, t.partitions);
    hi = std::max(hi, t.partitions);
  }
  StatusOr<PartitionFit> fit = FitPartitionCurve(trials_);
  if (fit.ok()) return MinimizeFit(*fit, lo, hi);
  const auto best = std::min_element(trials_.begin(), trials_.end(),
                                     [](const Trial& x, const Trial& y) { return x.seconds < y.seconds; });
  return best->partitions;
}

std::string PartitionSearch::Describe() const {
  std::string out;
  char buf[160];
  for (const Trial& t : trials_) {
    std::snprintf(buf, sizeof(buf), "P=%u: %.3f ms/step; ", t.partitions, t.seconds * 1e3);
    out += buf;
  }
  StatusOr<PartitionFit> fit = FitPartitionCurve(trials_);
  if (fit.ok()) {
    std::snprintf(buf, sizeof(buf), "fit t(P) = %.3g/P + %.3g(P-1) + %.3g s; chosen P=%u", fit->b,
                  fit->a, fit->c, Best());
  } else if (!trials_.empty()) {
    std::snprintf(buf, sizeof(buf), "no fit (%s); chosen P=%u (fastest)",
                  fit.status().message().c_str(), Best());
  } else {
    std::snprintf(buf, sizeof(buf), "no trials");
  }
  return out + buf;
}

}  // namespace parallax::plan
