// Internal: the factories of the concrete communicators, which live in their
// .cc files so that Gloo and NCCL headers stay out of every public header.
// Use Communicator::Create() instead.
#ifndef PARALLAX_CORE_COMM_BACKENDS_H_
#define PARALLAX_CORE_COMM_BACKENDS_H_

#include <memory>

#include "core/comm/communicator.h"

namespace parallax::comm::internal {

StatusOr<std::unique_ptr<Communicator>> CreateGlooCommunicator(const CommunicatorOptions& options,
                                                               RendezvousStore* store);

// Gloo for every collective but AllReduce, which goes through shared memory
// among the ranks of a host (hierarchical across hosts); plain Gloo when no
// two ranks share a host or shared memory cannot be used.
StatusOr<std::unique_ptr<Communicator>> CreateHostAwareCommunicator(
    const CommunicatorOptions& options, RendezvousStore* store);

// FAILED_PRECONDITION when the build has no NCCL or no CUDA device is visible.
StatusOr<std::unique_ptr<Communicator>> CreateNcclCommunicator(const CommunicatorOptions& options,
                                                               RendezvousStore* store);

// Copies the concatenation of `pieces` (elements of `esize` bytes) into
// `packed`, or back out of it.
void PackPieces(std::span<const Piece> pieces, size_t esize, char* packed);
void UnpackPieces(const char* packed, size_t esize, std::span<const Piece> pieces);

// "rank 1 of 4 (gloo)": how messages name this rank.
std::string RankName(const CommunicatorOptions& options);

}  // namespace parallax::comm::internal

#endif  // PARALLAX_CORE_COMM_BACKENDS_H_
