// Checkpoint files of PS variables. A fixed table has one file per
// partition, <dir>/var<V>-part<P>.pxps, holding the partition's rows, their optimizer
// state and the partition's step and version, followed by a 64-bit FNV-1a
// checksum of everything before it. Written atomically: a temp file in the
// same directory, fsync, rename, fsync of the directory. A dynamic table
// has one per shard (SaveDynamic, core/ps/dynamic_file.h).
#ifndef PARALLAX_PS_CHECKPOINT_H_
#define PARALLAX_PS_CHECKPOINT_H_

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "core/optim/optimizer.h"
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

// A variable a checkpoint held on workers (a plan has moved it to the PS
// since): its worker copy `values` (rows × dim row-major; a dense variable's
// last row may be short) and optimizer `state` (dense.pxck's entry, with a
// DenseOptimizer's one step count or a SparseOptimizer's one a row) as the
// snapshots of the `owned` partitions of `var`: every row of each, steps
// applied = `step` (the checkpoint's), version 0. FAILED_PRECONDITION naming
// `source` when the sizes do not fit `var`, a step count is negative or a
// value not finite.
StatusOr<std::vector<PartitionSnapshot>> PartitionsFromWorkerCopy(
    std::span<const float> values, const optim::OptimizerState& state, const VariableSpec& var,
    std::span<const uint32_t> owned, int64_t step, const std::string& source);

// Replaces `table`'s rows by the rows of `snapshots` (already verified).
void RestoreTable(VariableTable* table, const std::vector<PartitionSnapshot>& snapshots);

}  // namespace parallax::ps

#endif  // PARALLAX_PS_CHECKPOINT_H_
