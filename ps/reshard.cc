#include "ps/reshard.h"

#include <algorithm>
#include <map>

#include "core/ps/partition_file.h"

namespace parallax::ps {
namespace {

// Appends row `r` of `from` to `to` (same variable, so the same dim, slots
// and optimizer).
void AppendRow(const PartitionSnapshot& from, size_t r, size_t dim, PartitionSnapshot* to) {
  to->ids.push_back(from.ids[r]);
  to->weights.insert(to->weights.end(), from.weights.begin() + static_cast<ptrdiff_t>(r * dim),
                     from.weights.begin() + static_cast<ptrdiff_t>((r + 1) * dim));
  for (int s = 0; s < 2; ++s) {
    if (from.slots[s].empty()) continue;
    to->slots[s].insert(to->slots[s].end(),
                        from.slots[s].begin() + static_cast<ptrdiff_t>(r * dim),
                        from.slots[s].begin() + static_cast<ptrdiff_t>((r + 1) * dim));
  }
  if (!from.steps.empty()) to->steps.push_back(from.steps[r]);
}

}  // namespace

StatusOr<std::vector<PartitionSnapshot>> LoadOwnedPartitions(const std::string& dir,
                                                            const VariableSpec& var,
                                                            const std::vector<uint32_t>& owned) {
  std::vector<PartitionSnapshot> out;
  if (owned.empty()) return out;
  const std::string first = dir + "/" + PartitionFileName(var.id, 0);
  PX_ASSIGN_OR_RETURN(auto reader, PartitionFileReader::Open(first, /*verify=*/false));
  const PartitionFileHeader header = reader->header();
  reader.reset();
  const bool same = header.partitions == var.partitions &&
                    header.scheme == static_cast<uint32_t>(var.scheme);
  if (same) {
    for (uint32_t p : owned) {
      PX_ASSIGN_OR_RETURN(PartitionSnapshot snap, LoadPartition(dir, var, p));
      out.push_back(std::move(snap));
    }
    return out;
  }
  if (header.partitions == 0 || header.scheme > static_cast<uint32_t>(PartitionScheme::kRange)) {
    return FailedPrecondition("checkpoint file \"" + first + "\" names " +
                              std::to_string(header.partitions) + " partitions of scheme " +
                              std::to_string(header.scheme) + "; it cannot be resharded");
  }
  // The checkpoint's partitioning; LoadPartition checks every file against it.
  VariableSpec old = var;
  old.partitions = header.partitions;
  old.scheme = static_cast<PartitionScheme>(header.scheme);
  old.partition_shards.assign(old.partitions, 0);
  std::map<uint32_t, PartitionSnapshot> fresh;
  for (uint32_t p : owned) fresh[p].partition = p;
  const size_t dim = var.dim;
  for (uint32_t p = 0; p < old.partitions; ++p) {
    auto snap = LoadPartition(dir, old, p);
    if (!snap.ok()) {
      return snap.status().WithContext("resharding variable " + std::to_string(var.id) +
                                       " from " + std::to_string(old.partitions) + " to " +
                                       std::to_string(var.partitions) + " partitions");
    }
    for (auto& [q, to] : fresh) {
      to.applied = std::max(to.applied, snap->applied);
      to.version = std::max(to.version, snap->version);
    }
    for (size_t r = 0; r < snap->ids.size(); ++r) {
      auto it = fresh.find(PartitionOf(var, snap->ids[r]));
      if (it != fresh.end()) AppendRow(*snap, r, dim, &it->second);
    }
  }
  for (auto& [q, snap] : fresh) out.push_back(std::move(snap));
  return out;
}

}  // namespace parallax::ps
