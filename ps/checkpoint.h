// Checkpoint files of PS variables. A fixed table has one file per
// partition, <dir>/var<V>-part<P>.pxps, holding the partition's rows, their optimizer
// state and the partition's step and version, followed by a 64-bit FNV-1a
// checksum of everything before it. Written atomically: a temp file in the
// same directory, fsync, rename, fsync of the directory. A dynamic table
// has one per shard (SaveDynamic, core/ps/dynamic_file.h).
#ifndef PARALLAX_PS_CHECKPOINT_H_
#define PARALLAX_PS_CHECKPOINT_H_

#include <cstdint>
#include <string>
#include <vector>

#include "core/ps/dynamic_file.h"
#include "core/ps/dynamic_table.h"
#include "core/ps/partition_file.h"
#include "core/ps/plan.h"
#include "parallax/status.h"
#include "ps/variable_table.h"

namespace parallax::ps {

struct PartitionSnapshot {
  uint32_t partition = 0;
  int64_t applied = 0;  // sync steps applied
  int64_t version = 0;  // updates applied
  std::vector<int64_t> ids;
  std::vector<float> weights;  // ids.size() × dim
  std::vector<float> slots[2];
  std::vector<int64_t> steps;  // Adam only
};

// PartitionFileName(var, partition) names the file (core/ps/partition_file.h,
// which also reads it back in chunks for export).

// Writes the rows of `table` that belong to `partition`.
Status SavePartition(const std::string& dir, const VariableTable& table, uint32_t partition,
                     int64_t applied, int64_t version);

// Writes shard `shard`'s table of dynamic variable `var` (of a plan of
// `shards` shards) with the steps applied and version of the partitions it
// holds: <dir>/var<V>-shard<S>.pxdt (core/ps/dynamic_file.h), atomically.
Status SaveDynamic(const std::string& dir, const VariableSpec& var, uint32_t shard,
                   uint32_t shards, const std::vector<DynamicFilePart>& parts,
                   const DynamicTable& table);

// Reads and verifies (checksum, then variable, partition, rows, dim,
// partitioning and optimizer against `var`) one partition file. Nothing is
// changed on failure; the message names the file and what differs.
StatusOr<PartitionSnapshot> LoadPartition(const std::string& dir, const VariableSpec& var,
                                          uint32_t partition);

// Replaces `table`'s rows by the rows of `snapshots` (already verified).
void RestoreTable(VariableTable* table, const std::vector<PartitionSnapshot>& snapshots);

}  // namespace parallax::ps

#endif  // PARALLAX_PS_CHECKPOINT_H_
