// ShmSegment: the shared-memory file through which the ranks of one host
// reduce (shm_group.h). One rank (the host's leader) creates it, the others
// attach by path, and once every rank has mapped it the creator removes the
// name: from then on nothing is left in the directory, whatever happens to
// the processes, and the memory goes back to the system when the last of
// them exits.
//
// A name exists only while its creator holds a shared flock on the file (the
// file is made unnamed with O_TMPFILE, locked, sized and only then linked),
// so a file named "px-comm-*" that nobody has locked was left by a creator
// that died between Create() and Unlink(): RemoveStale() deletes those.
//
// Not thread-safe; the mapping itself is shared by design.
#ifndef PARALLAX_CORE_COMM_SHM_SEGMENT_H_
#define PARALLAX_CORE_COMM_SHM_SEGMENT_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "parallax/status.h"

namespace parallax::comm {

class ShmSegment {
 public:
  ~ShmSegment();  // unmaps; a creator that did not Unlink() does it here
  ShmSegment(const ShmSegment&) = delete;
  ShmSegment& operator=(const ShmSegment&) = delete;

  // Makes "<directory>/px-comm-<random>" of `bytes` (a multiple of 4096),
  // reserved up front (posix_fallocate: a full directory fails here, not
  // with a SIGBUS later), mapped, zeroed but for a random nonce in its first
  // 8 bytes. UNAVAILABLE says what was needed and what the directory had.
  static StatusOr<std::unique_ptr<ShmSegment>> Create(const std::string& directory, size_t bytes);

  // Maps the segment at `path` (pages mapped up front, MAP_POPULATE, so no
  // collective pays for first touches); refuses one whose size is not `bytes` or
  // whose first 8 bytes are not `nonce` (not the file its creator made).
  static StatusOr<std::unique_ptr<ShmSegment>> Attach(const std::string& path, size_t bytes,
                                                      uint64_t nonce);

  // Deletes the "px-comm-*" files in `directory` that no creator holds.
  // Returns how many it deleted.
  static int RemoveStale(const std::string& directory);

  // Creator: removes the name (the mappings stay). Idempotent.
  void Unlink();

  char* data() const { return data_; }
  size_t size() const { return size_; }
  const std::string& path() const { return path_; }
  uint64_t nonce() const;

 private:
  ShmSegment(std::string path, char* data, size_t size, int lock_fd)
      : path_(std::move(path)), data_(data), size_(size), lock_fd_(lock_fd) {}

  const std::string path_;
  char* const data_;
  const size_t size_;
  int lock_fd_;  // creator, until Unlink(): holds the flock; -1 otherwise
};

}  // namespace parallax::comm

#endif  // PARALLAX_CORE_COMM_SHM_SEGMENT_H_
