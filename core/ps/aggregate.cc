#include "core/ps/aggregate.h"

#include <algorithm>
#include <cstdint>
#include <utility>

#include "core/ps/plan.h"

namespace parallax::ps {

Dedupe DedupeIds(std::span<const int64_t> ids) {
  Dedupe d;
  const size_t n = ids.size();
  // (id, position) pairs sort by id, then position: equal ids keep input
  // order, which fixes the summation order of repeated ids.
  std::vector<std::pair<int64_t, uint32_t>> order(n);
  for (size_t i = 0; i < n; ++i) order[i] = {ids[i], static_cast<uint32_t>(i)};
  std::sort(order.begin(), order.end());
  d.index_of.resize(n);
  d.unique.reserve(n);
  for (size_t k = 0; k < n; ++k) {
    if (d.unique.empty() || d.unique.back() != order[k].first) d.unique.push_back(order[k].first);
    d.index_of[order[k].second] = static_cast<uint32_t>(d.unique.size() - 1);
  }
  return d;
}

Dedupe DedupeIdsFirstSeen(std::span<const int64_t> ids, std::vector<uint32_t>* first_pos) {
  Dedupe d;
  const size_t n = ids.size();
  size_t cap = 16;
  while (cap < 2 * n) cap <<= 1;
  const size_t mask = cap - 1;
  std::vector<uint32_t> table(cap, UINT32_MAX);  // open addressing: unique index or empty
  d.unique.reserve(n);
  d.index_of.resize(n);
  first_pos->clear();
  first_pos->reserve(n);
  for (size_t i = 0; i < n; ++i) {
    const int64_t id = ids[i];
    size_t h = Mix64(static_cast<uint64_t>(id)) & mask;
    while (table[h] != UINT32_MAX && d.unique[table[h]] != id) h = (h + 1) & mask;
    if (table[h] == UINT32_MAX) {
      table[h] = static_cast<uint32_t>(d.unique.size());
      d.unique.push_back(id);
      first_pos->push_back(static_cast<uint32_t>(i));
    }
    d.index_of[i] = table[h];
  }
  return d;
}

SparseRows DedupeSum(std::span<const int64_t> ids, std::span<const float> grads, uint32_t dim) {
  Dedupe d = DedupeIds(ids);
  SparseRows out;
  out.values.assign(d.unique.size() * dim, 0.0f);
  for (size_t i = 0; i < ids.size(); ++i) {
    float* dst = out.values.data() + size_t{d.index_of[i]} * dim;
    const float* src = grads.data() + i * dim;
    for (uint32_t j = 0; j < dim; ++j) dst[j] += src[j];
  }
  out.ids = std::move(d.unique);
  return out;
}

SparseRows DedupeSumFirstSeen(std::span<const int64_t> ids, std::span<const float> grads,
                              uint32_t dim) {
  std::vector<uint32_t> first_pos;
  Dedupe d = DedupeIdsFirstSeen(ids, &first_pos);
  SparseRows out;
  // Each distinct id's first row is appended, later ones added: no zeroing pass.
  out.values.reserve(d.unique.size() * dim);
  for (size_t u = 0; u < d.unique.size(); ++u) {
    const float* first = grads.data() + size_t{first_pos[u]} * dim;
    out.values.insert(out.values.end(), first, first + dim);
  }
  if (d.unique.size() != ids.size()) {
    for (size_t i = 0; i < ids.size(); ++i) {
      const uint32_t u = d.index_of[i];
      if (first_pos[u] == i) continue;
      float* dst = out.values.data() + size_t{u} * dim;
      const float* src = grads.data() + i * dim;
      for (uint32_t j = 0; j < dim; ++j) dst[j] += src[j];
    }
  }
  out.ids = std::move(d.unique);
  return out;
}

SparseRows MergeSparse(std::span<const SparseRows> parts, uint32_t dim) {
  std::vector<int64_t> all_ids;
  std::vector<float> all_values;
  for (const auto& p : parts) {
    all_ids.insert(all_ids.end(), p.ids.begin(), p.ids.end());
    all_values.insert(all_values.end(), p.values.begin(), p.values.end());
  }
  return DedupeSum(all_ids, all_values, dim);
}

}  // namespace parallax::ps
