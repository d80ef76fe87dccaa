// What a host's own data paths sustain, measured in well under a second when
// an agent starts (parallax-agent --calibrate) or `parallax plan --measure`
// runs: loopback TCP (a worker and the PS shard on its own host) and a copy
// through a shared-memory segment (the shared-memory all-reduce and PS
// values). The planner's cost model takes them in place of its defaults
// (core/plan/host_figures.h).
#ifndef PARALLAX_CORE_COMM_HOST_PROBE_H_
#define PARALLAX_CORE_COMM_HOST_PROBE_H_

#include <chrono>
#include <cstddef>
#include <string>

#include "parallax/status.h"

namespace parallax::comm {

struct HostProbeOptions {
  size_t bytes = 16u << 20;  // per round; a multiple of 4096
  int rounds = 3;            // the best round counts (the others warm caches up)
  // The whole probe's limit: a round that would pass it fails the probe.
  std::chrono::milliseconds deadline{2000};
  std::string shm_directory = "/dev/shm";
};

struct HostProbe {
  double loopback_bytes_per_s = 0;  // one direction of a TCP connection over 127.0.0.1
  double shm_bytes_per_s = 0;       // one pass (a copy) over a shared-memory buffer
};

// Both figures. DEADLINE_EXCEEDED when the rounds did not fit the deadline,
// UNAVAILABLE when a socket or the segment could not be made (says which).
StatusOr<HostProbe> ProbeHost(const HostProbeOptions& options);

// One figure each (the parts of ProbeHost).
StatusOr<double> MeasureLoopback(const HostProbeOptions& options);
StatusOr<double> MeasureSharedMemory(const HostProbeOptions& options);

}  // namespace parallax::comm

#endif  // PARALLAX_CORE_COMM_HOST_PROBE_H_
