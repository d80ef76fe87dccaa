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

StatusOr<LoadedDynamic> LoadDynamic(const std::string& dir, const VariableSpec& var,
                                    uint32_t shard, uint32_t shards,
                                    const std::vector<uint32_t>& owned) {
  LoadedDynamic out;
  PX_ASSIGN_OR_RETURN(out.table, DynamicTable::Create(ShardTableOptions(var, shard)));
  const std::string own = dir + "/" + DynamicFileName(var.id, shard);
  auto mine = ReadDynamicFile(own, var);
  if (mine.ok()) {
    const DynamicFileHeader& h = mine->header;
    std::vector<uint32_t> held;
    for (const DynamicFilePart& p : mine->parts) held.push_back(p.partition);
    if (h.shards == shards && h.partitions == var.partitions &&
        h.scheme == static_cast<uint32_t>(var.scheme) && held == owned) {
      Status st = out.table->Restore(mine->state);
      if (!st.ok()) return FailedPrecondition("\"" + own + "\": " + st.message());
      out.parts = std::move(mine->parts);
      return out;
    }
  } else if (mine.status().code() != StatusCode::kIoError) {
    return mine.status();  // there, but not readable as one
  }
  // Another partitioning: every shard's rows, re-split.
  PX_ASSIGN_OR_RETURN(std::vector<DynamicFile> files, ReadDynamicFiles(dir, var));
  std::vector<bool> mine_now(var.partitions, false);
  for (uint32_t p : owned) mine_now[p] = true;
  out.resharded = true;
  for (uint32_t p : owned) out.parts.push_back(DynamicFilePart{p, 0, 0, 0});
  for (const DynamicFile& f : files) {
    PX_ASSIGN_OR_RETURN(std::unique_ptr<DynamicTable> old, TableOfFile(f, var));
    PX_RETURN_IF_ERROR(
        out.table->Absorb(*old, [&](uint64_t id) {
          return mine_now[PartitionOf(var, static_cast<int64_t>(id))];
        }).WithContext("\"" + f.path + "\""));
    for (DynamicFilePart& to : out.parts) {
      for (const DynamicFilePart& from : f.parts) {
        to.applied = std::max(to.applied, from.applied);
        to.version = std::max(to.version, from.version);
      }
    }
  }
  out.evicted = out.table->FitBudget();
  return out;
}

}  // namespace parallax::ps
