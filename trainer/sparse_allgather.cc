#include "trainer/sparse_allgather.h"

#include <cstring>
#include <limits>
#include <string>

namespace parallax::trainer {

StatusOr<std::vector<ps::SparseRows>> AllGatherSparse(comm::Communicator* comm,
                                                      const std::vector<ps::SparseRows>& mine,
                                                      const std::vector<uint32_t>& dims,
                                                      comm::ReduceOp op, comm::Deadline deadline,
                                                      int merge_rank) {
  const size_t tables = dims.size();
  if (mine.size() != tables) {
    return InvalidArgument("all-gather of sparse rows: " + std::to_string(mine.size()) +
                           " tables of rows for " + std::to_string(tables) + " dimensions");
  }
  auto row_bytes = [&](size_t t) { return sizeof(int64_t) + sizeof(float) * size_t{dims[t]}; };
  // 1. Every rank's row count per table.
  std::vector<int32_t> my_counts(tables);
  size_t my_bytes = 0;
  for (size_t t = 0; t < tables; ++t) {
    if (mine[t].values.size() != mine[t].ids.size() * dims[t]) {
      return InvalidArgument("all-gather of sparse rows: table " + std::to_string(t) + " has " +
                             std::to_string(mine[t].ids.size()) + " ids and " +
                             std::to_string(mine[t].values.size()) + " values for dim " +
                             std::to_string(dims[t]));
    }
    if (mine[t].ids.size() > static_cast<size_t>(std::numeric_limits<int32_t>::max())) {
      return InvalidArgument("all-gather of sparse rows: table " + std::to_string(t) +
                             " has more than 2^31 rows in one step");
    }
    my_counts[t] = static_cast<int32_t>(mine[t].ids.size());
    my_bytes += mine[t].ids.size() * row_bytes(t);
  }
  const int n = comm->world_size();
  std::vector<int32_t> counts(static_cast<size_t>(n) * tables);
  if (tables > 0) {
    PX_RETURN_IF_ERROR(comm->AllGather(my_counts.data(), tables, comm::DataType::kInt32,
                                       counts.data(), deadline));
  }
  auto count = [&](int r, size_t t) {
    return static_cast<size_t>(counts[static_cast<size_t>(r) * tables + t]);
  };
  // 2. The packed rows of every rank.
  std::vector<size_t> bytes(static_cast<size_t>(n), 0);
  size_t total = 0;
  for (int r = 0; r < n; ++r) {
    for (size_t t = 0; t < tables; ++t) bytes[static_cast<size_t>(r)] += count(r, t) * row_bytes(t);
    total += bytes[static_cast<size_t>(r)];
  }
  if (bytes[static_cast<size_t>(comm->rank())] != my_bytes) {
    return Internal("all-gather of sparse rows: this rank's counts came back changed");
  }
  // memcpy of nothing may still not be given a null pointer (an empty vector's data()).
  auto copy = [](void* dst, const void* src, size_t n) {
    if (n > 0) std::memcpy(dst, src, n);
  };
  std::vector<uint8_t> packed(my_bytes);
  uint8_t* out = packed.data();
  for (size_t t = 0; t < tables; ++t) {
    copy(out, mine[t].ids.data(), mine[t].ids.size() * sizeof(int64_t));
    out += mine[t].ids.size() * sizeof(int64_t);
    copy(out, mine[t].values.data(), mine[t].values.size() * sizeof(float));
    out += mine[t].values.size() * sizeof(float);
  }
  std::vector<uint8_t> all(total);
  if (total > 0) {  // every rank computed the same total from the same counts
    PX_RETURN_IF_ERROR(
        comm->AllGatherv(packed.data(), bytes, comm::DataType::kUInt8, all.data(), deadline));
  }
  if (merge_rank >= 0 && comm->rank() != merge_rank) return std::vector<ps::SparseRows>{};
  // 3. Unpack per table in rank order, merge (and average).
  std::vector<std::vector<ps::SparseRows>> parts(tables,
                                                 std::vector<ps::SparseRows>(static_cast<size_t>(n)));
  const uint8_t* in = all.data();
  for (int r = 0; r < n; ++r) {
    for (size_t t = 0; t < tables; ++t) {
      ps::SparseRows& part = parts[t][static_cast<size_t>(r)];
      const size_t c = count(r, t);
      part.ids.resize(c);
      part.values.resize(c * dims[t]);
      copy(part.ids.data(), in, c * sizeof(int64_t));
      in += c * sizeof(int64_t);
      copy(part.values.data(), in, part.values.size() * sizeof(float));
      in += part.values.size() * sizeof(float);
    }
  }
  std::vector<ps::SparseRows> merged(tables);
  const float inv = 1.0f / static_cast<float>(n);
  for (size_t t = 0; t < tables; ++t) {
    merged[t] = ps::MergeSparse(parts[t], dims[t]);
    if (op == comm::ReduceOp::kMean) {
      for (float& x : merged[t].values) x *= inv;
    }
  }
  return merged;
}

}  // namespace parallax::trainer
