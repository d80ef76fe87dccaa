// VariableTable: the rows of one sparse variable held by one shard (every
// partition of the variable the shard owns), with their optimizer state.
// Rows are created on first touch with the variable's initializer.
//
// Not thread-safe: owned by the shard's event-loop thread.
#ifndef PARALLAX_PS_VARIABLE_TABLE_H_
#define PARALLAX_PS_VARIABLE_TABLE_H_

#include <cstdint>
#include <unordered_map>
#include <vector>

#include "core/ps/plan.h"

namespace parallax::ps {

class VariableTable {
 public:
  // `expected_rows`: how many rows this shard will likely hold (its share of
  // the variable); storage for them is reserved up front so that growing
  // never copies the table. Each array of at most `prefault_bytes` (weights,
  // each optimizer slot, the id index) is also committed now, on transparent
  // huge pages (docs/PERFORMANCE.md: fewer TLB misses on random rows, and no
  // page zeroing while serving); larger ones commit pages on first touch.
  explicit VariableTable(const VariableSpec& var, int64_t expected_rows = 0, size_t prefault_bytes = 0);

  const VariableSpec& spec() const { return var_; }
  uint32_t dim() const { return var_.dim; }
  size_t size() const { return ids_.size(); }

  // The index of row `id`, created with the initializer when new.
  // REQUIRES: 0 <= id < spec().rows.
  uint32_t Touch(int64_t id);
  // Touch() for n ids at once, prefetching ahead (rows are scattered in a
  // large table; this hides part of the memory latency). With `distinct`,
  // also tells whether the n ids are pairwise different.
  void TouchAll(const int64_t* ids, size_t n, uint32_t* idx, bool* distinct = nullptr);
  // Prefetches row `idx`'s weights (and state) for an update or a read.
  void PrefetchRow(uint32_t idx) const;
  // The index of row `id`, or -1 if it was never touched.
  int64_t Find(int64_t id) const;

  int64_t id_at(uint32_t idx) const { return ids_[idx]; }
  float* weights(uint32_t idx) { return &weights_[size_t{idx} * var_.dim]; }
  const float* weights(uint32_t idx) const { return &weights_[size_t{idx} * var_.dim]; }
  float* slot(int s, uint32_t idx) { return &slots_[s][size_t{idx} * var_.dim]; }
  const float* slot(int s, uint32_t idx) const { return &slots_[s][size_t{idx} * var_.dim]; }
  int64_t* step(uint32_t idx) { return &steps_[idx]; }
  int64_t step_value(uint32_t idx) const { return steps_[idx]; }
  int slots() const { return num_slots_; }

  // Row `idx`'s whole state as ROW_STATE carries it (core/ps/row_state.h:
  // RowStateWidth(spec()) floats), and the other way.
  void PackState(uint32_t idx, float* out) const;
  void UnpackState(const float* row, uint32_t idx);

  // Applies `g` to row `idx` with the variable's optimizer and lr × lr_scale.
  void Apply(uint32_t idx, const float* g, float lr_scale);

  // Row versions (schemas/ps_wire.md, "Row versions"): from the first call
  // on, every row carries a u32 that every Apply() to it advances by one
  // (mod 2^32, skipping ps_wire::kRowFresh). New rows, and every row held
  // now, start at a base drawn at random, so that a version another
  // process handed out (an earlier generation of this shard) is unlikely
  // to be anywhere near one of this process's.
  void EnableVersions();
  // REQUIRES: EnableVersions() was called.
  uint32_t version(uint32_t idx) const { return versions_[idx]; }

  // Drops every row (LOAD replaces the table).
  void Clear();

 private:
  uint32_t Append(int64_t id);

  const VariableSpec var_;
  const int num_slots_;
  // Row index by id: a dense array when the variable is small enough (4 bytes
  // a row, no hashing on the hot path), a hash map otherwise.
  const bool dense_index_;
  std::vector<uint32_t> dense_;  // id → idx + 1 (0 = absent)
  std::unordered_map<int64_t, uint32_t> sparse_;
  std::vector<int64_t> ids_;
  std::vector<float> weights_;
  std::vector<float> slots_[2];
  std::vector<int64_t> steps_;
  bool versions_on_ = false;
  uint32_t version_base_ = 0;
  std::vector<uint32_t> versions_;  // by idx, once EnableVersions() was called
  // TouchAll's duplicate check: marks_[idx] == epoch_ when row idx was seen
  // in the current call.
  std::vector<uint32_t> marks_;
  uint32_t epoch_ = 0;
};

}  // namespace parallax::ps

#endif  // PARALLAX_PS_VARIABLE_TABLE_H_
