// PsPlan: the parameter-server part of a job's plan, what both workers and
// shards need to agree on: the sparse variables, how each is split into
// partitions, which shard owns which partition, the optimizer and
// initializer of each, and the consistency mode.
//
// It has no JSON of its own: it is the PS part of core/plan's JobPlan, which
// has the plan's one reader and writer (ParseJobPlan, JobPlanToJson). The
// shard reads the job's plan through it and keeps this part; tests and
// benchmarks that run shards alone write a plan of PS variables only
// (plan::JobPlanOfPs).
#ifndef PARALLAX_CORE_PS_PLAN_H_
#define PARALLAX_CORE_PS_PLAN_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "parallax/settings.h"
#include "parallax/status.h"

namespace parallax::ps {

enum class PartitionScheme { kHash, kRange };

struct VariableSpec {
  uint32_t id = 0;
  std::string name;
  int64_t rows = 0;  // ids are 0 .. rows-1; 0 for a dynamic table
  uint32_t dim = 0;
  uint32_t partitions = 1;
  PartitionScheme scheme = PartitionScheme::kHash;
  std::vector<uint32_t> partition_shards;  // size == partitions after parsing
  // The same optimizer and initializer as on workers (core/optim,
  // core/ps/initializer.h), so a variable keeps them whichever path it takes.
  OptimizerSettings optimizer;
  Initializer init;
  // A dynamic table (core/ps/dynamic_table.h): no row count, any 64-bit id,
  // hash partitions only; its max_rows is the table's, split over the
  // partitions. Empty: a table of `rows` rows.
  std::optional<DynamicTableSettings> dynamic;
};

struct PsPlan {
  Consistency consistency = Consistency::kSync;
  int64_t staleness = 0;          // ssp bound, in steps
  // Steps run in sync mode before `consistency` applies (async, ssp only;
  // core/ps/consistency_schedule.h).
  int64_t sync_warmup_steps = 0;
  uint32_t num_workers = 1;       // sync mean divides by this
  uint32_t num_contributors = 0;  // sync: pushes expected per step (hosts with local
                                  // aggregation); 0 = num_workers
  bool sync_mean = true;          // false: sum
  uint32_t num_shards = 1;
  ValueEncoding value_encoding = ValueEncoding::kFp32;
  bool staleness_lr = false;      // async/ssp: lr / max(1, staleness)
  bool reject_nonfinite = true;   // false: drop NaN/Inf rows and count them
  std::vector<VariableSpec> variables;

  uint32_t contributors() const { return num_contributors ? num_contributors : num_workers; }
  // Null when `id` is not a variable of the plan.
  const VariableSpec* FindVariable(uint32_t id) const;
};

// The one check of a dynamic table's settings (Session::RegisterDynamic,
// the plan, DynamicTable::Create): INVALID_ARGUMENT naming the setting, its
// value and what it may be.
Status CheckDynamicTableSettings(const DynamicTableSettings& settings);

// Checks what workers and shards rely on (rows, dims and partitions in
// range, unique ids, every partition on a shard of the plan) and gives a
// variable without `partition_shards` the default placement p % num_shards.
// INVALID_ARGUMENT naming the plan key at fault ("ps.variables[1]:
// \"partition_shards\" ...").
Status ValidatePsPlan(PsPlan* plan);

// The partition of `id` in `var` (REQUIRES: 0 <= id < var.rows, or any id
// of a dynamic table). Hash partitions scatter ids by a 64-bit mix of their
// bits, whatever the table's size; range partitions are contiguous blocks of
// ceil(rows / partitions) ids.
uint32_t PartitionOf(const VariableSpec& var, int64_t id);

// splitmix64's finalizer: a reversible mix of 64 bits. Inline: row
// initializers call it once per value.
inline uint64_t Mix64(uint64_t x) {
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ULL;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebULL;
  x ^= x >> 31;
  return x;
}
// Its inverse.
uint64_t UnMix64(uint64_t x);
// splitmix64: the next number of the sequence whose state is *state.
inline uint64_t SplitMix64(uint64_t* state) {
  *state += 0x9e3779b97f4a7c15ULL;
  return Mix64(*state);
}

// PartitionOf for many ids of one variable (the hot path of the client and
// the shard): the range scheme's block size and its reciprocal are computed
// once, so no id costs a 64-bit division. Same results as PartitionOf.
class Partitioner {
 public:
  explicit Partitioner(const VariableSpec& var);
  // REQUIRES: 0 <= id < var.rows.
  uint32_t operator()(int64_t id) const {
    if (partitions_ == 1) return 0;
    if (hash_) return static_cast<uint32_t>(Mix64(static_cast<uint64_t>(id)) % partitions_);
    // An estimate off by at most one either way, then corrected exactly.
    int64_t p = static_cast<int64_t>(static_cast<double>(id) * inv_block_);
    if (p * block_ > id) --p;
    if ((p + 1) * block_ <= id) ++p;
    return static_cast<uint32_t>(p);
  }

 private:
  uint32_t partitions_;
  bool hash_;
  int64_t block_;
  double inv_block_;
};

// The shard owning partition `p` of `var`.
inline uint32_t ShardOf(const VariableSpec& var, uint32_t p) { return var.partition_shards[p]; }

}  // namespace parallax::ps

#endif  // PARALLAX_CORE_PS_PLAN_H_
