// The checkpoint of a dynamic table (core/ps/dynamic_table.h): one file per
// shard holding partitions of it, <dir>/var<V>-shard<S>.pxdt, since the
// table's state is the shard's (one hash index, one eviction order, one
// admission sketch over all the partitions it owns), and resuming on the
// same shards restores exactly that: a resumed run evicts and admits as the
// uninterrupted one. Under another partitioning every shard's file is read
// and its rows re-split by the hash of their ids (ps/checkpoint.h).
//
// File: a 48-byte header (magic "PXDT", format 1, variable, shard, shards,
// partitions, scheme, dim, optimizer, the number of partitions held, the
// length of the table's state), per partition held its index, steps applied
// and version (24 bytes), the table's state (DynamicTable::Serialize), then
// an FNV-1a 64 checksum of everything before it (schemas/ps_wire.md,
// "Checkpoint files").
#ifndef PARALLAX_CORE_PS_DYNAMIC_FILE_H_
#define PARALLAX_CORE_PS_DYNAMIC_FILE_H_

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/ps/dynamic_table.h"
#include "core/ps/plan.h"
#include "parallax/status.h"

namespace parallax::ps {

constexpr uint32_t kDynamicFileMagic = 0x54445850;  // "PXDT"
constexpr uint32_t kDynamicFileFormat = 1;

struct DynamicFileHeader {
  uint32_t magic = kDynamicFileMagic;
  uint32_t format = kDynamicFileFormat;
  uint32_t variable = 0;
  uint32_t shard = 0;
  uint32_t shards = 0;      // of the plan that wrote it
  uint32_t partitions = 0;  // of the variable
  uint32_t scheme = 0;
  uint32_t dim = 0;
  uint32_t optimizer = 0;  // OptimizerType
  uint32_t parts = 0;      // partitions held by this shard
  uint64_t state_bytes = 0;
};
static_assert(sizeof(DynamicFileHeader) == 48);

struct DynamicFilePart {
  uint32_t partition = 0;
  uint32_t unused = 0;
  int64_t applied = 0;  // sync steps applied
  int64_t version = 0;  // updates applied
};
static_assert(sizeof(DynamicFilePart) == 24);

struct DynamicFile {
  std::string path;
  DynamicFileHeader header;
  std::vector<DynamicFilePart> parts;
  std::string state;  // DynamicTable::Serialize
};

// "var<V>-shard<S>.pxdt".
std::string DynamicFileName(uint32_t var, uint32_t shard);
// The files a checkpoint of `var` holds under its plan: one per shard that
// owns a partition of it, in shard order.
std::vector<std::string> DynamicFileNames(const VariableSpec& var);

// The options of shard `shard`'s table of `var`: the variable's settings,
// its share of max_rows (by partitions owned, rounded up), and seeds fixed
// by the plan, so that every run of the plan behaves alike.
DynamicTableOptions ShardTableOptions(const VariableSpec& var, uint32_t shard);

// The file's bytes, checksum included.
std::string EncodeDynamicFile(const DynamicFileHeader& header,
                              const std::vector<DynamicFilePart>& parts, std::string_view state);
// Reads and verifies one file: checksum, magic, format, sizes, and that it
// holds variable `var` with its dim and optimizer. FAILED_PRECONDITION /
// IO_ERROR naming the file and what is wrong.
StatusOr<DynamicFile> ReadDynamicFile(const std::string& path, const VariableSpec& var);
// Every shard's file of `var` in `dir` (the partitioning they were written
// under need not be var's), checked to be one checkpoint: the same shards
// and partitioning, every partition held by exactly one file.
// FAILED_PRECONDITION naming the directory and the missing or extra part.
StatusOr<std::vector<DynamicFile>> ReadDynamicFiles(const std::string& dir,
                                                    const VariableSpec& var);
// The table that `file` holds, as shard file.header.shard of its plan had it.
StatusOr<std::unique_ptr<DynamicTable>> TableOfFile(const DynamicFile& file,
                                                    const VariableSpec& var);

}  // namespace parallax::ps

#endif  // PARALLAX_CORE_PS_DYNAMIC_FILE_H_
