// What a job's metric points (MetricRecord, what trainer ranks report every
// metrics_every steps) add up to, for /metrics and the web pages: the newest
// point per rank, the job's figures now, and per-step curves. Pure
// functions of the points.
#ifndef PARALLAX_COORDINATOR_JOB_FIGURES_H_
#define PARALLAX_COORDINATOR_JOB_FIGURES_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "coordinator/store/state_store.h"

namespace parallax::coordinator {

// The newest point of each rank of `attempt`, by rank. `points` in (step,
// rank) order, as StateStore::ListMetrics returns them.
std::map<int, MetricRecord> NewestPerRank(const std::vector<MetricRecord>& points, int attempt);

struct JobFigures {
  bool has_points = false;        // false: nothing below is known
  int ranks = 0;                  // ranks with a point
  int64_t step = 0;               // newest step of any rank
  double loss = 0;                // mean of the ranks' newest losses
  double samples_per_second = 0;  // sum of the ranks' newest throughputs
  // Steps per second between the oldest and newest point of the lowest rank
  // (coordinator receive times); negative when fewer than two points or no
  // time passed.
  double steps_per_second = -1;
  // Mean over ranks of each named value of the newest points
  // (allreduce_sent_bytes, compute_ms, ...; schemas/coordinator.thrift).
  std::map<std::string, double> values;
};

// The figures of `attempt` from `points` (in ListMetrics order).
JobFigures SummarizeJob(const std::vector<MetricRecord>& points, int attempt);

struct CurvePoint {
  double step = 0;
  double value = 0;
};

// Per step (newest attempt that reported it): the mean loss over ranks, and
// the job's samples per second (the ranks' mean times `ranks`, so that a
// step only some ranks reported yet counts whole); at most `max_points`
// points, averaging neighbouring steps when there are more. In step order.
std::vector<CurvePoint> LossCurve(const std::vector<MetricRecord>& points, size_t max_points);
std::vector<CurvePoint> ThroughputCurve(const std::vector<MetricRecord>& points, int ranks,
                                        size_t max_points);

}  // namespace parallax::coordinator

#endif  // PARALLAX_COORDINATOR_JOB_FIGURES_H_
