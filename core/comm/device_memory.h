// Device (CUDA) memory a trainer hands over by address, e.g. a torch
// tensor's data_ptr(): which device holds it, and copying it to the host.
// Compiled without CUDA, every call fails with FAILED_PRECONDITION saying
// so. The CUDA runtime stays inside device_memory.cc.
#ifndef PARALLAX_CORE_COMM_DEVICE_MEMORY_H_
#define PARALLAX_CORE_COMM_DEVICE_MEMORY_H_

#include <cstddef>

#include "parallax/status.h"

namespace parallax::comm {

// The CUDA device ordinal `ptr` lives on. FAILED_PRECONDITION when the build
// has no CUDA or `ptr` is not device memory (host or unknown memory).
StatusOr<int> DeviceOfPointer(const void* ptr);

// Copies `bytes` from device memory at `src` to host memory at `dst`,
// waiting for the copy (and for work queued before it on the default stream).
Status CopyDeviceToHost(const void* src, void* dst, size_t bytes);

}  // namespace parallax::comm

#endif  // PARALLAX_CORE_COMM_DEVICE_MEMORY_H_
