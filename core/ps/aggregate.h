// Sparse gradient aggregation on the worker side: deduplicate ids and sum
// the gradients of repeated ids before they leave the process, and merge
// the gradients of several workers on one host so that one of them pushes
// for the host (local aggregation).
#ifndef PARALLAX_CORE_PS_AGGREGATE_H_
#define PARALLAX_CORE_PS_AGGREGATE_H_

#include <cstdint>
#include <span>
#include <vector>

namespace parallax::ps {

// A set of sparse rows: ids[i] owns values[i*dim .. (i+1)*dim).
struct SparseRows {
  std::vector<int64_t> ids;
  std::vector<float> values;
};

// The distinct ids of `ids` in ascending order, and for every input position
// the index of its id in `unique` (so unique[index_of[i]] == ids[i]).
struct Dedupe {
  std::vector<int64_t> unique;
  std::vector<uint32_t> index_of;
};
Dedupe DedupeIds(std::span<const int64_t> ids);
// The same, but `unique` in order of first occurrence (hashing, no sort:
// the client's hot path). first_pos[u] is the first position of unique[u].
Dedupe DedupeIdsFirstSeen(std::span<const int64_t> ids, std::vector<uint32_t>* first_pos);

// Deduplicates `ids` and sums the rows of repeated ids in input order.
// REQUIRES: grads.size() == ids.size() * dim.
SparseRows DedupeSum(std::span<const int64_t> ids, std::span<const float> grads, uint32_t dim);
// The same sums (repeated ids in input order, so the same values), the ids
// in order of first occurrence: hashing instead of a sort, for rows whose
// order does not matter (a rank's own rows before they are merged, or
// applied to its replica).
SparseRows DedupeSumFirstSeen(std::span<const int64_t> ids, std::span<const float> grads,
                              uint32_t dim);

// Local aggregation: the union of several workers' rows, repeated ids summed
// in the order of `parts` (deterministic, so every host gets the same sums
// for the same inputs). Output ids are ascending.
SparseRows MergeSparse(std::span<const SparseRows> parts, uint32_t dim);

}  // namespace parallax::ps

#endif  // PARALLAX_CORE_PS_AGGREGATE_H_
