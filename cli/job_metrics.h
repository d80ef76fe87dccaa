// The newest metric point of every rank of a job's current attempt, for
// `parallax status JOB`: loss, samples/s, the step-time breakdown and the
// bytes per step of each path counted at the transport; and every point of
// the attempt, for `parallax status JOB --json --points`.
#ifndef PARALLAX_CLI_JOB_METRICS_H_
#define PARALLAX_CLI_JOB_METRICS_H_

#include <cstdint>
#include <string>
#include <vector>

#include "parallax/status.h"

namespace parallax {
class CoordinatorClient;
namespace rpc {
class MetricPoint;
class ShardStatsReport;
}
}  // namespace parallax

namespace parallax::cli {

// Rows of a table (header first) of the newest point per rank of
// `attempt`, among the points with step > newest_step - 1000. Empty when
// there is none. `ranks`, the job's workers: when that many ranks have a
// point among the last few steps, those are all that is read.
StatusOr<std::vector<std::vector<std::string>>> LatestMetricsTable(CoordinatorClient* coord,
                                                                   int64_t job_id, int attempt,
                                                                   int64_t newest_step, int ranks);

// The same points as a JSON array text ([{"rank":0,"step":..,"loss":..,
// "throughput":..,"values":{..}}]).
StatusOr<std::string> LatestMetricsJson(CoordinatorClient* coord, int64_t job_id, int attempt,
                                        int64_t newest_step, int ranks);

// Every point of `attempt` among `points`, in their order, as a JSON array
// text of objects like LatestMetricsJson's.
std::string AttemptPointsJson(const std::vector<rpc::MetricPoint>& points, int attempt);

// Every point the coordinator holds of `attempt` of the job, in step order
// (then rank), as AttemptPointsJson above: `parallax status JOB --json
// --points`. As many as the job reported: a long job with a point every step
// has thousands per rank.
StatusOr<std::string> AttemptPointsJson(CoordinatorClient* coord, int64_t job_id, int attempt);

// The dynamic tables of the job's PS shards (their newest reports, while the
// job runs): per table the counters summed over shards (rows, admitted,
// not_admitted_reads, dropped_gradients, evicted_ttl, evicted_budget,
// bytes) and "shards", each shard's own, as a JSON object text keyed by
// table; "{}" when there is none.
StatusOr<std::string> DynamicTablesJson(CoordinatorClient* coord, int64_t job_id);
std::string DynamicTablesJson(const std::vector<rpc::ShardStatsReport>& shards);
// The same as rows of a table (header first), one per table; empty when
// there is none.
StatusOr<std::vector<std::vector<std::string>>> DynamicTablesTable(CoordinatorClient* coord,
                                                                   int64_t job_id);

}  // namespace parallax::cli

#endif  // PARALLAX_CLI_JOB_METRICS_H_
