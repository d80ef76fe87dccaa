#include "core/base/heap_retention.h"

#include <malloc.h>

#include <string>

namespace parallax {

Status RetainFreedHeapMemory(const HeapRetentionOptions& options) {
  // mallopt takes an int; both values fit (glibc caps the first at 32 MiB).
  if (options.mmap_threshold > (size_t{32} << 20) ||
      mallopt(M_MMAP_THRESHOLD, static_cast<int>(options.mmap_threshold)) != 1) {
    return InvalidArgument("glibc refused an mmap threshold of " +
                           std::to_string(options.mmap_threshold) +
                           " bytes; it takes at most 32 MiB");
  }
  if (options.trim_threshold > (size_t{1} << 30) ||
      mallopt(M_TRIM_THRESHOLD, static_cast<int>(options.trim_threshold)) != 1) {
    return InvalidArgument("glibc refused a trim threshold of " +
                           std::to_string(options.trim_threshold) +
                           " bytes; give at most 1 GiB");
  }
  return Status::Ok();
}

}  // namespace parallax
