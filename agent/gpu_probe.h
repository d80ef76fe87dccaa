// Counting GPUs without a hard dependency on CUDA.
#ifndef PARALLAX_AGENT_GPU_PROBE_H_
#define PARALLAX_AGENT_GPU_PROBE_H_

#include <string>

namespace parallax::agent {

// The number of CUDA devices, through cudaGetDeviceCount in the CUDA runtime
// loaded with dlopen. 0 when there is no runtime or no device; `why` (when
// not null) then says which.
int CountCudaDevices(std::string* why = nullptr);

}  // namespace parallax::agent

#endif  // PARALLAX_AGENT_GPU_PROBE_H_
