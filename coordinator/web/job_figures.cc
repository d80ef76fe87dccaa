#include "coordinator/web/job_figures.h"

#include <algorithm>

namespace parallax::coordinator {

std::map<int, MetricRecord> NewestPerRank(const std::vector<MetricRecord>& points, int attempt) {
  std::map<int, MetricRecord> newest;
  for (const MetricRecord& p : points) {
    if (p.attempt != attempt) continue;
    auto it = newest.find(p.rank);
    if (it == newest.end() || p.step >= it->second.step) newest[p.rank] = p;
  }
  return newest;
}

JobFigures SummarizeJob(const std::vector<MetricRecord>& points, int attempt) {
  JobFigures f;
  const std::map<int, MetricRecord> newest = NewestPerRank(points, attempt);
  if (newest.empty()) return f;
  f.has_points = true;
  f.ranks = static_cast<int>(newest.size());
  std::map<std::string, double> sums;
  for (const auto& [rank, p] : newest) {
    f.step = std::max(f.step, p.step);
    f.loss += p.loss;
    f.samples_per_second += p.throughput;
    for (const auto& [name, v] : p.values) sums[name] += v;
  }
  f.loss /= f.ranks;
  for (const auto& [name, sum] : sums) f.values[name] = sum / f.ranks;

  const int rank = newest.begin()->first;
  const MetricRecord* first = nullptr;
  for (const MetricRecord& p : points) {
    if (p.attempt == attempt && p.rank == rank && (first == nullptr || p.step < first->step)) {
      first = &p;
    }
  }
  const MetricRecord& last = newest.begin()->second;
  if (first != nullptr && last.time > first->time && last.step > first->step) {
    f.steps_per_second = static_cast<double>(last.step - first->step) * 1000.0 /
                         static_cast<double>(last.time - first->time);
  }
  return f;
}

namespace {

// Per step, the mean of `field` over the ranks of the newest attempt that
// reported it, times `scale`.
template <typename Field>
std::vector<CurvePoint> PerStep(const std::vector<MetricRecord>& points, Field field,
                                double scale) {
  struct Acc {
    int attempt = -1;
    double total = 0;
    int n = 0;
  };
  std::map<int64_t, Acc> steps;
  for (const MetricRecord& p : points) {
    Acc& a = steps[p.step];
    if (p.attempt > a.attempt) a = Acc{p.attempt, 0, 0};
    if (p.attempt < a.attempt) continue;
    a.total += field(p);
    ++a.n;
  }
  std::vector<CurvePoint> out;
  out.reserve(steps.size());
  for (const auto& [step, a] : steps) {
    out.push_back({static_cast<double>(step), a.total / a.n * scale});
  }
  return out;
}

// Averages runs of neighbouring points so that at most max_points remain.
std::vector<CurvePoint> Thin(std::vector<CurvePoint> curve, size_t max_points) {
  if (max_points == 0 || curve.size() <= max_points) return curve;
  const size_t per = (curve.size() + max_points - 1) / max_points;
  std::vector<CurvePoint> out;
  for (size_t i = 0; i < curve.size(); i += per) {
    const size_t end = std::min(curve.size(), i + per);
    CurvePoint mean;
    for (size_t j = i; j < end; ++j) {
      mean.step += curve[j].step;
      mean.value += curve[j].value;
    }
    mean.step /= static_cast<double>(end - i);
    mean.value /= static_cast<double>(end - i);
    out.push_back(mean);
  }
  return out;
}

}  // namespace

std::vector<CurvePoint> LossCurve(const std::vector<MetricRecord>& points, size_t max_points) {
  return Thin(PerStep(
                  points, [](const MetricRecord& p) { return p.loss; }, 1.0),
              max_points);
}

std::vector<CurvePoint> ThroughputCurve(const std::vector<MetricRecord>& points, int ranks,
                                        size_t max_points) {
  return Thin(PerStep(
                  points, [](const MetricRecord& p) { return p.throughput; }, ranks),
              max_points);
}

}  // namespace parallax::coordinator
