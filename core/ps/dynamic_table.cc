#include "core/ps/dynamic_table.h"

#include <absl/container/flat_hash_map.h>
#include <sys/mman.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <new>

#include "core/optim/optimizer.h"
#include "core/ps/initializer.h"
#include "core/ps/row_versions.h"

namespace parallax::ps {
namespace {

constexpr int64_t kFree = INT64_MIN;  // last_step of a slot no row holds
constexpr int kSketchDepth = 4;
constexpr char kMagic[8] = {'P', 'X', 'D', 'Y', 'N', 'T', 'B', '1'};

// Appends and reads back the table's state, field by field.
class Writer {
 public:
  template <typename T>
  void Put(const T& v) {
    out_.append(reinterpret_cast<const char*>(&v), sizeof(T));
  }
  template <typename T>
  void PutVector(const std::vector<T>& v) {
    Put<uint64_t>(v.size());
    out_.append(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(T));
  }
  std::string& out() { return out_; }

 private:
  std::string out_;
};

class Reader {
 public:
  explicit Reader(std::string_view in) : in_(in) {}
  template <typename T>
  bool Get(T* v) {
    if (in_.size() < sizeof(T)) return false;
    std::memcpy(v, in_.data(), sizeof(T));
    in_.remove_prefix(sizeof(T));
    return true;
  }
  template <typename T>
  bool GetVector(std::vector<T>* v) {
    uint64_t n = 0;
    if (!Get(&n) || n > in_.size() / sizeof(T)) return false;
    v->resize(n);
    if (n > 0) std::memcpy(v->data(), in_.data(), n * sizeof(T));  // (no null pointer to memcpy)
    in_.remove_prefix(n * sizeof(T));
    return true;
  }
  bool done() const { return in_.empty(); }

