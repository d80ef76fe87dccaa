// UpdatesFile: a PS shard's count of updates applied (the sum of its
// partitions' versions, ShardCore::UpdatesApplied), kept in a small file
// mapped MAP_SHARED in its task directory and written after every update,
// before the update is answered. The page cache keeps what was written when
// the process dies, even by SIGKILL, so the shard's next generation on the
// same host reads its predecessor's last count and tells how many updates
// the predecessor applied after the checkpoint it loads: those are lost
// (docs/RELIABILITY.md, "A lost PS shard"). No fsync: a shard alone dies
// with its host alive; when the host dies its successor runs elsewhere and
// cannot read the file anyway.
//
// File: 8 bytes "PXUPDv1\n", then the count, a little-endian int64.
//
// Thread-safety: Set from one thread (the shard's loop); Read from any
// process.
#ifndef PARALLAX_PS_UPDATES_FILE_H_
#define PARALLAX_PS_UPDATES_FILE_H_

#include <cstdint>
#include <memory>
#include <string>

#include "parallax/status.h"

namespace parallax::ps {

class UpdatesFile {
 public:
  // Creates (or truncates) `path`, maps it and stores `initial`. IO_ERROR
  // naming the path when it cannot.
  static StatusOr<std::unique_ptr<UpdatesFile>> Create(const std::string& path, int64_t initial);
  ~UpdatesFile();
  UpdatesFile(const UpdatesFile&) = delete;
  UpdatesFile& operator=(const UpdatesFile&) = delete;

  // Stores the count (an atomic store into the mapping: a reader never sees
  // half of it).
  void Set(int64_t count);
  int64_t Get() const;

  // The count in the file at `path` (another process's). NOT_FOUND when
  // there is none, INVALID_ARGUMENT when it is not such a file.
  static StatusOr<int64_t> Read(const std::string& path);

 private:
  UpdatesFile(void* map, int64_t* count) : map_(map), count_(count) {}
  void* map_;
  int64_t* count_;  // inside map_
};

}  // namespace parallax::ps

#endif  // PARALLAX_PS_UPDATES_FILE_H_
