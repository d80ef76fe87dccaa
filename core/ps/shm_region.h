// Same-host shared memory for PS values (schemas/ps_wire.md, "Shared
// memory"). A worker creates one region per same-host shard and names it in
// an ATTACH request; afterwards gradients and rows of that connection's
// requests travel through the region and the ZeroMQ messages carry only the
// header, the ids and two offsets.
#ifndef PARALLAX_CORE_PS_SHM_REGION_H_
#define PARALLAX_CORE_PS_SHM_REGION_H_

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>

#include "parallax/status.h"

namespace parallax::ps {

// A mapped POSIX shared memory object (shm_open + mmap, read-write).
class ShmRegion {
 public:
  ~ShmRegion();
  ShmRegion(const ShmRegion&) = delete;
  ShmRegion& operator=(const ShmRegion&) = delete;

  // The first kHeaderBytes of a region hold its own name (NUL-terminated):
  // Attach checks them, so a shard on another machine (or in another IPC
  // namespace) that happens to find an object of the same name refuses it.
  static constexpr size_t kHeaderBytes = 256;

  // Creates a new object `name` ("/px-ps-...", mode 0600) of `bytes` and maps
  // it. The memory is reserved up front (posix_fallocate), so a full
  // /dev/shm fails here with a clear error instead of a SIGBUS later.
  static StatusOr<std::unique_ptr<ShmRegion>> Create(const std::string& name, size_t bytes);

  // Maps the existing object `name`. Refuses a name that is not a Parallax
  // region ("/px-ps-" and no other '/'), an object under 4 KiB or over
  // `max_bytes`, and one that does not start with its name.
  static StatusOr<std::unique_ptr<ShmRegion>> Attach(const std::string& name, size_t max_bytes);

  // A fresh region name for this process: "/px-ps-<pid>-<n>-<random>".
  static std::string NewName();

  // Removes the name; the mappings stay valid. Idempotent.
  void Unlink();

  char* data() { return data_; }
  size_t size() const { return size_; }
  const std::string& name() const { return name_; }
  // True if [offset, offset + bytes) lies inside the region.
  bool Contains(uint64_t offset, uint64_t bytes) const {
    return offset <= size_ && bytes <= size_ - offset;
  }

 private:
  ShmRegion(std::string name, char* data, size_t size, bool owner)
      : name_(std::move(name)), data_(data), size_(size), linked_(owner) {}

  const std::string name_;
  char* const data_;
  const size_t size_;
  bool linked_;  // the creator still has to unlink the name
};

// First-fit allocator of byte ranges [begin, end) of a region (the worker
// side). Ranges are 64-byte aligned. Not thread-safe.
class ShmArena {
 public:
  ShmArena(uint64_t begin, uint64_t end);

  // The offset of a free range of at least `bytes` (> 0), or nullopt when
  // none is large enough (the caller then sends the values inline).
  std::optional<uint64_t> Allocate(size_t bytes);
  // Returns a range from Allocate. Adjacent free ranges merge.
  void Free(uint64_t offset);

  size_t free_bytes() const;

 private:
  std::map<uint64_t, uint64_t> free_;  // offset → size
  std::map<uint64_t, uint64_t> used_;  // offset → size
};

}  // namespace parallax::ps

#endif  // PARALLAX_CORE_PS_SHM_REGION_H_
