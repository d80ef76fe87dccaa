// Reading a job file the way every command that sends one does (`submit`,
// `run`): at most the coordinator's limit plus one byte, so a file over the
// limit (or /dev/zero) is refused at once, naming the limit, instead of being
// read whole and sent to be refused.
#ifndef PARALLAX_CLI_JOB_FILE_H_
#define PARALLAX_CLI_JOB_FILE_H_

#include <cstddef>
#include <string>
#include <vector>

#include "core/config/job_config.h"
#include "parallax/status.h"

namespace parallax::cli {

// The text of `path`. INVALID_ARGUMENT naming the file and the limit when it
// holds more than `limit` bytes (default: schemas/coordinator.thrift
// MAX_JOB_TEXT_BYTES); IO_ERROR naming the file when it cannot be read.
StatusOr<std::string> ReadJobFile(const std::string& path, size_t limit = 0);

// Lines warning about the [trainer.env] names of `config` that agents refuse
// unless started with --allow-env (core/base/env_allow_list.h); empty when
// every name is in the safe set.
std::vector<std::string> EnvWarnings(const JobConfig& config, const std::string& path);

}  // namespace parallax::cli

#endif  // PARALLAX_CLI_JOB_FILE_H_
