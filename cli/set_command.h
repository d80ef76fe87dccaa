// `parallax set JOB consistency=async|ssp|sync [staleness=K]`: a running
// job's consistency mode switched at a step the coordinator picks
// (coordinator/service/consistency_switches.h).
#ifndef PARALLAX_CLI_SET_COMMAND_H_
#define PARALLAX_CLI_SET_COMMAND_H_

#include <chrono>
#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

#include "core/rpc/coordinator_client.h"
#include "parallax/status.h"

namespace parallax::cli {

// The settings' value for the coordinator ("async", "ssp:4", "sync"), from
// the NAME=VALUE words after JOB. INVALID_ARGUMENT naming the word and what
// is accepted for anything else (an unknown name, a repeated one, staleness
// without ssp, a value that does not parse).
StatusOr<std::string> ParseSetArguments(const std::vector<std::string>& words);

// Asks the coordinator to switch `job_id` to `consistency` and prints the
// step it picked. While some rank of the running attempt has not checked in
// (UNAVAILABLE) it asks again, for up to `wait`.
Status RunSetConsistency(CoordinatorClient& client, int64_t job_id, const std::string& consistency,
                         std::chrono::milliseconds wait, std::ostream& out);

}  // namespace parallax::cli

#endif  // PARALLAX_CLI_SET_COMMAND_H_
