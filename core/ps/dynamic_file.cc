#include "core/ps/dynamic_file.h"

#include <dirent.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <map>

#include "core/base/durable_file.h"
#include "core/ps/partition_file.h"

namespace parallax::ps {
namespace {

constexpr std::string_view kSuffix = ".pxdt";

std::string Prefix(uint32_t var) { return "var" + std::to_string(var) + "-shard"; }

}  // namespace

std::string DynamicFileName(uint32_t var, uint32_t shard) {
  return Prefix(var) + std::to_string(shard) + std::string(kSuffix);
}

std::vector<std::string> DynamicFileNames(const VariableSpec& var) {
  std::vector<uint32_t> shards(var.partition_shards.begin(), var.partition_shards.end());
  std::sort(shards.begin(), shards.end());
  shards.erase(std::unique(shards.begin(), shards.end()), shards.end());
  std::vector<std::string> names;
  for (uint32_t s : shards) names.push_back(DynamicFileName(var.id, s));
  return names;
}

DynamicTableOptions ShardTableOptions(const VariableSpec& var, uint32_t shard) {
  DynamicTableOptions o;
  o.var = var;
  if (!var.dynamic) return o;
  int64_t owned = 0;
  for (uint32_t p = 0; p < var.partitions; ++p) owned += ShardOf(var, p) == shard;
  o.admit_after = var.dynamic->admit_after;
  o.ttl_steps = var.dynamic->ttl_steps;
  // The table's budget split by partition: this shard's share, rounded up.
  o.max_rows = (var.dynamic->max_rows * owned + var.partitions - 1) / var.partitions;
  o.policy = var.dynamic->eviction;
  for (int64_t id : var.dynamic->never_admit) o.never_admit.push_back(static_cast<uint64_t>(id));
  // The same on every run of this plan: a resumed shard evicts alike.
  o.seed = Mix64(var.init.seed ^ (uint64_t{var.id} << 32) ^ shard);
  // The same on every shard: the sketches of a checkpoint's shards add up
  // under another partitioning.
  o.sketch_seed = Mix64(var.init.seed ^ (uint64_t{var.id} << 32) ^ 0x5ce7c4);
  return o;
}

std::string EncodeDynamicFile(const DynamicFileHeader& header,
                              const std::vector<DynamicFilePart>& parts, std::string_view state) {
  DynamicFileHeader h = header;
  h.parts = static_cast<uint32_t>(parts.size());
  h.state_bytes = state.size();
  std::string data;
  data.reserve(sizeof h + parts.size() * sizeof(DynamicFilePart) + state.size() + 8);
  data.append(reinterpret_cast<const char*>(&h), sizeof h);
  data.append(reinterpret_cast<const char*>(parts.data()), parts.size() * sizeof(DynamicFilePart));
  data.append(state);
  const uint64_t sum = Fnv1a64(data.data(), data.size());
  data.append(reinterpret_cast<const char*>(&sum), sizeof sum);
  return data;
}

StatusOr<DynamicFile> ReadDynamicFile(const std::string& path, const VariableSpec& var) {
  StatusOr<std::string> read = ReadWholeFile(path);
  if (!read.ok()) return read.status().WithContext("dynamic table checkpoint file");
  const std::string& data = *read;
  auto bad = [&](const std::string& what) {
    return FailedPrecondition("dynamic table checkpoint file \"" + path + "\" " + what);
  };
  if (data.size() < sizeof(DynamicFileHeader) + 8) {
    return bad("is truncated (" + std::to_string(data.size()) + " bytes)");
  }
  uint64_t sum;
  std::memcpy(&sum, data.data() + data.size() - 8, 8);
  if (Fnv1a64(data.data(), data.size() - 8) != sum) {
    return bad("fails its checksum: it is corrupt or was not completely written");
  }
  DynamicFile f;
  f.path = path;
  std::memcpy(&f.header, data.data(), sizeof f.header);
  const DynamicFileHeader& h = f.header;
  if (h.magic != kDynamicFileMagic || h.format != kDynamicFileFormat) {
    return bad("is not a dynamic table checkpoint of format 1");
  }
  const uint64_t body = data.size() - sizeof h - 8;
  if (h.parts > body / sizeof(DynamicFilePart) ||
      h.state_bytes != body - uint64_t{h.parts} * sizeof(DynamicFilePart)) {
    return bad("has a size that does not match its header");
  }
  if (h.variable != var.id) {
    return bad("holds variable " + std::to_string(h.variable) + ", not " + std::to_string(var.id));
  }
  if (h.dim != var.dim) {
    return bad("has dim " + std::to_string(h.dim) + ", the plan has " + std::to_string(var.dim));
  }
  if (h.optimizer != static_cast<uint32_t>(var.optimizer.type)) {
    return bad("holds the state of another optimizer than the plan's");
  }
  if (h.partitions == 0 || h.shards == 0 || h.shard >= h.shards) {
    return bad("names shard " + std::to_string(h.shard) + " of " + std::to_string(h.shards) +
               " over " + std::to_string(h.partitions) + " partitions");
  }
  f.parts.resize(h.parts);
  std::memcpy(f.parts.data(), data.data() + sizeof h, h.parts * sizeof(DynamicFilePart));
  for (const DynamicFilePart& p : f.parts) {
    if (p.partition >= h.partitions) {
      return bad("holds partition " + std::to_string(p.partition) + " of " +
                 std::to_string(h.partitions));
    }
  }
  f.state = data.substr(sizeof h + h.parts * sizeof(DynamicFilePart), h.state_bytes);
  return f;
}

StatusOr<std::vector<DynamicFile>> ReadDynamicFiles(const std::string& dir,
                                                    const VariableSpec& var) {
  std::vector<std::string> names;
  if (DIR* d = ::opendir(dir.c_str())) {
    const std::string prefix = Prefix(var.id);
    while (const dirent* e = ::readdir(d)) {
      const std::string name = e->d_name;
      if (name.size() > prefix.size() + kSuffix.size() && name.compare(0, prefix.size(), prefix) == 0 &&
          name.compare(name.size() - kSuffix.size(), kSuffix.size(), kSuffix) == 0) {
        names.push_back(name);
      }
    }
    ::closedir(d);
  } else {
    return IoError("checkpoint directory \"" + dir + "\" cannot be read: " + std::strerror(errno));
  }
  std::sort(names.begin(), names.end());
  const std::string where = "checkpoint directory \"" + dir + "\" ";
  if (names.empty()) {
    return FailedPrecondition(where + "holds no file of dynamic table \"" + var.name + "\" (" +
                              DynamicFileName(var.id, 0) + ", ...)");
  }
  std::vector<DynamicFile> files;
  std::map<uint32_t, std::string> holder;  // partition -> file
  for (const std::string& name : names) {
    PX_ASSIGN_OR_RETURN(DynamicFile f, ReadDynamicFile(dir + "/" + name, var));
    if (!files.empty()) {
      const DynamicFileHeader& a = files.front().header;
      const DynamicFileHeader& b = f.header;
      if (a.shards != b.shards || a.partitions != b.partitions || a.scheme != b.scheme) {
        return FailedPrecondition(where + "mixes checkpoints: \"" + names.front() + "\" and \"" +
                                  name + "\" were written under different partitionings");
      }
    }
    for (const DynamicFilePart& p : f.parts) {
      auto [it, fresh] = holder.emplace(p.partition, name);
      if (!fresh) {
        return FailedPrecondition(where + "holds partition " + std::to_string(p.partition) +
                                  " of dynamic table \"" + var.name + "\" twice (\"" + it->second +
                                  "\" and \"" + name + "\")");
      }
    }
    files.push_back(std::move(f));
  }
  const uint32_t partitions = files.front().header.partitions;
  for (uint32_t p = 0; p < partitions; ++p) {
    if (!holder.count(p)) {
      return FailedPrecondition(where + "lacks partition " + std::to_string(p) + " of " +
                                std::to_string(partitions) + " of dynamic table \"" + var.name +
                                "\": a shard's file is missing");
    }
  }
  return files;
}

StatusOr<std::unique_ptr<DynamicTable>> TableOfFile(const DynamicFile& file,
                                                    const VariableSpec& var) {
  DynamicTableOptions o = ShardTableOptions(var, 0);
  o.max_rows = 0;  // holds what the file holds; the budget is its reader's
  PX_ASSIGN_OR_RETURN(std::unique_ptr<DynamicTable> table, DynamicTable::Create(std::move(o)));
  Status st = table->Restore(file.state);
  if (!st.ok()) return FailedPrecondition("\"" + file.path + "\": " + st.message());
  return table;
}

}  // namespace parallax::ps
