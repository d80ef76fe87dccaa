#include "ps/checkpoint.h"

#include <cstring>

#include "core/base/durable_file.h"

namespace parallax::ps {
namespace {

using FileHeader = PartitionFileHeader;

uint64_t Fnv1a(const char* p, size_t n) { return Fnv1a64(p, n); }

void Put(std::string* s, const void* p, size_t n) { s->append(static_cast<const char*>(p), n); }

}  // namespace

Status SavePartition(const std::string& dir, const VariableTable& table, uint32_t partition,
                     int64_t applied, int64_t version) {
  const VariableSpec& var = table.spec();
  const size_t dim = var.dim;
  std::vector<uint32_t> rows;
  for (uint32_t i = 0; i < table.size(); ++i) {
    if (PartitionOf(var, table.id_at(i)) == partition) rows.push_back(i);
  }
  FileHeader fh;
  fh.variable = var.id;
  fh.partition = partition;
  fh.partitions = var.partitions;
  fh.scheme = static_cast<uint32_t>(var.scheme);
  fh.dim = var.dim;
  fh.optimizer = static_cast<uint32_t>(var.optimizer.type);
  fh.rows = var.rows;
  fh.count = rows.size();
  fh.applied = applied;
  fh.version = version;
  std::string data;
  const bool adam = var.optimizer.type == OptimizerType::kAdam;
  data.reserve(sizeof fh + rows.size() * (8 + dim * 4 * (1 + table.slots())) + 8);
  Put(&data, &fh, sizeof fh);
  for (uint32_t i : rows) {
    const int64_t id = table.id_at(i);
    Put(&data, &id, 8);
    Put(&data, table.weights(i), dim * 4);
    for (int s = 0; s < table.slots(); ++s) Put(&data, table.slot(s, i), dim * 4);
    if (adam) {
      const int64_t step = table.step_value(i);
      Put(&data, &step, 8);
    }
  }
  const uint64_t sum = Fnv1a(data.data(), data.size());
  Put(&data, &sum, 8);

  return WriteFileDurably(dir + "/" + PartitionFileName(var.id, partition), data);
}

Status SaveDynamic(const std::string& dir, const VariableSpec& var, uint32_t shard,
                   uint32_t shards, const std::vector<DynamicFilePart>& parts,
                   const DynamicTable& table) {
  DynamicFileHeader h;
  h.variable = var.id;
  h.shard = shard;
  h.shards = shards;
  h.partitions = var.partitions;
  h.scheme = static_cast<uint32_t>(var.scheme);
  h.dim = var.dim;
  h.optimizer = static_cast<uint32_t>(var.optimizer.type);
  return WriteFileDurably(dir + "/" + DynamicFileName(var.id, shard),
                          EncodeDynamicFile(h, parts, table.Serialize()));
}

StatusOr<PartitionSnapshot> LoadPartition(const std::string& dir, const VariableSpec& var,
                                          uint32_t partition) {
  const std::string path = dir + "/" + PartitionFileName(var.id, partition);
  // The checksum, the format and the size its rows imply: the reader's.
  PX_ASSIGN_OR_RETURN(std::unique_ptr<PartitionFileReader> reader, PartitionFileReader::Open(path));
  const FileHeader& fh = reader->header();
  auto shape = [&](const std::string& what) {
    return FailedPrecondition("checkpoint file \"" + path + "\" does not match the plan: " + what);
  };
  if (fh.variable != var.id || fh.partition != partition)
    return shape("it holds variable " + std::to_string(fh.variable) + " partition " +
                 std::to_string(fh.partition));
  if (fh.dim != var.dim) return shape("dim " + std::to_string(fh.dim) + ", plan has " + std::to_string(var.dim));
  if (fh.rows != var.rows)
    return shape("rows " + std::to_string(fh.rows) + ", plan has " + std::to_string(var.rows));
  if (fh.partitions != var.partitions || fh.scheme != static_cast<uint32_t>(var.scheme))
    return shape(std::to_string(fh.partitions) + " partitions of another scheme, plan has " +
                 std::to_string(var.partitions));
  if (fh.optimizer != static_cast<uint32_t>(var.optimizer.type))
    return shape("it holds the state of another optimizer");
  PartitionSnapshot snap;
  snap.partition = partition;
  snap.applied = fh.applied;
  snap.version = fh.version;
  PX_RETURN_IF_ERROR(reader->NextWithState(fh.count, &snap.ids, &snap.weights, &snap.slots[0],
                                           &snap.slots[1], &snap.steps));
  for (int64_t id : snap.ids) {
    if (PartitionOf(var, id) != partition)
      return shape("row id " + std::to_string(id) + " does not belong to this partition");
  }
  return snap;
}

void RestoreTable(VariableTable* table, const std::vector<PartitionSnapshot>& snapshots) {
  table->Clear();
  const size_t dim = table->dim();
  for (const auto& snap : snapshots) {
    for (size_t r = 0; r < snap.ids.size(); ++r) {
      const uint32_t idx = table->Touch(snap.ids[r]);
      std::memcpy(table->weights(idx), &snap.weights[r * dim], dim * 4);
      for (int s = 0; s < table->slots(); ++s)
        std::memcpy(table->slot(s, idx), &snap.slots[s][r * dim], dim * 4);
      if (!snap.steps.empty()) *table->step(idx) = snap.steps[r];
    }
  }
}

}  // namespace parallax::ps