 private:
  std::string_view in_;
};

// The table's large arrays go on transparent huge pages (madvise: the
// machine's THP setting may be "madvise"). Rows and their index entries are
// created in memory never written before and a shard's batch touches them
// at random: on 4 KiB pages a new row faults a page in every few rows (a
// fault costs microseconds on a VM) and most lookups miss the TLB, where the
// fixed table's arrays are committed at start on huge pages
// (ps/variable_table.cc). perf on a shard serving W1: about a third of its
// time.
constexpr size_t kHugePage = size_t{2} << 20;

// `bytes` (rounded up to whole huge pages), 2 MiB-aligned, advised before
// anything is written to it; with `commit`, also written once now (the
// pages faulted in and zeroed here, not while a shard serves). Free with
// std::free.
void* AllocateHuge(size_t bytes, bool commit = false) {
  const size_t rounded = (bytes + kHugePage - 1) / kHugePage * kHugePage;
  void* p = std::aligned_alloc(kHugePage, rounded);
  if (p == nullptr) throw std::bad_alloc();
  madvise(p, rounded, MADV_HUGEPAGE);
  if (commit) std::memset(p, 0, rounded);
  return p;
}

// Advises the 2 MiB-aligned part of [p, p + bytes), for memory that
// std::allocator gave.
void AdviseHugePages(const void* p, size_t bytes) {
  const uintptr_t b = reinterpret_cast<uintptr_t>(p);
  const uintptr_t lo = (b + kHugePage - 1) & ~uintptr_t{kHugePage - 1};
  const uintptr_t hi = (b + bytes) & ~uintptr_t{kHugePage - 1};
  if (hi > lo) madvise(reinterpret_cast<void*>(lo), hi - lo, MADV_HUGEPAGE);
}

// The index's allocator: arrays of 2 MiB or more from AllocateHuge (a
// rehash writes a whole new array; `commit`: see DynamicTable::Commit),
// smaller ones as std::allocator's.
template <typename T>
struct HugeAllocator {
  using value_type = T;
  HugeAllocator() = default;
  explicit HugeAllocator(bool commit_arrays) : commit(commit_arrays) {}
  template <typename U>
  HugeAllocator(const HugeAllocator<U>& other) : commit(other.commit) {}  // NOLINT: rebinding is implicit
  T* allocate(size_t n) {
    const size_t bytes = n * sizeof(T);
    return static_cast<T*>(bytes >= kHugePage ? AllocateHuge(bytes, commit) : ::operator new(bytes));
  }
  void deallocate(T* p, size_t n) {
    if (n * sizeof(T) >= kHugePage) {
      std::free(p);
    } else {
      ::operator delete(p);
    }
  }
  template <typename U>
  bool operator==(const HugeAllocator<U>&) const { return true; }  // any frees any's arrays
  template <typename U>
  bool operator!=(const HugeAllocator<U>&) const { return false; }
  bool commit = false;
};

// Grows `v` before a push_back at its capacity, as push_back would (twice
// the capacity), but advises the new array before the old one is copied in.
template <typename T>
void GrowAdvised(std::vector<T>* v) {
  std::vector<T> bigger;
  bigger.reserve(std::max<size_t>(2 * v->capacity(), 1024));
  AdviseHugePages(bigger.data(), bigger.capacity() * sizeof(T));
  bigger.insert(bigger.end(), v->begin(), v->end());
  v->swap(bigger);
}

}  // namespace

struct DynamicTable::Index {
  using Allocator = HugeAllocator<std::pair<const uint64_t, int64_t>>;
  explicit Index(bool commit) : slots(0, absl::Hash<uint64_t>(), std::equal_to<uint64_t>(), Allocator(commit)) {}
  // absl::Hash mixes every bit of an id; nothing here depends on the
  // map's iteration order, which that hash makes differ between processes.
  absl::flat_hash_map<uint64_t, int64_t, absl::Hash<uint64_t>, std::equal_to<uint64_t>, Allocator>
      slots;
};

StatusOr<std::unique_ptr<DynamicTable>> DynamicTable::Create(DynamicTableOptions options) {
  const std::string name = "dynamic table '" + options.var.name + "'";
  if (options.var.dim == 0) return InvalidArgument(name + ": dim must be at least 1");
  PX_RETURN_IF_ERROR(
      CheckDynamicTableSettings({options.admit_after, options.ttl_steps, options.max_rows,
                                 options.policy, /*never_admit=*/{}})
          .WithContext(name));
  if (options.lfu_sample < 1) return InvalidArgument(name + ": lfu_sample must be at least 1");
  if (options.sketch_width < 1) return InvalidArgument(name + ": sketch_width must be at least 1");
  PX_RETURN_IF_ERROR(optim::ValidateOptimizer(options.var.optimizer).WithContext(name));
  return std::unique_ptr<DynamicTable>(new DynamicTable(std::move(options), /*commit=*/true));
}

size_t DynamicTable::CommittedRows(const DynamicTableOptions& o) {
  if (o.max_rows <= 0 || o.commit_bytes == 0) return 0;
  const size_t budget = static_cast<size_t>(std::min<int64_t>(o.max_rows, kReservedRows));
  return std::min(budget, o.commit_bytes / static_cast<size_t>(BytesPerRow(o)));
}

DynamicTable::DynamicTable(DynamicTableOptions options, bool commit)
    : options_(std::move(options)),
      state_slots_(optim::StateSlots(options_.var.optimizer.type)),
      stride_((1 + static_cast<size_t>(state_slots_)) * options_.var.dim),
      index_(std::make_unique<Index>(commit && CommittedRows(options_) > 0)),
      rng_(Mix64(options_.seed ^ 0x5eed)),
      ordered_(options_.ttl_steps > 0 || options_.max_rows > 0) {
  if (options_.admit_after > 1) sketch_.assign(kSketchDepth * size_t{options_.sketch_width}, 0);
  if (options_.max_rows > 0) {
    // The budget bounds the slots: their bookkeeping never moves again.
    const size_t n = static_cast<size_t>(std::min<int64_t>(options_.max_rows, kReservedRows));
    index_->slots.reserve(n);
    meta_.reserve(n);
    AdviseHugePages(meta_.data(), n * sizeof(Meta));
  }
  if (commit) Commit();
}

void DynamicTable::Commit() {
  // The index was reserved (and written once: Index(commit)) above.
  const size_t rows = CommittedRows(options_);
  if (rows == 0) return;
  meta_.resize(rows);  // writes the bookkeeping's pages, and keeps them
  meta_.clear();
  if (options_.var.optimizer.type == OptimizerType::kAdam) {
    adam_steps_.reserve(rows);
    AdviseHugePages(adam_steps_.data(), rows * sizeof(int64_t));
    adam_steps_.resize(rows);
    adam_steps_.clear();
  }
  marks_.reserve(rows);
  AdviseHugePages(marks_.data(), rows * sizeof(uint32_t));
  marks_.resize(rows, 0);  // AdmitAll's marks: zeros are "not seen in a call"
  while (chunks_.size() * kChunkRows < rows) {
    chunks_.push_back(NewChunk());
    std::memset(chunks_.back().get(), 0, kChunkRows * stride_ * sizeof(float));
  }
}

DynamicTable::~DynamicTable() = default;

bool DynamicTable::NeverAdmitted(uint64_t id) const {
  return std::find(options_.never_admit.begin(), options_.never_admit.end(), id) !=
         options_.never_admit.end();
}

int64_t DynamicTable::Find(uint64_t id) const {
  auto it = index_->slots.find(id);
  return it == index_->slots.end() ? kNotARow : it->second;
}

void DynamicTable::AdvanceTo(int64_t step) {
  step_ = std::max(step_, step);
  if (options_.ttl_steps <= 0) return;
  while (head_ >= 0 && meta_[static_cast<size_t>(head_)].last_step < step_ - options_.ttl_steps) {
    Evict(head_);
    ++stats_.evicted_ttl;
  }
}

void DynamicTable::Read(uint64_t id, float* out) {
  const int64_t slot = Find(id);
  ReadSlots(&id, &slot, 1, out);
}

void DynamicTable::ReadAll(const uint64_t* ids, size_t n, float* out) {
  // Three stages kAhead ids apart: the index entry of id i + 2·kAhead is
  // fetched, id i + kAhead is looked up and its row fetched, row i is
  // copied. Each line is then in the cache when it is used, and a batch's
  // rows never need to fit in it all at once.
  constexpr size_t kAhead = 8;
  std::vector<int64_t>& slots = read_slots_;
  slots.resize(n);
  auto look_up = [&](size_t i) {
    slots[i] = Find(ids[i]);
    if (slots[i] == kNotARow) return;
    PrefetchWeights(slots[i]);
    // The read makes the row the step's (TouchRead): its bookkeeping too.
    if (ordered_) __builtin_prefetch(&meta_[static_cast<size_t>(slots[i])], 1);
  };
  for (size_t i = 0; i < std::min(n, 2 * kAhead); ++i) index_->slots.prefetch(ids[i]);
  for (size_t i = 0; i < std::min(n, kAhead); ++i) look_up(i);
  for (size_t i = 0; i < n; ++i) {
    if (i + 2 * kAhead < n) index_->slots.prefetch(ids[i + 2 * kAhead]);
    if (i + kAhead < n) look_up(i + kAhead);
  }
  ReadSlots(ids, slots.data(), n, out);
}

void DynamicTable::ReadSlots(const uint64_t* ids, const int64_t* slots, size_t n, float* out) {
  const size_t d = dim();
  for (size_t i = 0; i < n; ++i) {
    if (slots[i] != kNotARow) {
      TouchRead(slots[i]);
      std::memcpy(out + i * d, Row(slots[i]), sizeof(float) * d);
    } else if (NeverAdmitted(ids[i])) {
      std::fill(out + i * d, out + (i + 1) * d, 0.0f);
    } else {
      ++stats_.not_admitted_reads;
      InitializeRow(options_.var.init, options_.var.id, static_cast<int64_t>(ids[i]), dim(),
                    out + i * d);
    }
  }
}

void DynamicTable::PrefetchWeights(int64_t slot) const {
  const char* row = reinterpret_cast<const char*>(Row(slot));
  for (size_t b = 0; b < sizeof(float) * dim(); b += 64) __builtin_prefetch(row + b, 0);
}

void DynamicTable::PrefetchRow(int64_t slot) const {
  const char* row = reinterpret_cast<const char*>(Row(slot));
  for (size_t b = 0; b < sizeof(float) * stride_; b += 64) __builtin_prefetch(row + b, 1);
}

StatusOr<int64_t> DynamicTable::Admit(uint64_t id) {
  if (const int64_t slot = Find(id); slot != kNotARow) {
    Touch(slot);
    return slot;
  }
  return AdmitMissing(id, Spare::kStep);
}

StatusOr<int64_t> DynamicTable::AdmitMissing(uint64_t id, Spare spare) {
  if (NeverAdmitted(id)) return kNotARow;
  if (options_.admit_after > 1 &&
      CountContribution(id) < static_cast<uint64_t>(options_.admit_after)) {
    return kNotARow;
  }
  if (options_.max_rows > 0 && static_cast<int64_t>(index_->slots.size()) >= options_.max_rows &&
      !EvictForBudget(step_, spare)) {
    return FailedPrecondition(
        "dynamic table '" + options_.var.name + "': " +
        (spare == Spare::kStep
             ? "step " + std::to_string(step_) + " alone touches more than max_rows = " +
                   std::to_string(options_.max_rows) +
                   " rows of this shard, and rows of the step in progress are never evicted"
             : "one push alone touches more than max_rows = " +
                   std::to_string(options_.max_rows) + " rows of this shard") +
        "; raise the table's max_rows (or add shards, or lower the batch size)");
  }
  const int64_t slot = NewRow(id);
  ++stats_.admitted;
  Touch(slot);
  if (versions_on_) {
    // A new row starts at a version of its own: a copy of a row this id had
    // before an eviction (or of the initializer's values) is then unlikely
    // to be within a cache's bound of it.
    VersionOf(slot) = static_cast<uint32_t>(SplitMix64(&version_draws_) % ps_wire::kRowFresh);
  }
  return slot;
}

void DynamicTable::NewEpoch() {
  if (++epoch_ == 0) {  // wrapped: forget every old mark
    std::fill(marks_.begin(), marks_.end(), 0);
    epoch_ = 1;
  }
}

Status DynamicTable::AdmitAll(const uint64_t* ids, size_t n, int64_t* slots, bool* distinct,
                              Spare spare) {
  // Lookups are cache misses in a large table: the index fetches a few ids
  // ahead (absl's prefetch), and the bookkeeping of each row found before
  // it is touched. (Its row is fetched by whoever applies to it: a batch's
  // rows need not fit in the cache.)
  // A repeated row is touched once: marked in this call's epoch (the marks
  // are fetched ahead with the bookkeeping, each a miss in a large table).
  NewEpoch();
  if (marks_.size() < meta_.size()) marks_.resize(meta_.size(), 0);
  constexpr size_t kAhead = 8;
  for (size_t i = 0; i < std::min(n, kAhead); ++i) index_->slots.prefetch(ids[i]);
  for (size_t i = 0; i < n; ++i) {
    if (i + kAhead < n) index_->slots.prefetch(ids[i + kAhead]);
    slots[i] = Find(ids[i]);
    if (slots[i] == kNotARow) continue;
    const size_t s = static_cast<size_t>(slots[i]);
    __builtin_prefetch(&marks_[s], 1);
    if (ordered_) __builtin_prefetch(&meta_[s], 1);
  }
  // Every row found becomes the step's before a new one may evict: a row
  // this contribution reads is never the one that makes room.
  bool all_distinct = true, missing = false;
  for (size_t i = 0; i < n; ++i) {
    if (slots[i] == kNotARow) {
      missing = true;
      continue;
    }
    uint32_t& mark = marks_[static_cast<size_t>(slots[i])];
    if (mark == epoch_) {
      all_distinct = false;
      continue;
    }
    mark = epoch_;
    Touch(slots[i]);
  }
  if (missing) {
    // In order of first occurrence. The ids missing are remembered with
    // what their first occurrence got (a new row's slot, or kNotARow: not
    // admitted, and a repeat must not count a second contribution): a repeat
    // looks there, not in the index. Rows made here are the step's, so no
    // later admission in this call evicts them.
    absl::flat_hash_map<uint64_t, int64_t> firsts;
    for (size_t i = 0; i < n; ++i) {
      if (slots[i] != kNotARow) continue;
      auto [first, inserted] = firsts.try_emplace(ids[i], kNotARow);
      if (!inserted) {
        slots[i] = first->second;
        all_distinct = false;
        continue;
      }
      PX_ASSIGN_OR_RETURN(slots[i], AdmitMissing(ids[i], spare));
      first->second = slots[i];
      if (slots[i] == kNotARow) continue;
      // A new row is of this call too (Spare::kContribution spares it).
      if (marks_.size() < meta_.size()) marks_.resize(meta_.size(), 0);
      marks_[static_cast<size_t>(slots[i])] = epoch_;
    }
  }
  if (distinct != nullptr) *distinct = all_distinct;
  return Status::Ok();
}

void DynamicTable::Apply(int64_t slot, const float* g, float lr_scale) {
  float* w = Row(slot);
  const size_t d = dim();
  optim::ApplyUpdate(options_.var.optimizer, options_.var.optimizer.lr * lr_scale, d, g, w,
                     state_slots_ > 0 ? w + d : nullptr, state_slots_ > 1 ? w + 2 * d : nullptr,
                     adam_steps_.empty() ? nullptr : &adam_steps_[static_cast<size_t>(slot)]);
  if (versions_on_) {
    uint32_t& v = VersionOf(slot);
    v = NextRowVersion(v);
  }
}

void DynamicTable::EnableVersions() {
  if (versions_on_) return;
  versions_on_ = true;
  version_base_ = RandomRowVersion();
  version_draws_ = (uint64_t{RandomRowVersion()} << 32) | RandomRowVersion();
}

uint32_t& DynamicTable::VersionOf(int64_t slot) {
  const size_t i = static_cast<size_t>(slot);
  if (i >= versions_.size()) versions_.resize(std::max(i + 1, 2 * versions_.size()), version_base_);
  return versions_[i];
}

std::vector<uint64_t> DynamicTable::Ids() const {
  std::vector<uint64_t> ids;
  ids.reserve(index_->slots.size());
  for (const auto& [id, slot] : index_->slots) ids.push_back(id);
  return ids;
}

int64_t DynamicTable::BytesPerRow(const DynamicTableOptions& o) {
  const int64_t values = (1 + optim::StateSlots(o.var.optimizer.type)) * int64_t{o.var.dim};
  const bool adam = o.var.optimizer.type == OptimizerType::kAdam;
  // An index entry: the pair and a control byte, at Abseil's load of at
  // most 7/8.
  const int64_t index = (static_cast<int64_t>(sizeof(std::pair<uint64_t, int64_t>)) + 1) * 8 / 7;
  return values * static_cast<int64_t>(sizeof(float)) + static_cast<int64_t>(sizeof(Meta)) +
         (adam ? 8 : 0) + static_cast<int64_t>(sizeof(uint32_t)) /* AdmitAll's mark */ + index;
}

DynamicTableStats DynamicTable::stats() const {
  DynamicTableStats s = stats_;
  s.rows = static_cast<int64_t>(index_->slots.size());
  const size_t slots = meta_.size();
  // A slot's bookkeeping, its Adam step, and its mark (AdmitAll sizes the
  // marks to the slots).
  const size_t per_slot =
      sizeof(Meta) + (adam_steps_.empty() ? 0 : sizeof(int64_t)) + sizeof(uint32_t);
  s.bytes = static_cast<int64_t>(
      chunks_.size() * kChunkRows * stride_ * sizeof(float) + slots * per_slot +
      index_->slots.capacity() * (sizeof(std::pair<uint64_t, int64_t>) + 1) +
      sketch_.size() * sizeof(uint32_t) + free_.capacity() * sizeof(int64_t));
  return s;
}

void DynamicTable::Touch(int64_t slot) {
  // Recency and frequency only decide evictions: a table with neither TTL
  // nor budget keeps none (and its hot path touches no bookkeeping).
  if (!ordered_) return;
  const size_t i = static_cast<size_t>(slot);
  if (meta_[i].touches != UINT32_MAX) ++meta_[i].touches;
  TouchRead(slot);
}

void DynamicTable::TouchRead(int64_t slot) {
  if (!ordered_) return;
  const size_t i = static_cast<size_t>(slot);
  if (meta_[i].last_step == step_) return;
  meta_[i].last_step = step_;
  // The list is kept in order of last step (not of every touch within a
  // step), which is all TTL and the budget need: a row moves to the tail
  // once a step.
  if (ordered_ && tail_ != slot) {
    Unlink(slot);
    LinkTail(slot);
  }
}

bool DynamicTable::Spared(size_t slot, int64_t protect_from, Spare spare) const {
  if (spare == Spare::kStep) return meta_[slot].last_step >= protect_from;
  return slot < marks_.size() && marks_[slot] == epoch_;
}

bool DynamicTable::EvictForBudget(int64_t protect_from, Spare spare) {
  // The oldest row not spared: under kStep the head or none (the list is in
  // order of last step); under kContribution this call's rows are at the
  // tail end, so the walk is short unless the call holds nearly every row.
  int64_t victim = head_;
  while (victim >= 0 && Spared(static_cast<size_t>(victim), protect_from, spare)) {
    if (spare == Spare::kStep) return false;  // the oldest row is of that step, so every row is
    victim = meta_[static_cast<size_t>(victim)].next;
  }
  if (victim < 0) return false;
  if (options_.policy == EvictionPolicy::kLfu) {
    // Sampled LFU: of lfu_sample rows drawn at random (not of this step),
    // the least touched; ties go to the one touched longer ago.
    const uint64_t n = meta_.size();
    int found = 0;
    for (int tries = 0; found < options_.lfu_sample && tries < 4 * options_.lfu_sample; ++tries) {
      const int64_t s = static_cast<int64_t>(NextRandom() % n);
      const size_t i = static_cast<size_t>(s);
      if (meta_[i].last_step == kFree || Spared(i, protect_from, spare)) continue;
      ++found;
      const size_t v = static_cast<size_t>(victim);
      if (meta_[i].touches < meta_[v].touches ||
          (meta_[i].touches == meta_[v].touches && meta_[i].last_step < meta_[v].last_step)) {
        victim = s;
      }
    }
  }
  Evict(victim);
  ++stats_.evicted_budget;
  return true;
}

void DynamicTable::Evict(int64_t slot) {
  const size_t i = static_cast<size_t>(slot);
  index_->slots.erase(meta_[i].id);
  Unlink(slot);
  meta_[i].last_step = kFree;
  free_.push_back(slot);
}

DynamicTable::Chunk DynamicTable::NewChunk() const {
  // A chunk under 2 MiB stays on small pages: a huge page would commit more
  // than the chunk holds.
  const size_t bytes = kChunkRows * stride_ * sizeof(float);
  if (bytes < kHugePage) return Chunk(new float[kChunkRows * stride_]);
  ChunkFree free_aligned;
  free_aligned.aligned = true;
  return Chunk(static_cast<float*>(AllocateHuge(bytes)), free_aligned);
}

void DynamicTable::ChunkFree::operator()(float* p) const {
  if (aligned) {
    std::free(p);
  } else {
    delete[] p;
  }
}

int64_t DynamicTable::TakeSlot() {
  if (!free_.empty()) {
    const int64_t slot = free_.back();
    free_.pop_back();
    return slot;
  }
  const int64_t slot = static_cast<int64_t>(meta_.size());
  if (meta_.size() == chunks_.size() * kChunkRows) {
    // Not value-initialised: each row is written when it is created.
    chunks_.push_back(NewChunk());
  }
  if (meta_.size() == meta_.capacity()) GrowAdvised(&meta_);
  meta_.push_back(Meta{0, kFree, -1, -1, 0, 0});
  if (options_.var.optimizer.type == OptimizerType::kAdam) {
    if (adam_steps_.size() == adam_steps_.capacity()) GrowAdvised(&adam_steps_);
    adam_steps_.push_back(0);
  }
  return slot;
}

int64_t DynamicTable::NewRow(uint64_t id) {
  const int64_t slot = TakeSlot();
  const size_t i = static_cast<size_t>(slot);
  float* row = Row(slot);
  const size_t d = dim();
  InitializeRow(options_.var.init, options_.var.id, static_cast<int64_t>(id), dim(), row);
  for (int s = 0; s < state_slots_; ++s) {
    std::fill(row + (1 + s) * d, row + (2 + s) * d,
              optim::InitialStateValue(options_.var.optimizer, s));
  }
  if (!adam_steps_.empty()) adam_steps_[i] = 0;
  meta_[i].id = id;
  meta_[i].touches = 0;
  meta_[i].last_step = step_;
  meta_[i].prev = meta_[i].next = -1;
  if (ordered_) LinkTail(slot);
  index_->slots.emplace(id, slot);
  return slot;
}

uint32_t DynamicTable::CountContribution(uint64_t id) {
  uint32_t least = UINT32_MAX;
  const uint64_t width = options_.sketch_width;
  for (int r = 0; r < kSketchDepth; ++r) {
    const uint64_t h = Mix64(id ^ Mix64(options_.sketch_seed + static_cast<uint64_t>(r) + 1));
    uint32_t& c = sketch_[static_cast<size_t>(r) * width + h % width];
    if (c != UINT32_MAX) ++c;
    least = std::min(least, c);
  }
  return least;
}

void DynamicTable::Unlink(int64_t slot) {
  const size_t i = static_cast<size_t>(slot);
  const int64_t p = meta_[i].prev, n = meta_[i].next;
  if (p >= 0) {
    meta_[static_cast<size_t>(p)].next = n;
  } else if (head_ == slot) {
    head_ = n;
  }
  if (n >= 0) {
    meta_[static_cast<size_t>(n)].prev = p;
  } else if (tail_ == slot) {
    tail_ = p;
  }
  meta_[i].prev = meta_[i].next = -1;
}

void DynamicTable::LinkTail(int64_t slot) {
  const size_t i = static_cast<size_t>(slot);
  meta_[i].prev = tail_;
  meta_[i].next = -1;
  if (tail_ >= 0) meta_[static_cast<size_t>(tail_)].next = slot;
  tail_ = slot;
  if (head_ < 0) head_ = slot;
}

uint64_t DynamicTable::NextRandom() { return SplitMix64(&rng_); }

std::string DynamicTable::Serialize() const {
  Writer w;
  w.out().append(kMagic, sizeof(kMagic));
  w.Put<uint32_t>(dim());
  w.Put<int32_t>(state_slots_);
  w.Put(step_);
  w.Put(rng_);
  w.Put(head_);
  w.Put(tail_);
  w.Put(stats_.admitted);
  w.Put(stats_.not_admitted_reads);
  w.Put(stats_.dropped_gradients);
  w.Put(stats_.evicted_ttl);
  w.Put(stats_.evicted_budget);
  std::vector<float> rows(meta_.size() * stride_);
  for (size_t i = 0; i < meta_.size(); ++i) {
    std::memcpy(&rows[i * stride_], Row(static_cast<int64_t>(i)), stride_ * sizeof(float));
  }
  w.PutVector(rows);
  w.PutVector(meta_);
  w.PutVector(adam_steps_);
  w.PutVector(free_);
  w.PutVector(sketch_);
  return std::move(w.out());
}

Status DynamicTable::Restore(std::string_view bytes) {
  const std::string what = "restoring dynamic table '" + options_.var.name + "'";
  if (bytes.size() < sizeof(kMagic) || std::memcmp(bytes.data(), kMagic, sizeof(kMagic)) != 0) {
    return InvalidArgument(what + ": not a dynamic table's state");
  }
  Reader r(bytes.substr(sizeof(kMagic)));
  uint32_t d = 0;
  int32_t slots = 0;
  DynamicTable t(options_);
  std::vector<float> rows;
  bool ok = r.Get(&d) && r.Get(&slots) && r.Get(&t.step_) && r.Get(&t.rng_) && r.Get(&t.head_) &&
            r.Get(&t.tail_) && r.Get(&t.stats_.admitted) && r.Get(&t.stats_.not_admitted_reads) &&
            r.Get(&t.stats_.dropped_gradients) && r.Get(&t.stats_.evicted_ttl) &&
            r.Get(&t.stats_.evicted_budget) && r.GetVector(&rows) && r.GetVector(&t.meta_) &&
            r.GetVector(&t.adam_steps_) && r.GetVector(&t.free_) && r.GetVector(&t.sketch_) &&
            r.done();
  if (!ok) return InvalidArgument(what + ": the state is truncated or has extra bytes");
  if (d != dim() || slots != state_slots_) {
    return InvalidArgument(what + ": it was saved with dim " + std::to_string(d) + " and " +
                           std::to_string(slots) + " optimizer state slots, this table has dim " +
                           std::to_string(dim()) + " and " + std::to_string(state_slots_));
  }
  const size_t n = t.meta_.size();
  if (rows.size() != n * stride_ || (!t.adam_steps_.empty() && t.adam_steps_.size() != n) ||
      t.sketch_.size() != sketch_.size()) {
    return InvalidArgument(what + ": its arrays disagree in size");
  }
  const int64_t count = static_cast<int64_t>(n);
  auto in_list = [&](int64_t s) { return s >= -1 && s < count; };
  bool links_ok = in_list(t.head_) && in_list(t.tail_);
  for (size_t i = 0; i < n && links_ok; ++i)
    links_ok = in_list(t.meta_[i].prev) && in_list(t.meta_[i].next);
  for (int64_t s : t.free_) {
    links_ok =
        links_ok && s >= 0 && s < count && t.meta_[static_cast<size_t>(s)].last_step == kFree;
  }
  if (!links_ok) return InvalidArgument(what + ": a row link points outside the table");
  for (size_t i = 0; i < n; ++i) {
    if (t.meta_[i].last_step != kFree)
      t.index_->slots.emplace(t.meta_[i].id, static_cast<int64_t>(i));
  }
  t.chunks_.clear();
  for (size_t i = 0; i < n; i += kChunkRows) {
    t.chunks_.push_back(NewChunk());
    const size_t count = std::min(kChunkRows, n - i);
    std::memcpy(t.chunks_.back().get(), &rows[i * stride_], count * stride_ * sizeof(float));
  }
  index_ = std::move(t.index_);
  chunks_ = std::move(t.chunks_);
  meta_ = std::move(t.meta_);
  adam_steps_ = std::move(t.adam_steps_);
  free_ = std::move(t.free_);
  sketch_ = std::move(t.sketch_);
  step_ = t.step_;
  rng_ = t.rng_;
  head_ = t.head_;
  tail_ = t.tail_;
  stats_ = t.stats_;
  versions_.clear();  // every row at the base again
  return Status::Ok();
}


Status DynamicTable::Push(const uint64_t* ids, size_t n, const float* grads, float lr_scale) {
  std::vector<int64_t> slots(n);
  PX_RETURN_IF_ERROR(AdmitAll(ids, n, slots.data()));
  ApplyRepeated(ids, slots.data(), n, grads, lr_scale);
  return Status::Ok();
}

void DynamicTable::ApplyRepeated(const uint64_t* ids, const int64_t* slots, size_t n,
                                 const float* grads, float lr_scale) {
  const size_t d = dim();
  absl::flat_hash_map<uint64_t, size_t> first;
  std::vector<int64_t> distinct_slots;
  std::vector<float> sums;
  first.reserve(n);
  for (size_t i = 0; i < n; ++i) {
    auto [it, inserted] = first.try_emplace(ids[i], distinct_slots.size());
    if (inserted) {
      distinct_slots.push_back(slots[i]);
      sums.insert(sums.end(), grads + i * d, grads + (i + 1) * d);
    } else {
      float* a = &sums[it->second * d];
      for (size_t j = 0; j < d; ++j) a[j] += grads[i * d + j];
    }
  }
  for (size_t k = 0; k < distinct_slots.size(); ++k) {
    if (distinct_slots[k] == kNotARow) {
      DropGradient();
    } else {
      Apply(distinct_slots[k], &sums[k * d], lr_scale);
    }
  }
}

Status DynamicTable::Absorb(const DynamicTable& from,
                            const std::function<bool(uint64_t id)>& keep) {
  const std::string what = "resharding dynamic table '" + options_.var.name + "'";
  if (from.stride_ != stride_ || from.state_slots_ != state_slots_ ||
      from.adam_steps_.empty() != adam_steps_.empty()) {
    return InvalidArgument(what + ": the checkpoint's table has another dim or optimizer");
  }
  if (!from.sketch_.empty() && !sketch_.empty() && from.sketch_.size() != sketch_.size()) {
    return InvalidArgument(what + ": the checkpoint's admission sketch has " +
                           std::to_string(from.sketch_.size()) + " counters, this table's " +
                           std::to_string(sketch_.size()));
  }
  std::vector<size_t> taken;
  for (size_t i = 0; i < from.meta_.size(); ++i) {
    const Meta& m = from.meta_[i];
    if (m.last_step == kFree || !keep(m.id)) continue;
    if (index_->slots.contains(m.id)) {
      return InvalidArgument(what + ": id " + std::to_string(m.id) +
                             " is in two of the checkpoint's files");
    }
    taken.push_back(i);
  }
  for (size_t i : taken) {
    const Meta& m = from.meta_[i];
    const int64_t slot = TakeSlot();
    const size_t j = static_cast<size_t>(slot);
    std::memcpy(Row(slot), from.Row(static_cast<int64_t>(i)), stride_ * sizeof(float));
    if (!adam_steps_.empty()) adam_steps_[j] = from.adam_steps_[i];
    meta_[j] = Meta{m.id, m.last_step, -1, -1, m.touches, 0};
    if (ordered_) LinkTail(slot);  // FitBudget puts the list in order
    index_->slots.emplace(m.id, slot);
  }
  for (size_t k = 0; k < from.sketch_.size() && k < sketch_.size(); ++k) {
    const uint64_t sum = uint64_t{sketch_[k]} + from.sketch_[k];
    sketch_[k] = static_cast<uint32_t>(std::min<uint64_t>(sum, UINT32_MAX));
  }
  step_ = std::max(step_, from.step_);
  return Status::Ok();
}

int64_t DynamicTable::FitBudget() {
  if (!ordered_) return 0;
  std::vector<int64_t> held;
  held.reserve(index_->slots.size());
  for (size_t i = 0; i < meta_.size(); ++i) {
    if (meta_[i].last_step != kFree) held.push_back(static_cast<int64_t>(i));
  }
  std::stable_sort(held.begin(), held.end(), [this](int64_t a, int64_t b) {
    return meta_[static_cast<size_t>(a)].last_step < meta_[static_cast<size_t>(b)].last_step;
  });
  head_ = tail_ = -1;
  for (int64_t s : held) LinkTail(s);
  int64_t evicted = 0;
  while (options_.max_rows > 0 && static_cast<int64_t>(index_->slots.size()) > options_.max_rows &&
         EvictForBudget(INT64_MAX, Spare::kStep)) {
    ++evicted;
  }
  return evicted;
}

}  // namespace parallax::ps
