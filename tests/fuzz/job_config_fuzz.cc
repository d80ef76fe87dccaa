// libFuzzer target: arbitrary bytes as a job file. The loader must return a
// config or an INVALID_ARGUMENT with a message, never crash, hang or touch
// memory it does not own. Paths are not checked (no filesystem access).
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "core/config/job_config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  parallax::JobLoadOptions options;
  options.check_paths = false;
  parallax::StatusOr<parallax::JobConfig> config =
      parallax::ParseJobConfig(text, "fuzz.toml", options);
  if (config.ok()) {
    if (config->job.name.empty() || config->job.workers < 1) std::abort();
  } else if (config.status().code() != parallax::StatusCode::kInvalidArgument ||
             config.status().message().empty()) {
    std::abort();
  }
  return 0;
}
