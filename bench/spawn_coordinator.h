// Starts one parallax-coordinator process for a benchmark: listening on
// 127.0.0.1 with a port the kernel picks, its database and log under `dir`.
#pragma once

#include <sys/types.h>

#include <string>
#include <vector>

#include "parallax/status.h"

namespace parallax::bench {

struct SpawnedCoordinator {
  pid_t pid = -1;
  std::string address;  // 127.0.0.1:PORT
};

// Runs `bin --listen 127.0.0.1:0 --db DIR/state.db --port-file DIR/port
// EXTRA_ARGS...` with stderr to DIR/coordinator.log and waits up to
// `timeout_ms` for the port file.
// A benchmark's own temporary directory: <base>/<prefix>-XXXXXX, created
// ("" when it cannot be).
std::string MakeBenchDir(const std::string& prefix, const std::string& base = "/tmp");

// `name` in the directory of the running binary (bench and daemons are
// built side by side in bin/).
std::string NextToThisBinary(const std::string& name);

StatusOr<SpawnedCoordinator> SpawnCoordinator(const std::string& bin, const std::string& dir,
                                              const std::vector<std::string>& extra_args,
                                              int timeout_ms = 20'000);

}  // namespace parallax::bench
