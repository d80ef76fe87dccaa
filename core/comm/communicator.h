// Communicator: the seam for dense collectives. One object per rank of a job;
// the backend is Gloo (TCP, host memory; all-reduce through shared memory
// among the ranks of one host, hierarchical across hosts) or NCCL (GPU,
// device memory), both
// bootstrapped through a RendezvousStore (the coordinator's key-value store in
// a job, an in-memory or file store in tests).
//
// Every call takes a deadline and returns a Status instead of hanging when a
// peer is gone:
//   DEADLINE_EXCEEDED   a peer did not take part before the deadline (never
//                       arrived, or is stuck); the message names this rank,
//                       the operation and what was waited for.
//   UNAVAILABLE         a peer closed its connection (it exited or crashed).
//   INVALID_ARGUMENT    bad arguments on this rank, or ranks disagree on the
//                       count, type or root; the message names the ranks
//                       (see verify_arguments for when a disagreement shows
//                       as DEADLINE_EXCEEDED or UNAVAILABLE naming them).
//   FAILED_PRECONDITION the backend cannot be used here (NCCL without a
//                       device), or an earlier error broke the communicator.
// Gloo writes to sockets without MSG_NOSIGNAL, so Create() sets SIGPIPE to
// SIG_IGN where the process left it at its default: a peer's death then
// fails the call instead of killing this process.
//
// After any error other than INVALID_ARGUMENT found before communicating, the
// communicator is broken: every later call fails with FAILED_PRECONDITION and
// the job should start a new attempt.
//
// Thread-safety: calls are serialized internally; ranks must issue the same
// collectives in the same order (as with MPI, Gloo and NCCL).
#ifndef PARALLAX_CORE_COMM_COMMUNICATOR_H_
#define PARALLAX_CORE_COMM_COMMUNICATOR_H_

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/comm/wire_bytes.h"
#include "parallax/status.h"

namespace parallax::comm {

using Deadline = std::chrono::steady_clock::time_point;

inline Deadline DeadlineAfter(std::chrono::milliseconds timeout) {
  return std::chrono::steady_clock::now() + timeout;
}

enum class DataType { kFloat32, kFloat16, kBFloat16, kInt32, kUInt8 };
enum class ReduceOp { kSum, kMean };
enum class Backend { kGloo, kNccl };

size_t DataTypeSize(DataType type);
std::string_view DataTypeName(DataType type);
std::string_view ReduceOpName(ReduceOp op);
std::string_view BackendName(Backend backend);

class RendezvousStore;

// Part of a longer buffer: `count` elements at `data`.
struct Piece {
  void* data;
  size_t count;
};

// Bytes a communicator moved since it was created, by kind of collective, as
// its transport sees them (see wire_bytes.h): what `ss -tin` counts for its
// sockets, not the sizes of the buffers handed to it. The call-header
// exchange of verify_arguments counts with the collective it precedes.
struct WireCounters {
  WireBytes allreduce;
  WireBytes allgather;  // AllGather and AllGatherv
  WireBytes other;      // Broadcast and Barrier
};

struct CommunicatorOptions {
  Backend backend = Backend::kGloo;
  int rank = 0;
  int world_size = 1;
  // Keys of this communicator live under this prefix in the store. In a job:
  // kv_keys::CommPrefix(job_id, attempt) ("job/<id>/<attempt>/comm"), so a restarted
  // attempt never reads a stale address. Two communicators of one job need
  // two prefixes.
  std::string key_prefix = "comm";
  // Gloo: address (or host name) to bind and advertise to peers; the trainer
  // passes PARALLAX_BIND_ADDR. The port is always ephemeral.
  std::string bind_address = "127.0.0.1";
  // NCCL: the CUDA device ordinal (the local rank, under CUDA_VISIBLE_DEVICES).
  int device = 0;
  // How long Create() waits for every peer to publish its address.
  std::chrono::milliseconds rendezvous_timeout{60'000};
  // Gloo: check that every rank passes the same (operation, count, type,
  // root) and fail with INVALID_ARGUMENT naming the ranks that disagree. The
  // check is one small extra round over the sockets, made the first time a
  // call of a given shape is issued (a fusion bucket's layout repeats every
  // step, so steady state pays nothing; AllGatherv, whose counts change every
  // call, is checked once per type), or on every call with
  // verify_every_call. A call that skipped the round still cannot crash on a
  // mismatch: its Gloo tag carries its shape, so ranks that disagree wait on
  // different slots until one times out; then each failed rank states its
  // call in the rendezvous store and the error names the ranks that
  // disagree. With verify_arguments off no call is checked up front.
  // Calls through shared memory compare their shapes in the segment, always
  // and for free.
  bool verify_arguments = true;
  bool verify_every_call = false;
  // Gloo: ranks that share a host all-reduce through shared memory (no
  // socket), and with ranks on several hosts the all-reduce is hierarchical:
  // summed within each host in shared memory, all-reduced among one rank per
  // host over TCP, copied back within each host. Other collectives stay on
  // Gloo. Where a host cannot make its segment (say /dev/shm is too small)
  // every rank falls back to Gloo over TCP, with a warning that says why.
  // Which ranks share a host: core/comm/host_topology.h.
  bool shared_memory = true;
  // Where the segment is made: a tmpfs every rank of a host sees. Its name
  // is removed as soon as every rank has mapped it.
  std::string shm_directory = "/dev/shm";
  // Bytes each rank stages per step of the shared-memory reduction (a
  // multiple of 4096); the segment holds 2 x ranks on the host x this.
  size_t shm_chunk_bytes = 1u << 20;
  // Overrides this process's host identity (ranks with equal host_id count
  // as one host): for tests that place thread ranks on "different hosts".
  std::string host_id;
};

class Communicator {
 public:
  virtual ~Communicator() = default;

