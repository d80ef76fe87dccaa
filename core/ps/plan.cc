#include "core/ps/plan.h"

#include <algorithm>
#include <set>

namespace parallax::ps {

const VariableSpec* PsPlan::FindVariable(uint32_t id) const {
  // Plans hold a handful of variables; ids are usually their index.
  if (id < variables.size() && variables[id].id == id) return &variables[id];
  for (const auto& v : variables) {
    if (v.id == id) return &v;
  }
  return nullptr;
}

Status CheckDynamicTableSettings(const DynamicTableSettings& s) {
  auto bad = [](const char* what, int64_t value, const char* allowed) {
    return InvalidArgument(std::string(what) + " is " + std::to_string(value) + "; it must be " +
                           allowed);
  };
  if (s.admit_after < 1) return bad("admit_after", s.admit_after, "at least 1 (1 admits at once)");
  if (s.ttl_steps < 0) return bad("ttl_steps", s.ttl_steps, "0 (rows never expire) or more");
  if (s.max_rows < 0) return bad("max_rows", s.max_rows, "0 (no budget) or more");
  return Status::Ok();
}

Status ValidatePsPlan(PsPlan* plan) {
  auto bad = [](const std::string& what) { return InvalidArgument("plan: ps." + what); };
  if (plan->num_workers == 0) return bad("\"num_workers\" must be > 0");
  if (plan->num_shards == 0) return bad("\"num_shards\" must be > 0");
  if (plan->staleness < 0) return bad("\"staleness\" must be >= 0");
  if (plan->sync_warmup_steps < 0) return bad("\"sync_warmup_steps\" must be >= 0");
  std::set<uint32_t> ids;
  for (size_t i = 0; i < plan->variables.size(); ++i) {
    VariableSpec& v = plan->variables[i];
    const std::string where = "variables[" + std::to_string(i) + "]: ";
    if (v.dim == 0 || v.dim > (1u << 20)) return bad(where + "\"dim\" must be in 1..1048576");
    if (v.dynamic) {
      if (v.rows != 0) return bad(where + "a dynamic table has no \"rows\"");
      if (v.scheme != PartitionScheme::kHash) return bad(where + "a dynamic table's \"scheme\" is hash");
      if (v.partitions == 0 || v.partitions > 65536) {
        return bad(where + "\"partitions\" must be in 1..65536");
      }
      if (Status st = CheckDynamicTableSettings(*v.dynamic); !st.ok()) {
        return bad(where + "dynamic: " + st.message());
      }
    } else {
      if (v.rows <= 0) return bad(where + "\"rows\" must be > 0");
      if (v.partitions == 0 || v.partitions > v.rows || v.partitions > 65536) {
        return bad(where + "\"partitions\" must be in 1..min(rows, 65536)");
      }
    }
    if (!ids.insert(v.id).second) {
      return bad(where + "\"id\" " + std::to_string(v.id) + " is repeated");
    }
    if (v.partition_shards.empty()) {
      for (uint32_t p = 0; p < v.partitions; ++p) v.partition_shards.push_back(p % plan->num_shards);
    }
    if (v.partition_shards.size() != v.partitions) {
      return bad(where + "\"partition_shards\" must have one entry per partition");
    }
    for (uint32_t s : v.partition_shards) {
      if (s >= plan->num_shards) {
        return bad(where + "\"partition_shards\" names shard " + std::to_string(s) +
                   " but \"num_shards\" is " + std::to_string(plan->num_shards));
      }
    }
  }
  return Status::Ok();
}

uint64_t UnMix64(uint64_t x) {
  // Inverses of each step, in reverse order.
  x ^= (x >> 31) ^ (x >> 62);
  x *= 0x319642b2d24d8ec3ULL;
  x ^= (x >> 27) ^ (x >> 54);
  x *= 0x96de1b173f119089ULL;
  x ^= (x >> 30) ^ (x >> 60);
  return x;
}

Partitioner::Partitioner(const VariableSpec& var)
    : partitions_(var.partitions),
      hash_(var.scheme == PartitionScheme::kHash),
      block_(std::max<int64_t>(1, (var.rows + var.partitions - 1) / std::max<uint32_t>(1, var.partitions))),
      inv_block_(1.0 / static_cast<double>(block_)) {}

uint32_t PartitionOf(const VariableSpec& var, int64_t id) {
  if (var.partitions == 1) return 0;
  if (var.scheme == PartitionScheme::kHash) {
    return static_cast<uint32_t>(Mix64(static_cast<uint64_t>(id)) % var.partitions);
  }
  const int64_t block = (var.rows + var.partitions - 1) / var.partitions;
  return static_cast<uint32_t>(id / block);
}

}  // namespace parallax::ps
