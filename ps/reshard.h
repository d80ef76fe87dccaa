// Resharding a PS checkpoint at LOAD: a checkpoint written under one
// partitioning (partition count or scheme, and so one shard count) is read
// under another. Every partition file the checkpoint holds for the variable
// is read and verified; each row goes to the partition of the new
// partitioning that its id falls in (PartitionOf), with its weights,
// optimizer slots and Adam step unchanged. The shard keeps only the new
// partitions it owns. A partition's `applied` (sync steps) is the largest of
// the old ones (equal in sync mode, where every partition applies every
// step); its `version` (updates applied, the base of async staleness) is the
// largest too, so no worker's pull looks newer than the shard.
#ifndef PARALLAX_PS_RESHARD_H_
#define PARALLAX_PS_RESHARD_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/ps/dynamic_file.h"
#include "core/ps/dynamic_table.h"
#include "core/ps/plan.h"
#include "parallax/status.h"
#include "ps/checkpoint.h"

namespace parallax::ps {

// The snapshots of the partitions `owned` of `var` (the new plan's
// variable) from the checkpoint in `dir`. When the checkpoint has the same
// partitioning (read from the header of var<V>-part0.pxps), each owned
// partition's file is read as is (LoadPartition); otherwise every old file
// is read and its rows re-split. Nothing is changed on failure; the message
// names the file and what differs (rows, dim, optimizer, a missing part).
StatusOr<std::vector<PartitionSnapshot>> LoadOwnedPartitions(const std::string& dir,
                                                            const VariableSpec& var,
                                                            const std::vector<uint32_t>& owned);

// A shard's table of dynamic variable `var` from the checkpoint in `dir`.
struct LoadedDynamic {
  std::unique_ptr<DynamicTable> table;
  std::vector<DynamicFilePart> parts;  // steps applied and version of each partition `owned`
  bool resharded = false;              // read from every shard's file
  int64_t evicted = 0;                 // rows evicted to fit the new budget (resharded)
};
// When the checkpoint was written under the same partitioning and this
// shard held the same partitions, its own file is restored as it was (a
// resumed run continues exactly). Otherwise every shard's file is read, the
// rows whose ids fall in the partitions `owned` (PartitionOf) are kept with
// their state and counters, the admission counts add up, and rows over the
// new budget are evicted by the table's policy. A partition's steps applied
// and version are the largest of the old ones (as LoadOwnedPartitions).
// Nothing is changed on failure; the message names the file or the part.
StatusOr<LoadedDynamic> LoadDynamic(const std::string& dir, const VariableSpec& var,
                                    uint32_t shard, uint32_t shards,
                                    const std::vector<uint32_t>& owned);

}  // namespace parallax::ps

#endif  // PARALLAX_PS_RESHARD_H_
