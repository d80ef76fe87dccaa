// The newest metric point of every rank of a job's current attempt, for
// `parallax status JOB`: loss, samples/s, the step-time breakdown and the
// bytes per step of each path counted at the transport.
#ifndef PARALLAX_CLI_JOB_METRICS_H_
#define PARALLAX_CLI_JOB_METRICS_H_

#include <cstdint>
#include <string>
#include <vector>

#include "parallax/status.h"

namespace parallax {
class CoordinatorClient;
}

namespace parallax::cli {

// Rows of a table (header first) of the newest point per rank of
// `attempt`, among the points with step > newest_step - 1000. Empty when
// there is none.
StatusOr<std::vector<std::vector<std::string>>> LatestMetricsTable(CoordinatorClient* coord,
                                                                   int64_t job_id, int attempt,
                                                                   int64_t newest_step);

// The same points as a JSON array text ([{"rank":0,"step":..,"loss":..,
// "throughput":..,"values":{..}}]).
StatusOr<std::string> LatestMetricsJson(CoordinatorClient* coord, int64_t job_id, int attempt,
                                        int64_t newest_step);

}  // namespace parallax::cli

#endif  // PARALLAX_CLI_JOB_METRICS_H_
