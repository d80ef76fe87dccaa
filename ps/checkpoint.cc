#include "ps/checkpoint.h"

#include <algorithm>
#include <cstring>
#include <map>

#include "core/base/durable_file.h"
#include "core/base/finite.h"

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

StatusOr<std::vector<PartitionSnapshot>> PartitionsFromWorkerCopy(
    std::span<const float> values, const optim::OptimizerState& state, const VariableSpec& var,
    std::span<const uint32_t> owned, int64_t step, const std::string& source) {
  const size_t dim = var.dim, rows = static_cast<size_t>(var.rows), size = values.size();
  const int slots = optim::StateSlots(var.optimizer.type);
  const bool adam = var.optimizer.type == OptimizerType::kAdam;
  // One count (a DenseOptimizer's), or a SparseOptimizer's: one a row under
  // Adam, none otherwise.
  const size_t num_steps = state.steps.size();
  const bool fits = rows > 0 && size > (rows - 1) * dim && size <= rows * dim &&
                    state.s1.size() == (slots >= 1 ? size : 0) &&
                    state.s2.size() == (slots >= 2 ? size : 0) &&
                    (num_steps == 1 || num_steps == (adam ? rows : 0));
  if (!fits) {
    return FailedPrecondition(source + ": \"" + var.name + "\" holds " + std::to_string(size) +
                              " values, " + std::to_string(state.s1.size() + state.s2.size()) +
                              " optimizer values and " + std::to_string(num_steps) +
                              " step counts; the plan's has " + std::to_string(rows) + " rows of dim " +
                              std::to_string(dim) + " with a " +
                              std::string(OptimizerTypeName(var.optimizer.type)) + " optimizer");
  }
  if (std::any_of(state.steps.begin(), state.steps.end(), [](int64_t s) { return s < 0; }) ||
      AnyNonFinite(values.data(), size) || AnyNonFinite(state.s1.data(), state.s1.size()) ||
      AnyNonFinite(state.s2.data(), state.s2.size())) {
    return FailedPrecondition(source + ": \"" + var.name +
                              "\" holds a value that is not finite or a negative step count");
  }
  std::map<uint32_t, PartitionSnapshot> by_partition;
  for (uint32_t p : owned) {
    PartitionSnapshot& snap = by_partition[p];
    snap.partition = p;
    snap.applied = step;
  }
  auto copy_row = [&](std::span<const float> from, size_t r, std::vector<float>* to) {
    const size_t begin = r * dim, end = std::min(size, begin + dim);
    to->insert(to->end(), from.begin() + static_cast<std::ptrdiff_t>(begin),
               from.begin() + static_cast<std::ptrdiff_t>(end));
    to->resize(to->size() + (begin + dim - end), 0.0f);  // a short last row: padding
  };
  for (size_t r = 0; r < rows; ++r) {
    auto it = by_partition.find(PartitionOf(var, static_cast<int64_t>(r)));
    if (it == by_partition.end()) continue;
    PartitionSnapshot& snap = it->second;
    snap.ids.push_back(static_cast<int64_t>(r));
    copy_row(values, r, &snap.weights);
    if (slots >= 1) copy_row(state.s1, r, &snap.slots[0]);
    if (slots >= 2) copy_row(state.s2, r, &snap.slots[1]);
    if (adam) snap.steps.push_back(num_steps == rows ? state.steps[r] : state.steps[0]);
  }
  std::vector<PartitionSnapshot> out;
  for (auto& [p, snap] : by_partition) out.push_back(std::move(snap));
  return out;
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
