// /metrics: the coordinator's figures in the Prometheus text exposition
// format (version 0.0.4). Names follow Prometheus conventions: a
// `parallax_` prefix, base units in the name (`_seconds`, `_bytes`),
// `_total` on counters; no `job` or `instance` label (a scraper adds its
// own), so jobs are `job_id` and `job_name`. Series labelled with a job
// exist only while the job runs (RUNNING or PLACING), so the number of
// series stays bounded by what the cluster runs now. The reference is
// docs/OPERATIONS.md, "Metrics".
#ifndef PARALLAX_COORDINATOR_HTTP_METRICS_H_
#define PARALLAX_COORDINATOR_HTTP_METRICS_H_

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "coordinator/service/rpc_stats.h"
#include "coordinator/store/job_state.h"
#include "coordinator/web/http_server.h"
#include "coordinator/web/job_figures.h"
#include "schemas/coordinator_types.h"

namespace parallax::coordinator {

// Writes metric families in the text format: escapes label values and help
// texts, prints numbers in their shortest exact form.
class PrometheusText {
 public:
  using Labels = std::vector<std::pair<std::string, std::string>>;
  // Starts a family; type is "gauge", "counter" or "histogram".
  void Family(std::string_view name, std::string_view type, std::string_view help);
  // One sample line: `name{labels} value`.
  void Sample(std::string_view name, const Labels& labels, double value);
  // The _bucket (cumulative, with +Inf), _sum and _count lines of a
  // histogram whose per-bucket counts are `counts` (one more than `bounds`).
  void Histogram(std::string_view name, const Labels& labels, const std::vector<double>& bounds,
                 const std::vector<int64_t>& counts, double sum);
  const std::string& text() const { return out_; }

 private:
  std::string out_;
};

struct JobSeries {
  int64_t id = 0;
  std::string name;
  JobState state = JobState::kRunning;
  int64_t step = 0;
  int attempt = 0;
  int restarts = 0;
  JobFigures figures;
};

struct ClusterFigures {
  std::map<JobState, int64_t> jobs_by_state;
  std::vector<rpc::AgentInfo> agents;
  std::vector<RpcStats::Method> rpc;
  std::vector<JobSeries> live_jobs;
  std::vector<rpc::ShardStatsReport> shards;  // of live jobs
  HttpServerStats http;                       // the web server answering /metrics
};

// The whole /metrics page.
std::string RenderPrometheusText(const ClusterFigures& figures);

}  // namespace parallax::coordinator

#endif  // PARALLAX_COORDINATOR_HTTP_METRICS_H_
