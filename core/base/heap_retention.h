// Keeping freed heap memory in the process instead of giving it back to the
// kernel after every message.
//
// A PS shard and a trainer rank allocate and free buffers of a few MiB
// every step (message frames, pulled rows). With glibc's defaults, blocks
// above the mmap threshold get their own mapping, and freed memory at the top
// of the heap beyond the trim threshold is returned; either way the next
// step's buffers fault in fresh, zeroed pages. On W3 that was about 1,800
// page faults a step in each shard: the data's whole size, every step.
// Raising both thresholds keeps the pages: the process's resident size stays
// at its peak instead.
#ifndef PARALLAX_CORE_BASE_HEAP_RETENTION_H_
#define PARALLAX_CORE_BASE_HEAP_RETENTION_H_

#include <cstddef>

#include "parallax/status.h"

namespace parallax {

struct HeapRetentionOptions {
  // Blocks at least this big get their own mapping (and lose their pages when
  // freed). glibc refuses more than 32 MiB on 64-bit.
  size_t mmap_threshold = size_t{32} << 20;
  // Free memory at the top of the heap is returned above this much.
  size_t trim_threshold = size_t{512} << 20;
};

// Sets glibc's thresholds for the whole process (mallopt); call it once,
// early in main. INVALID_ARGUMENT names a threshold glibc refused.
Status RetainFreedHeapMemory(const HeapRetentionOptions& options = {});

}  // namespace parallax

#endif  // PARALLAX_CORE_BASE_HEAP_RETENTION_H_
