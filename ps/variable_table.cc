#include "ps/variable_table.h"

#include "core/ps/row_state.h"

#include <sys/mman.h>

#include <algorithm>
#include <cstdint>

#include "core/ps/initializer.h"
#include "core/ps/row_versions.h"
#include "core/optim/optimizer.h"

namespace parallax::ps {
namespace {
constexpr int64_t kMaxDenseRows = int64_t{1} << 25;  // 128 MiB of index at most
constexpr size_t kMaxReserveBytes = size_t{1} << 30;   // per array

// Asks for transparent huge pages on the 2 MiB-aligned part of [p, p + bytes).
void AdviseHugePages(const void* p, size_t bytes) {
  constexpr uintptr_t kHuge = uintptr_t{2} << 20;
  const uintptr_t b = reinterpret_cast<uintptr_t>(p);
  const uintptr_t lo = (b + kHuge - 1) & ~(kHuge - 1);
  const uintptr_t hi = (b + bytes) & ~(kHuge - 1);
  if (hi > lo) madvise(reinterpret_cast<void*>(lo), hi - lo, MADV_HUGEPAGE);
}

// Reserves address space for n elements, so the table never reallocates and
// copies while it grows. Up to `prefault_bytes` the pages are also committed
// now, on huge pages where the kernel has them: rows then land in memory
// that is already mapped, with few TLB misses, instead of faulting in (and
// being zeroed) 4 KiB at a time while the shard serves.
template <typename T>
void Reserve(std::vector<T>* v, size_t n, size_t prefault_bytes) {
  if (n == 0 || n * sizeof(T) > kMaxReserveBytes) return;
  v->reserve(n);
  if (n * sizeof(T) > prefault_bytes) return;
  AdviseHugePages(v->data(), n * sizeof(T));
  v->resize(n);  // writes every page
  v->resize(0);  // keeps them (capacity stays)
}

}  // namespace

VariableTable::VariableTable(const VariableSpec& var, int64_t expected_rows, size_t prefault_bytes)
    : var_(var),
      num_slots_(optim::StateSlots(var.optimizer.type)),
      dense_index_(var.rows <= kMaxDenseRows) {
  if (dense_index_) {
    const size_t rows = static_cast<size_t>(var.rows);
    dense_.reserve(rows);
    if (rows * sizeof(uint32_t) <= prefault_bytes) AdviseHugePages(dense_.data(), rows * sizeof(uint32_t));
    dense_.assign(rows, 0);
  }
  if (expected_rows > 0) {
    const size_t n = static_cast<size_t>(expected_rows);
    ids_.reserve(std::min(n, kMaxReserveBytes / sizeof(int64_t)));
    Reserve(&marks_, n, prefault_bytes);
    Reserve(&weights_, n * var_.dim, prefault_bytes);
    for (int s = 0; s < num_slots_; ++s) Reserve(&slots_[s], n * var_.dim, prefault_bytes);
  }
}

int64_t VariableTable::Find(int64_t id) const {
  if (dense_index_) return static_cast<int64_t>(dense_[static_cast<size_t>(id)]) - 1;
  auto it = sparse_.find(id);
  return it == sparse_.end() ? -1 : it->second;
}

uint32_t VariableTable::Touch(int64_t id) {
  if (dense_index_) {
    uint32_t& slot = dense_[static_cast<size_t>(id)];
    if (slot == 0) slot = Append(id) + 1;
    return slot - 1;
  }
  auto [it, inserted] = sparse_.try_emplace(id, 0);
  if (inserted) it->second = Append(id);
  return it->second;
}

void VariableTable::TouchAll(const int64_t* ids, size_t n, uint32_t* idx, bool* distinct) {
  constexpr size_t kAhead = 16;
  for (size_t i = 0; i < n; ++i) {
    if (dense_index_ && i + kAhead < n) __builtin_prefetch(&dense_[static_cast<size_t>(ids[i + kAhead])]);
    idx[i] = Touch(ids[i]);
  }
  if (distinct == nullptr) return;
  if (++epoch_ == 0) {  // wrapped: forget every old mark
    std::fill(marks_.begin(), marks_.end(), 0);
    epoch_ = 1;
  }
  marks_.resize(ids_.size(), 0);
  bool all_different = true;
  for (size_t i = 0; i < n; ++i) {
    uint32_t& mark = marks_[idx[i]];
    all_different &= mark != epoch_;
    mark = epoch_;
  }
  *distinct = all_different;
}

void VariableTable::PrefetchRow(uint32_t idx) const {
  const char* w = reinterpret_cast<const char*>(weights(idx));
  for (size_t b = 0; b < size_t{var_.dim} * sizeof(float); b += 64) __builtin_prefetch(w + b);
  for (int s = 0; s < num_slots_; ++s) {
    const char* p = reinterpret_cast<const char*>(slot(s, idx));
    for (size_t b = 0; b < size_t{var_.dim} * sizeof(float); b += 64) __builtin_prefetch(p + b);
  }
}

uint32_t VariableTable::Append(int64_t id) {
  const uint32_t idx = static_cast<uint32_t>(ids_.size());
  const size_t dim = var_.dim;
  ids_.push_back(id);
  weights_.resize(weights_.size() + dim);
  InitializeRow(var_.init, var_.id, id, var_.dim, &weights_[idx * dim]);
  for (int s = 0; s < num_slots_; ++s)
    slots_[s].resize(slots_[s].size() + dim, optim::InitialStateValue(var_.optimizer, s));
  if (var_.optimizer.type == OptimizerType::kAdam) steps_.push_back(0);
  if (versions_on_) versions_.push_back(version_base_);
  return idx;
}

void VariableTable::Apply(uint32_t idx, const float* g, float lr_scale) {
  optim::ApplyUpdate(var_.optimizer, var_.optimizer.lr * lr_scale, var_.dim, g, weights(idx),
           num_slots_ > 0 ? slot(0, idx) : nullptr, num_slots_ > 1 ? slot(1, idx) : nullptr,
           steps_.empty() ? nullptr : &steps_[idx]);
  if (versions_on_) versions_[idx] = NextRowVersion(versions_[idx]);
}

void VariableTable::EnableVersions() {
  if (versions_on_) return;
  versions_on_ = true;
  version_base_ = RandomRowVersion();
  versions_.assign(ids_.size(), version_base_);
}

void VariableTable::PackState(uint32_t idx, float* out) const {
  const int slots = num_slots_;
  PackRowState(weights(idx), slots >= 1 ? slot(0, idx) : nullptr, slots >= 2 ? slot(1, idx) : nullptr,
               steps_.empty() ? 0 : steps_[idx], var_.dim, slots, out);
}

void VariableTable::UnpackState(const float* row, uint32_t idx) {
  const int slots = num_slots_;
  UnpackRowState(row, var_.dim, slots, weights(idx), slots >= 1 ? slot(0, idx) : nullptr,
                 slots >= 2 ? slot(1, idx) : nullptr, steps_.empty() ? nullptr : &steps_[idx]);
}

void VariableTable::Clear() {
  if (dense_index_) std::fill(dense_.begin(), dense_.end(), 0);
  sparse_.clear();
  ids_.clear();
  weights_.clear();
  slots_[0].clear();
  slots_[1].clear();
  steps_.clear();
  marks_.clear();
  versions_.clear();
}

}  // namespace parallax::ps
