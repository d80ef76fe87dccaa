#include "core/ps/row_cache.h"

#include <algorithm>
#include <cstring>
#include <iterator>

#include "core/base/logging.h"
#include "schemas/ps_wire.h"

namespace parallax::ps {

RowCache::RowCache(const VariableSpec& var, int64_t staleness, size_t capacity,
                   size_t value_bytes, bool accumulate, bool check_versions)
    : dim_(var.dim),
      staleness_(staleness),
      capacity_(capacity),
      row_pull_bytes_(sizeof(int64_t) + size_t{var.dim} * value_bytes),
      accumulate_(accumulate),
      check_versions_(check_versions),
      partition_of_(var) {
  PX_CHECK(staleness >= 1 && capacity >= 1 && var.dim >= 1)
      << "row cache of \"" << var.name << "\": staleness " << staleness << ", capacity "
      << capacity;
  // Room for the rows it may hold (no more than the table has), so that
  // filling up does not copy them over and over; the pages are committed as
  // rows arrive. (Not the index: a large sparse one costs every lookup of a
  // cache that stays small, as the clock rule's does.)
  const size_t rows = std::min<size_t>(
      {capacity, var.rows > 0 ? static_cast<size_t>(var.rows) : capacity, size_t{1} << 20});
  entries_.reserve(rows);
  rows_.reserve(rows * dim_);
  if (accumulate_) grads_.reserve(rows * dim_);
}

void RowCache::Count(int64_t id, int64_t step, Entry* held) {
  const size_t k = static_cast<size_t>(step & 1);
  if (held != nullptr) {
    if (held->counted_step[k] == step) return;
    held->counted_step[k] = step;
    if (Serves(*held, step)) {
      ++counters_.hits;
      counters_.bytes_saved += static_cast<int64_t>(row_pull_bytes_);
    } else {
      ++counters_.stale_refreshes;
      if (check_versions_) counters_.bytes_saved -= kVersionBytes;
    }
    return;
  }
  if (check_versions_) counters_.bytes_saved -= kVersionBytes;
  if (missed_step_[k] != step) {
    missed_[k].clear();
    missed_step_[k] = step;
  }
  if (!missed_[k].insert(id).second) return;
  if (expired_at_ == step - 1 && expired_.contains(id)) {
    ++counters_.stale_refreshes;
  } else {
    ++counters_.misses;
  }
}

namespace {
// How many ids ahead the lookups prefetch: an index probe or a cached row is
// a cache miss in a cache of many rows. In a small one (the clock rule's
// holds about staleness + 1 steps of rows) they are not, and prefetching
// only costs: below kPrefetchRows rows the lookups do not.
constexpr size_t kAhead = 8;
constexpr size_t kPrefetchRows = 16384;
}  // namespace

bool RowCache::Prefetching() const { return index_.size() >= kPrefetchRows; }

void RowCache::FindAll(std::span<const int64_t> ids) {
  found_.resize(ids.size());
  const bool prefetch = Prefetching();
  for (size_t i = 0; i < ids.size(); ++i) {
    if (prefetch && i + kAhead < ids.size()) index_.prefetch(ids[i + kAhead]);
    auto it = index_.find(ids[i]);
    found_[i] = it == index_.end() ? kNone : it->second;
  }
}

void RowCache::PrefetchEntry(size_t i, bool row) {
  if (i >= found_.size() || found_[i] == kNone) return;
  __builtin_prefetch(&entries_[found_[i]]);
  if (row) __builtin_prefetch(Row(found_[i]));
}

void RowCache::Plan(std::span<const int64_t> ids, int64_t step, std::vector<int64_t>* to_pull,
                    std::vector<uint32_t>* held) {
  const uint64_t mark = ++plans_;
  absl::flat_hash_set<int64_t> not_held;  // this call's, listed once
  FindAll(ids);
  const bool prefetch = Prefetching();
  for (size_t i = 0; i < ids.size(); ++i) {
    if (prefetch) PrefetchEntry(i + kAhead, /*row=*/false);
    const int64_t id = ids[i];
    if (found_[i] == kNone) {
      if (!not_held.insert(id).second) continue;
      Count(id, step, nullptr);
      to_pull->push_back(id);
      if (held != nullptr) held->push_back(ps_wire::kNotHeld);
      continue;
    }
    Entry& e = entries_[found_[i]];
    if (e.plan_mark == mark) continue;
    e.plan_mark = mark;
    Count(id, step, &e);
    Use(found_[i], step);
    if (!Serves(e, step)) {
      to_pull->push_back(id);
      if (held != nullptr) held->push_back(check_versions_ ? e.version : ps_wire::kNotHeld);
    }
  }
}

void RowCache::Held(std::span<const int64_t> ids, std::vector<uint32_t>* held) const {
  held->clear();
  held->reserve(ids.size());
  for (int64_t id : ids) {
    auto it = index_.find(id);
    held->push_back(it == index_.end() || !check_versions_ ? ps_wire::kNotHeld
                                                           : entries_[it->second].version);
  }
}

void RowCache::Read(std::span<const int64_t> ids, int64_t step, float* out,
                    std::vector<size_t>* unserved) {
  FindAll(ids);
  const bool prefetch = Prefetching();
  for (size_t i = 0; i < ids.size(); ++i) {
    if (prefetch) PrefetchEntry(i + kAhead, /*row=*/true);
    const uint32_t slot = found_[i];
    Entry* held = slot == kNone ? nullptr : &entries_[slot];
    Count(ids[i], step, held);
    if (held != nullptr && Serves(*held, step)) {
      std::memcpy(out + i * dim_, Row(slot), dim_ * sizeof(float));
      Use(slot, step);
    } else {
      unserved->push_back(i);
    }
  }
}

void RowCache::Insert(std::span<const int64_t> ids, std::span<const float> rows, int64_t step,
                      std::span<const uint32_t> versions) {
  PX_CHECK(rows.size() == ids.size() * dim_) << "row cache: " << rows.size() << " values for "
                                             << ids.size() << " rows of dim " << dim_;
  PX_CHECK(versions.empty() || versions.size() == ids.size())
      << "row cache: " << versions.size() << " versions for " << ids.size() << " rows";
  for (size_t i = 0; i < ids.size(); ++i) {
    // (Not FindAll: making room below may evict a row a later id found.)
    if (Prefetching() && i + kAhead < ids.size()) index_.prefetch(ids[i + kAhead]);
    auto it = index_.find(ids[i]);
    if (!versions.empty() && versions[i] == ps_wire::kRowFresh) {
      // The copy held took at most `staleness` pushes since: it serves `step`.
      if (it == index_.end()) continue;  // dropped since the pull: Read() leaves it unserved
      Entry& e = entries_[it->second];
      if (e.checked_at == step) continue;
      e.checked_at = step;
      if (e.counted_step[step & 1] == step) {  // counted as a stale refresh: a hit after all
        --counters_.stale_refreshes;
        ++counters_.hits;
        counters_.bytes_saved += static_cast<int64_t>(row_pull_bytes_) - kVersionBytes;
      }
      Use(it->second, step);
      continue;
    }
    uint32_t slot;
    if (it != index_.end()) {
      slot = it->second;
      // A pull answered after a newer one (two lookups of a step) must not
      // make the row look younger than what it holds.
      if (entries_[slot].pulled_at > step) continue;
    } else {
      slot = NewSlot(step);
      Entry& e = entries_[slot];
      e = Entry{};  // nothing of a row that had the slot before
      e.id = ids[i];
      e.partition = partition_of_(ids[i]);
      // Pulled for `step` because it was not held: counted as that step's
      // miss already (Plan or Read).
      e.counted_step[step & 1] = step;
      index_.emplace(ids[i], slot);
    }
    entries_[slot].pulled_at = step;
    entries_[slot].version = versions.empty() ? ps_wire::kNotHeld : versions[i];
    // TakeDue ends the row's steps (or, with version checks, moves its sum).
    if (!check_versions_ || accumulate_) by_pull_[step].emplace_back(slot, ids[i]);
    std::memcpy(Row(slot), rows.data() + i * dim_, dim_ * sizeof(float));
    Use(slot, step);
  }
}

void RowCache::AddGradients(std::span<const int64_t> ids, std::span<const float> grads,
                            int64_t step, RowsToPush* push) {
  PX_CHECK(grads.size() == ids.size() * dim_) << "row cache: " << grads.size()
                                              << " gradient values for " << ids.size() << " rows";
  if (!accumulate_) {
    push->ids.insert(push->ids.end(), ids.begin(), ids.end());
    push->grads.insert(push->grads.end(), grads.begin(), grads.end());
    return;
  }
  for (size_t i = 0; i < ids.size(); ++i) {
    const float* g = grads.data() + i * dim_;
    auto it = index_.find(ids[i]);
    // A row past its first `staleness` steps (version checks keep it) has
    // had its sum pushed: its gradients go at once.
    if (it == index_.end() || !Fresh(entries_[it->second], step)) {
      push->ids.push_back(ids[i]);
      push->grads.insert(push->grads.end(), g, g + dim_);
      continue;
    }
    const uint32_t slot = it->second;
    Entry& e = entries_[slot];
    float* acc = Grad(slot);
    if (!e.has_grad) {
      std::memcpy(acc, g, dim_ * sizeof(float));
      e.has_grad = true;
    } else {
      for (uint32_t d = 0; d < dim_; ++d) acc[d] += g[d];
    }
  }
}

void RowCache::MoveGradient(uint32_t slot, RowsToPush* push) {
  Entry& e = entries_[slot];
  if (!e.has_grad) return;
  push->ids.push_back(e.id);
  const float* g = Grad(slot);
  push->grads.insert(push->grads.end(), g, g + dim_);
  e.has_grad = false;
}

void RowCache::TakeDue(int64_t step, RowsToPush* push) {
  // Rows pulled for a step ≤ step − staleness serve no later step.
  expired_.clear();
  expired_at_ = step;
  while (!by_pull_.empty() && by_pull_.begin()->first <= step - staleness_) {
    const int64_t pulled_at = by_pull_.begin()->first;
    for (const auto& [slot, id] : by_pull_.begin()->second) {
      auto it = index_.find(id);
      if (it == index_.end() || it->second != slot || entries_[slot].pulled_at != pulled_at) continue;
      if (check_versions_) {  // stays, to be checked; its sum is due
        MoveGradient(slot, &due_);
        continue;
      }
      expired_.insert(id);
      Remove(slot);
    }
    by_pull_.erase(by_pull_.begin());
  }
  // Rows past the capacity (a step that used more) leave, least recently
  // used first, now that their step is over.
  while (index_.size() > capacity_) {
    const uint32_t lru = LeastRecentlyUsed();
    if (entries_[lru].used_at > step) break;
    ++counters_.evictions;
    Remove(lru);
  }
  // Far below its capacity (the clock rule's rows leave after their steps)
  // the cache needs no queue until it fills again.
  if (queued_ && index_.size() < capacity_ / 2) StopQueue();
  push->ids.insert(push->ids.end(), due_.ids.begin(), due_.ids.end());
  push->grads.insert(push->grads.end(), due_.grads.begin(), due_.grads.end());
  due_.ids.clear();
  due_.grads.clear();
}

void RowCache::DropPartition(uint32_t partition) {
  std::vector<uint32_t> drop;
  for (const auto& [id, slot] : index_) {
    if (entries_[slot].partition == partition) drop.push_back(slot);
  }
  for (uint32_t slot : drop) Remove(slot);
  counters_.resets += static_cast<int64_t>(drop.size());
}

void RowCache::Clear(RowsToPush* push) {
  for (const auto& [id, slot] : index_) MoveGradient(slot, push);
  push->ids.insert(push->ids.end(), due_.ids.begin(), due_.ids.end());
  push->grads.insert(push->grads.end(), due_.grads.begin(), due_.grads.end());
  due_ = RowsToPush{};
  index_.clear();
  entries_.clear();
  rows_.clear();
  grads_.clear();
  free_.clear();
  by_pull_.clear();
  StopQueue();
}

void RowCache::Use(uint32_t slot, int64_t step) {
  Entry& e = entries_[slot];
  if (e.used_at >= step) return;  // queued for this step (or the next) already
  e.used_at = step;
  if (!queued_) return;  // no queue while nothing needs one (StartQueue)
  Queue(slot, step);
  if (++used_records_ > 4 * index_.size() + 4096) Compact();
}

void RowCache::Queue(uint32_t slot, int64_t step) {
  if (used_last_step_ != step) {
    used_last_ = &used_[step];
    used_last_step_ = step;
  }
  used_last_->push_back(slot);
}

void RowCache::StartQueue() {
  // Every held row once, by the last step that used it (within a step, by
  // slot: the queue learns the order of uses from now on).
  std::vector<std::pair<int64_t, uint32_t>> held;
  held.reserve(index_.size());
  for (const auto& [id, slot] : index_) held.emplace_back(entries_[slot].used_at, slot);
  std::sort(held.begin(), held.end());
  StopQueue();
  queued_ = true;
  for (const auto& [step, slot] : held) Queue(slot, step);
  used_records_ = held.size();
}

void RowCache::StopQueue() {
  used_.clear();
  used_last_step_ = kNoStep;
  used_front_ = used_records_ = 0;
  queued_ = false;
}

uint32_t RowCache::LeastRecentlyUsed() {
  if (!queued_) StartQueue();
  while (true) {
    PX_CHECK(!used_.empty()) << "row cache: no row held";
    const auto& [step, slots] = *used_.begin();
    for (; used_front_ < slots.size(); ++used_front_, --used_records_) {
      const uint32_t slot = slots[used_front_];
      if (entries_[slot].used_at == step) return slot;
    }
    EraseUsed(used_.begin());
    used_front_ = 0;
  }
}

std::map<int64_t, std::vector<uint32_t>>::iterator RowCache::EraseUsed(
    std::map<int64_t, std::vector<uint32_t>>::iterator it) {
  if (it->first == used_last_step_) used_last_step_ = kNoStep;
  return used_.erase(it);
}

void RowCache::Compact() {
  // The live records stay, in order. (A slot freed and taken again within a
  // step may keep two live records in that step's list; the first one found
  // stands for it, the other is skipped once the row leaves.)
  size_t kept = 0;
  for (auto it = used_.begin(); it != used_.end();) {
    std::vector<uint32_t>& slots = it->second;
    size_t n = 0;
    for (size_t k = it == used_.begin() ? used_front_ : 0; k < slots.size(); ++k) {
      if (entries_[slots[k]].used_at == it->first) slots[n++] = slots[k];
    }
    slots.resize(n);
    kept += n;
    it = n == 0 ? EraseUsed(it) : std::next(it);
  }
  used_front_ = 0;
  used_records_ = kept;
}

void RowCache::Remove(uint32_t slot) {
  MoveGradient(slot, &due_);
  entries_[slot].used_at = -1;  // its records in used_ are spent
  index_.erase(entries_[slot].id);
  free_.push_back(slot);
}

uint32_t RowCache::NewSlot(int64_t step) {
  // The least recently used row makes room unless `step` uses it too (then
  // the cache holds more than its capacity until TakeDue).
  if (index_.size() >= capacity_) {
    const uint32_t lru = LeastRecentlyUsed();
    if (entries_[lru].used_at < step) {
      ++counters_.evictions;
      Remove(lru);
    }
  }
  uint32_t slot;
  if (!free_.empty()) {
    slot = free_.back();
    free_.pop_back();
  } else {
    slot = static_cast<uint32_t>(entries_.size());
    entries_.emplace_back();
    rows_.resize(rows_.size() + dim_);
    if (accumulate_) grads_.resize(grads_.size() + dim_);  // sums only with `accumulate`
  }
  return slot;
}

}  // namespace parallax::ps
