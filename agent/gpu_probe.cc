#include "agent/gpu_probe.h"

#include <dlfcn.h>

namespace parallax::agent {

int CountCudaDevices(std::string* why) {
  void* lib = nullptr;
  for (const char* name : {"libcudart.so", "libcudart.so.12", "libcudart.so.11.0"}) {
    lib = dlopen(name, RTLD_NOW | RTLD_LOCAL);
    if (lib) break;
  }
  if (!lib) {
    if (why) *why = "no CUDA runtime (libcudart.so) found";
    return 0;
  }
  using GetDeviceCount = int (*)(int*);
  auto get_count = reinterpret_cast<GetDeviceCount>(dlsym(lib, "cudaGetDeviceCount"));
  if (!get_count) {
    if (why) *why = "libcudart.so has no cudaGetDeviceCount";
    return 0;
  }
  int count = 0;
  int err = get_count(&count);
  // The runtime stays loaded: unloading CUDA is not reliably safe.
  if (err != 0 || count < 0) {
    if (why) *why = "cudaGetDeviceCount failed with error " + std::to_string(err) + " (no device or driver)";
    return 0;
  }
  if (why) *why = std::to_string(count) + " CUDA devices";
  return count;
}

}  // namespace parallax::agent
