// ShmGroup: the collectives of the ranks of one host, through a shared
// segment (shm_segment.h) and no socket: a sum (to every rank, or to the
// host's leader) and a broadcast from the leader. This is the one collective
// algorithm Parallax implements itself; everything else is Gloo's or NCCL's.
// Nothing maintained does it for processes that are not launched by its own
// runtime: UCX has shared-memory transports but no collectives (UCC, which
// has them, is not packaged), Open MPI's shared-memory collectives need its
// launcher, Debian's Gloo has no shared-memory path.
//
// Data goes through the segment in chunks of `chunk_bytes` per rank, in two
// sets used alternately. Per chunk every rank copies its part into its slot,
// then the ranks step together (each bumps its counter and waits for the
// others'), then:
//   direct (2 ranks, or a chunk of at most 64 KiB): each rank that wants
//     the result adds up all slots itself, in rank order;
//   reduce-scatter (3 ranks or more, larger chunks): rank i adds up slice i
//     of all slots into its own slot, the ranks step again, and each rank
//     that wants the result copies the slices out.
// A rank reuses a set only after a step that every rank reached after it
// had finished reading that set two chunks before, so one step (two for
// reduce-scatter) per chunk is all the synchronization there is.
// Every rank adds in the same order, so all ranks get the same bits.
//
// The first step of a call carries its header (operation, type, count): each
// rank compares the others' and a disagreement is INVALID_ARGUMENT naming
// the ranks, at no extra cost. A wait spins for 10 us, yields the CPU for up
// to 20 ms, then sleeps on a futex in slices of 1 ms, checking the deadline
// (DEADLINE_EXCEEDED naming the ranks that did not arrive) and whether the
// awaited rank's process still exists (UNAVAILABLE naming it, via pidfd).
// After any error the group is broken and every later call fails; a leader
// whose part outside the host failed tells the others (FailBroadcast).
//
// Thread-compatible: one call at a time (the communicator serializes).
#ifndef PARALLAX_CORE_COMM_SHM_GROUP_H_
#define PARALLAX_CORE_COMM_SHM_GROUP_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "core/comm/communicator.h"
#include "core/comm/shm_segment.h"

namespace parallax::comm {

struct ShmGroupOptions {
  int local_rank = 0;
  std::vector<int> ranks;         // the communicator rank of each local rank
  size_t chunk_bytes = 1u << 20;  // a multiple of 4096
  std::string who;                // how messages start: "rank 1 of 4 (gloo)"
};

class ShmGroup {
 public:
  // Bytes of the segment for `local_size` ranks staging `chunk_bytes` each.
  static size_t SegmentBytes(int local_size, size_t chunk_bytes);

  // `segment` (SegmentBytes large) is mapped by every local rank; this
  // publishes the process id in it.
  ShmGroup(ShmGroupOptions options, std::unique_ptr<ShmSegment> segment);
  ~ShmGroup();
  ShmGroup(const ShmGroup&) = delete;
  ShmGroup& operator=(const ShmGroup&) = delete;

  // Call once every local rank has constructed its group (the caller
  // synchronizes): starts watching the other ranks' processes.
  void WatchPeers();

  // Sums the concatenation of `pieces` over the local ranks, into every
  // rank's pieces (to_all) or only into local rank 0's; the pieces are read
  // and written in place. REQUIRES: Reducible(type).
  Status Reduce(std::span<const Piece> pieces, DataType type, bool to_all, Deadline deadline);
  // Copies local rank 0's pieces into every local rank's.
  Status Broadcast(std::span<const Piece> pieces, DataType type, Deadline deadline);
  // Local rank 0, instead of the Broadcast that follows a Reduce to it, when
  // it cannot provide the data (the all-reduce among hosts failed): the
  // other ranks' Broadcast fails with UNAVAILABLE quoting `why`. Breaks the
  // group.
  void FailBroadcast(const Status& why, Deadline deadline);

  ShmSegment& segment() { return *segment_; }
  int local_rank() const { return me_; }
  int local_size() const { return size_; }

  // Call header, in the segment. Public for the layout's static checks.
  struct Call {
    uint32_t op = 0;  // Op
    uint32_t type = 0;
    uint64_t count = 0;
  };

 private:
  enum Op : uint32_t { kReduceAll = 1, kReduceToLeader, kBroadcast, kFailedBroadcast };
  struct RankLine;

  RankLine& Line(int local) const;
  char* Slot(int set, int local) const;
  // Arrives at the next step and waits for every other rank; `check` (the
  // first step of a call) is compared with the others' headers.
  Status Step(const Call& call, bool check, Deadline deadline);
  Status WaitFor(int local, uint32_t step, const Call& call, Deadline deadline);
  Status Fail(Status s);
  bool Exited(int local);
  std::string Describe(const Call& call) const;
  std::string Rank(int local) const;

  const ShmGroupOptions options_;
  const std::unique_ptr<ShmSegment> segment_;
  const int me_;
  const int size_;
  std::vector<int> pidfds_;  // by local rank; -1: not watched
  std::vector<int> pids_;
  std::vector<const void*> in_;  // Reduce's inputs
  uint32_t steps_ = 0;           // steps taken, as published in this rank's line
  int set_ = 0;                  // the set the next chunk uses
  Status broken_;
};

}  // namespace parallax::comm

#endif  // PARALLAX_CORE_COMM_SHM_GROUP_H_
