// Loading a job file into a JobConfig (include/parallax/job_config.h). Every
// key is documented in schemas/job.md.
//
// Loading never half-succeeds: either every key is valid and a JobConfig is
// returned, or an INVALID_ARGUMENT Status lists every problem found, one per
// line, each as "FILE:LINE:COLUMN: key 'a.b': what was expected".
#ifndef PARALLAX_CORE_CONFIG_JOB_CONFIG_H_
#define PARALLAX_CORE_CONFIG_JOB_CONFIG_H_

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "parallax/job_config.h"
#include "parallax/status.h"

namespace parallax {

struct JobLoadOptions {
  // Check that paths named in the file (data, checkpoint_dir's parent) exist.
  // The coordinator turns this off: paths are resolved on the hosts that use
  // them, which need not be the coordinator's.
  bool check_paths = true;
  // With check_paths, where a missing path goes. Null: it is an error and
  // the file is refused. Otherwise each one is appended here as a line
  // "FILE:LINE:COLUMN: key 'a.b': path '...' does not exist ..." and the
  // file loads: `parallax submit` warns (the data need not be on the
  // submitting host) and an agent refuses a task whose paths its host lacks.
  std::vector<std::string>* missing_paths = nullptr;
};

// Parses and validates `text`. `source` names it in error messages and its
// directory is the base for relative paths ("" or "<submitted>": the current
// directory).
StatusOr<JobConfig> ParseJobConfig(std::string_view text, std::string_view source,
                                   const JobLoadOptions& options = {});

// Reads `path` and calls ParseJobConfig. A file that cannot be read is an
// IO_ERROR naming the path.
StatusOr<JobConfig> LoadJobConfig(const std::string& path, const JobLoadOptions& options = {});

}  // namespace parallax

#endif  // PARALLAX_CORE_CONFIG_JOB_CONFIG_H_
