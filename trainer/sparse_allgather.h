// The all-gather path for sparse variables: every rank sends the rows its
// batch touched (deduplicated, gradients of repeated ids summed) to every
// other rank, and every rank applies the same mean to its replica.
//
// All tables of a step travel together in two collectives, whatever their
// number: an AllGather of the per-table row counts, then one AllGatherv of
// the packed rows (per rank, per table: the ids as int64, then the rows as
// float32). Gloo's per-operation cost, not the bytes, dominated this path
// when it took three collectives per table (docs/PERFORMANCE.md).
#ifndef PARALLAX_TRAINER_SPARSE_ALLGATHER_H_
#define PARALLAX_TRAINER_SPARSE_ALLGATHER_H_

#include <cstdint>
#include <vector>

#include "core/comm/communicator.h"
#include "core/ps/aggregate.h"
#include "parallax/status.h"

namespace parallax::trainer {

// `mine[t]` holds this rank's rows of table t (unique ids; dims[t] floats a
// row). Returns per table the union over all ranks, the rows of repeated ids
// summed in rank order (ps::MergeSparse, ids ascending), divided by the
// number of ranks for kMean. Every rank passes the same `dims` and `op`.
// Also the local aggregation of sparse PS gradients (kSum over a host's ranks).
// With `merge_rank` >= 0 only that rank unpacks and merges (the others return
// an empty vector after the exchange): local aggregation's sums are pushed by
// one rank, and merging them on every rank cost the host's other ranks CPU
// for nothing (docs/PERFORMANCE.md, "Emulated cluster: CPU per step").
StatusOr<std::vector<ps::SparseRows>> AllGatherSparse(comm::Communicator* comm,
                                                      const std::vector<ps::SparseRows>& mine,
                                                      const std::vector<uint32_t>& dims,
                                                      comm::ReduceOp op, comm::Deadline deadline,
                                                      int merge_rank = -1);

}  // namespace parallax::trainer

#endif  // PARALLAX_TRAINER_SPARSE_ALLGATHER_H_
