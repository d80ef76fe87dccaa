// The on-disk form of one PS partition checkpoint (schemas/ps_wire.md,
// "Checkpoint files"): a 64-byte header, then per row the id, the weights,
// the optimizer slots and (Adam) the row's step, then an FNV-1a 64 checksum
// of everything before it. Shards write it (ps/checkpoint.h); export reads
// it here, a chunk of rows at a time, without holding the whole partition;
// a resumed trainer reads a variable the PS held and it now holds here too.
#ifndef PARALLAX_CORE_PS_PARTITION_FILE_H_
#define PARALLAX_CORE_PS_PARTITION_FILE_H_

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "parallax/status.h"

namespace parallax::ps {

constexpr uint32_t kPartitionFileMagic = 0x4b435850;  // "PXCK"
constexpr uint32_t kPartitionFileFormat = 1;

struct PartitionFileHeader {
  uint32_t magic = kPartitionFileMagic;
  uint32_t format = kPartitionFileFormat;
  uint32_t variable = 0;
  uint32_t partition = 0;
  uint32_t partitions = 0;
  uint32_t scheme = 0;
  uint32_t dim = 0;
  uint32_t optimizer = 0;  // OptimizerType
  int64_t rows = 0;        // the variable's rows
  uint64_t count = 0;      // rows in this file
  int64_t applied = 0;
  int64_t version = 0;
};
static_assert(sizeof(PartitionFileHeader) == 64);

// FNV-1a 64 of n bytes, continuing from `h`.
uint64_t Fnv1a64(const char* p, size_t n, uint64_t h = 0xcbf29ce484222325ULL);

// "var<V>-part<P>.pxps".
std::string PartitionFileName(uint32_t var, uint32_t partition);

// Streams the rows of one partition file. Not thread-safe.
class PartitionFileReader {
 public:
  ~PartitionFileReader();
  // Opens `path`, reads and checks the header (magic, format, the size the
  // row count implies). Verifies the checksum first, in one streaming pass,
  // when `verify` is set. FAILED_PRECONDITION / IO_ERROR naming the file.
  static StatusOr<std::unique_ptr<PartitionFileReader>> Open(const std::string& path,
                                                             bool verify = true);

  const PartitionFileHeader& header() const { return header_; }

  // Up to `max_rows` next rows: ids into *ids, weights (ids->size() × dim)
  // into *weights; the optimizer state is skipped. Both empty at the end.
  Status Next(size_t max_rows, std::vector<int64_t>* ids, std::vector<float>* weights);
  // The same with each row's optimizer state: its slots into *s1 and *s2
  // (ids->size() × dim each; empty for an optimizer with fewer) and Adam's
  // step into *steps (ids->size(); empty for the others).
  Status NextWithState(size_t max_rows, std::vector<int64_t>* ids, std::vector<float>* weights,
                       std::vector<float>* s1, std::vector<float>* s2, std::vector<int64_t>* steps);

 private:
  PartitionFileReader() = default;
  std::string path_;
  std::FILE* file_ = nullptr;
  PartitionFileHeader header_;
  int slots_ = 0;
  bool adam_ = false;
  size_t row_bytes_ = 0;
  uint64_t read_ = 0;
};

}  // namespace parallax::ps

#endif  // PARALLAX_CORE_PS_PARTITION_FILE_H_