  // Connects to every peer through `store`, which must outlive the
  // communicator (after a failed collective, ranks state their calls in it).
  // Blocks until all world_size ranks have arrived or
  // options.rendezvous_timeout passes (DEADLINE_EXCEEDED naming the ranks
  // that did not arrive).
  static StatusOr<std::unique_ptr<Communicator>> Create(const CommunicatorOptions& options,
                                                        RendezvousStore* store);

  virtual int rank() const = 0;
  virtual int world_size() const = 0;
  virtual Backend backend() const = 0;
  virtual bool Supports(DataType type) const = 0;

  // Memory: host pointers for Gloo, device pointers for NCCL. A null pointer
  // is allowed when the count is 0.

  // Reduces `count` elements of `data` over all ranks, in place. kMean divides
  // the sum by world_size().
  virtual Status AllReduce(void* data, size_t count, DataType type, ReduceOp op,
                           Deadline deadline) = 0;
  // All-reduces the concatenation of `pieces` (a fusion bucket) as one call:
  // each piece ends up holding its part of what AllReduce of one buffer
  // holding the pieces in order would give. The default copies the pieces
  // into a buffer of its own and back; where ReducesPiecesInPlace(), they
  // are read and written where they lie, with no copy. Pieces must not
  // overlap; every rank passes pieces of the same total count.
  virtual Status AllReducePieces(std::span<const Piece> pieces, DataType type, ReduceOp op,
                                 Deadline deadline);
  // True when AllReducePieces costs no more than AllReduce of one buffer
  // (the shared-memory path): then a caller need not pack pieces itself.
  virtual bool ReducesPiecesInPlace() const { return false; }

  // Copies `count` elements of root's `data` into every rank's `data`.
  virtual Status Broadcast(void* data, size_t count, DataType type, int root,
                           Deadline deadline) = 0;
  // out (world_size() * count elements) = the `count` elements of every rank,
  // in rank order.
  virtual Status AllGather(const void* in, size_t count, DataType type, void* out,
                           Deadline deadline) = 0;
  // Like AllGather with per-rank counts: rank r sends counts[r] elements;
  // out holds sum(counts) elements. Every rank passes the same `counts`.
  virtual Status AllGatherv(const void* in, const std::vector<size_t>& counts, DataType type,
                            void* out, Deadline deadline) = 0;
  // Returns once every rank has entered the barrier.
  virtual Status Barrier(Deadline deadline) = 0;

  // Totals of every collective that finished, counted on this rank. Gloo:
  // exact (payload and Gloo's framing, replayed per algorithm). NCCL: the ring
  // model's payload (2(N-1)/N of an all-reduce's buffer, (N-1)/N of an
  // all-gather's output, the buffer once per non-root for a broadcast); NCCL
  // does not report its own. Any thread; the default counts nothing.
  virtual WireCounters wire_bytes() const { return {}; }

  // Typed conveniences for host float32 buffers.
  Status AllReduce(std::vector<float>& data, ReduceOp op, Deadline deadline) {
    return AllReduce(data.data(), data.size(), DataType::kFloat32, op, deadline);
  }
  Status Broadcast(std::vector<float>& data, int root, Deadline deadline) {
    return Broadcast(data.data(), data.size(), DataType::kFloat32, root, deadline);
  }
};


// True when this build has the NCCL backend (CUDA and NCCL were found).
bool NcclCompiledIn();

// CUDA devices this process can see; 0 without NCCL support, a driver or a
// device.
int VisibleCudaDevices();

}  // namespace parallax::comm

#endif  // PARALLAX_CORE_COMM_COMMUNICATOR_H_
