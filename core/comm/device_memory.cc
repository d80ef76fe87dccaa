#include "core/comm/device_memory.h"

#include <cstdint>
#include <string>

#if PARALLAX_HAVE_NCCL
#include <cuda_runtime_api.h>
#endif

namespace parallax::comm {

#if PARALLAX_HAVE_NCCL

namespace {

std::string CudaError(cudaError_t e) {
  return std::string(cudaGetErrorName(e)) + ": " + cudaGetErrorString(e);
}

}  // namespace

StatusOr<int> DeviceOfPointer(const void* ptr) {
  cudaPointerAttributes attributes{};
  const cudaError_t e = cudaPointerGetAttributes(&attributes, ptr);
  if (e != cudaSuccess) {
    cudaGetLastError();  // clear it: the next CUDA call must not see it
    return FailedPrecondition("address " + std::to_string(reinterpret_cast<uintptr_t>(ptr)) +
                              " is not CUDA memory (" + CudaError(e) + ")");
  }
  if (attributes.type != cudaMemoryTypeDevice && attributes.type != cudaMemoryTypeManaged) {
    return FailedPrecondition("address " + std::to_string(reinterpret_cast<uintptr_t>(ptr)) +
                              " is host memory, not a CUDA device's");
  }
  return attributes.device;
}

Status CopyDeviceToHost(const void* src, void* dst, size_t bytes) {
  const cudaError_t e = cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToHost);
  if (e != cudaSuccess)
    return Internal("copying " + std::to_string(bytes) + " bytes from the device: " + CudaError(e));
  return Status::Ok();
}

#else

StatusOr<int> DeviceOfPointer(const void*) {
  return FailedPrecondition(
      "this build has no CUDA (PARALLAX_WITH_CUDA found no toolkit and "
      "NCCL under /usr/local/cuda); device memory cannot be used");
}

Status CopyDeviceToHost(const void*, void*, size_t) { return DeviceOfPointer(nullptr).status(); }

#endif

}  // namespace parallax::comm
