// The Gloo backend when ranks share hosts (CommunicatorOptions::shared_memory):
// AllReduce goes through shared memory among a host's ranks (shm_group.h)
// and, with several hosts, is hierarchical: each host sums into its first
// rank (its leader) in shared memory, the leaders all-reduce over Gloo (one
// rank per host on the network, so each host's link carries one rank's
// bytes), and each leader broadcasts the result to its host in shared
// memory. Broadcast, AllGather, AllGatherv and Barrier stay on the Gloo
// communicator of all ranks, as does everything when any host cannot make
// its segment (a warning says why).
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <mutex>

#include "core/base/logging.h"
#include "core/comm/backends.h"
#include "core/comm/host_topology.h"
#include "core/comm/reduce.h"
#include "core/comm/shm_group.h"

namespace parallax::comm::internal {
namespace {

// What each rank states while the segments are set up (two AllGathers).
struct SetupRecord {
  int32_t ok = 0;
  uint32_t unused = 0;
  uint64_t nonce = 0;
  char path[112] = {};
  char why[256] = {};  // when !ok: what failed, on which host
};
static_assert(sizeof(SetupRecord) == 384);

void CopyString(char* out, size_t size, const std::string& s) {
  const size_t n = std::min(size - 1, s.size());
  std::memcpy(out, s.data(), n);
  out[n] = '\0';
}

std::string HostName() {
  char name[256] = {};
  gethostname(name, sizeof(name) - 1);
  return name;
}

class HostAwareCommunicator : public Communicator {
 public:
  HostAwareCommunicator(CommunicatorOptions options, HostLayout layout,
                        std::unique_ptr<Communicator> flat, std::unique_ptr<ShmGroup> local,
                        std::unique_ptr<Communicator> leaders)
      : options_(std::move(options)),
        layout_(std::move(layout)),
        flat_(std::move(flat)),
        local_(std::move(local)),
        leaders_(std::move(leaders)) {}

  int rank() const override { return options_.rank; }
  int world_size() const override { return options_.world_size; }
  Backend backend() const override { return Backend::kGloo; }
  bool Supports(DataType type) const override { return flat_->Supports(type); }
  WireCounters wire_bytes() const override {
    WireCounters c = flat_->wire_bytes();
    if (leaders_ != nullptr) {
      const WireCounters l = leaders_->wire_bytes();
      c.allreduce += l.allreduce;
      c.allgather += l.allgather;
      c.other += l.other;
    }
    return c;
  }

  Status AllReduce(void* data, size_t count, DataType type, ReduceOp op,
                   Deadline deadline) override {
    const Piece piece{data, count};
    return AllReducePieces({&piece, 1}, type, op, deadline);
  }

  bool ReducesPiecesInPlace() const override { return true; }

  Status AllReducePieces(std::span<const Piece> pieces, DataType type, ReduceOp op,
                         Deadline deadline) override {
    if (!Reducible(type)) {
      return InvalidArgument(RankName(options_) + ": AllReduce of " +
                             std::string(DataTypeName(type)) + ": that type cannot be reduced");
    }
    size_t count = 0;
    for (const Piece& p : pieces) {
      if (p.data == nullptr && p.count > 0) {
        return InvalidArgument(RankName(options_) + ": AllReduce: null buffer");
      }
      count += p.count;
    }
    std::lock_guard<std::mutex> lock(mu_);
    PX_RETURN_IF_ERROR(Usable("AllReduce"));
    if (count == 0) return Status::Ok();
    if (layout_.hosts == 1) {
      PX_RETURN_IF_ERROR(Broken(local_->Reduce(pieces, type, /*to_all=*/true, deadline)));
    } else {
      if (local_ != nullptr) {
        PX_RETURN_IF_ERROR(Broken(local_->Reduce(pieces, type, /*to_all=*/false, deadline)));
      }
      if (leaders_ != nullptr) {
        Status s = AmongHosts(pieces, count, type, deadline);
        if (!s.ok()) {
          s = s.WithContext(RankName(options_) + ": AllReduce among the " +
                            std::to_string(layout_.hosts) + " hosts' first ranks");
          if (local_ != nullptr) local_->FailBroadcast(s, deadline);
          return Broken(s);
        }
      }
      if (local_ != nullptr) {
        PX_RETURN_IF_ERROR(Broken(local_->Broadcast(pieces, type, deadline)));
      }
    }
    if (op == ReduceOp::kMean) {
      for (const Piece& p : pieces) DivideBy(type, p.data, p.count, options_.world_size);
    }
    return Status::Ok();
  }

  Status Broadcast(void* data, size_t count, DataType type, int root, Deadline deadline) override {
    std::lock_guard<std::mutex> lock(mu_);
    PX_RETURN_IF_ERROR(Usable("Broadcast"));
    return flat_->Broadcast(data, count, type, root, deadline);
  }
  Status AllGather(const void* in, size_t count, DataType type, void* out,
                   Deadline deadline) override {
    std::lock_guard<std::mutex> lock(mu_);
    PX_RETURN_IF_ERROR(Usable("AllGather"));
    return flat_->AllGather(in, count, type, out, deadline);
  }
  Status AllGatherv(const void* in, const std::vector<size_t>& counts, DataType type, void* out,
                    Deadline deadline) override {
    std::lock_guard<std::mutex> lock(mu_);
    PX_RETURN_IF_ERROR(Usable("AllGatherv"));
    return flat_->AllGatherv(in, counts, type, out, deadline);
  }
  Status Barrier(Deadline deadline) override {
    std::lock_guard<std::mutex> lock(mu_);
    PX_RETURN_IF_ERROR(Usable("Barrier"));
    return flat_->Barrier(deadline);
  }

 private:
  // The leaders' all-reduce of the host sums, over Gloo (one buffer: pieces
  // are packed into scratch_ and back). Called with mu_ held.
  Status AmongHosts(std::span<const Piece> pieces, size_t count, DataType type, Deadline deadline) {
    if (pieces.size() == 1) {
      return leaders_->AllReduce(pieces[0].data, count, type, ReduceOp::kSum, deadline);
    }
    const size_t esize = DataTypeSize(type);
    if (scratch_.size() < count * esize) scratch_.resize(count * esize);
    PackPieces(pieces, esize, scratch_.data());
    PX_RETURN_IF_ERROR(leaders_->AllReduce(scratch_.data(), count, type, ReduceOp::kSum, deadline));
    UnpackPieces(scratch_.data(), esize, pieces);
    return Status::Ok();
  }

  // Called with mu_ held.
  Status Usable(const char* what) const {
    if (broken_.ok()) return Status::Ok();
    return FailedPrecondition(RankName(options_) + ": " + what +
                              ": communicator is broken by an earlier error (" + broken_.message() +
                              "); start a new attempt");
  }
  Status Broken(Status s) {
    if (!s.ok() && broken_.ok()) broken_ = s;
    return s;
  }

  // Constant after construction.
  const CommunicatorOptions options_;
  const HostLayout layout_;

  std::mutex mu_;                                // serializes collectives
  const std::unique_ptr<Communicator> flat_;     // every rank, Gloo
  const std::unique_ptr<ShmGroup> local_;        // this host's ranks; null when alone
  const std::unique_ptr<Communicator> leaders_;  // hosts' first ranks, Gloo; null elsewhere
  Status broken_;                                // guarded by mu_
  std::vector<char> scratch_;                    // guarded by mu_: AmongHosts
};

// The outcome of SetUpSharedMemory, the same on every rank.
struct SharedMemory {
  bool usable = false;              // every host that needs a segment has one
  std::unique_ptr<ShmGroup> group;  // this host's; null where the rank is alone
};

// Makes (leader) or maps (others) this host's segment. Every rank takes part
// in the two exchanges; on a failure anywhere no rank uses shared memory.
StatusOr<SharedMemory> SetUpSharedMemory(const CommunicatorOptions& options,
                                         const HostLayout& layout, Communicator& flat,
                                         Deadline deadline) {
  const std::string who = RankName(options);
  const int local_size = static_cast<int>(layout.local.size());
  const size_t bytes = ShmGroup::SegmentBytes(local_size, options.shm_chunk_bytes);
  ShmGroupOptions go;
  go.local_rank = layout.local_rank;
  go.ranks = layout.local;
  go.chunk_bytes = options.shm_chunk_bytes;
  go.who = who;
  std::unique_ptr<ShmGroup> group;
  SetupRecord mine;
  auto fail = [&](const Status& s) {
    mine.ok = 0;
    CopyString(mine.why, sizeof(mine.why), "host \"" + HostName() + "\": " + s.message());
  };
  if (local_size > 1 && layout.leader()) {
    ShmSegment::RemoveStale(options.shm_directory);
    auto segment = ShmSegment::Create(options.shm_directory, bytes);
    if (segment.ok()) {
      mine.ok = 1;
      mine.nonce = segment.value()->nonce();
      CopyString(mine.path, sizeof(mine.path), segment.value()->path());
      group = std::make_unique<ShmGroup>(go, std::move(segment).value());
    } else {
      fail(segment.status());
    }
  } else {
    mine.ok = 1;
  }
  const int world = options.world_size;
  std::vector<SetupRecord> all(world);
  PX_RETURN_IF_ERROR(flat.AllGather(&mine, sizeof(mine), DataType::kUInt8, all.data(), deadline));
  if (local_size > 1 && !layout.leader()) {
    const SetupRecord& leader = all[layout.local.front()];
    if (leader.ok) {
      std::string path(leader.path, strnlen(leader.path, sizeof(leader.path)));
      auto segment = ShmSegment::Attach(path, bytes, leader.nonce);
      if (segment.ok()) {
        group = std::make_unique<ShmGroup>(go, std::move(segment).value());
      } else {
        fail(segment.status());
      }
    }
  }
  PX_RETURN_IF_ERROR(flat.AllGather(&mine, sizeof(mine), DataType::kUInt8, all.data(), deadline));
  for (int r = 0; r < world; ++r) {
    if (all[r].ok) continue;
    PX_LOG(WARNING) << who << ": shared memory cannot be used on rank " << r << "'s "
                    << std::string(all[r].why, strnlen(all[r].why, sizeof(all[r].why)))
                    << "; every all-reduce of this communicator goes over TCP sockets";
    return SharedMemory{};
  }
  if (group != nullptr) {
    // Every local rank has mapped it: take the name away now, so that
    // nothing is left behind whatever happens to the processes.
    if (layout.leader()) group->segment().Unlink();
    group->WatchPeers();
  }
  return SharedMemory{true, std::move(group)};
}

}  // namespace

StatusOr<std::unique_ptr<Communicator>> CreateHostAwareCommunicator(
    const CommunicatorOptions& options, RendezvousStore* store) {
  PX_ASSIGN_OR_RETURN(std::unique_ptr<Communicator> flat, CreateGlooCommunicator(options, store));
  const Deadline deadline = DeadlineAfter(options.rendezvous_timeout);
  const std::string who = RankName(options);
  uint64_t digest = HostKeyDigest(options.host_id.empty() ? ThisHostKey() : options.host_id);
  std::vector<uint64_t> digests(options.world_size);
  PX_RETURN_IF_ERROR(
      flat->AllGather(&digest, sizeof(digest), DataType::kUInt8, digests.data(), deadline)
          .WithContext("finding which ranks share a host"));
  HostLayout layout = LayoutHosts(digests, options.rank);
  if (layout.max_local == 1) return flat;  // one rank per host: nothing to share
  if (options.shm_chunk_bytes == 0 || options.shm_chunk_bytes % 4096 != 0) {
    return InvalidArgument(who + ": shm_chunk_bytes " + std::to_string(options.shm_chunk_bytes) +
                           " is not a positive multiple of 4096");
  }
  PX_ASSIGN_OR_RETURN(SharedMemory shm, SetUpSharedMemory(options, layout, *flat, deadline));
  if (!shm.usable) return flat;
  std::unique_ptr<ShmGroup> local = std::move(shm.group);
  std::unique_ptr<Communicator> leaders;
  if (layout.hosts > 1 && layout.leader()) {
    CommunicatorOptions lo = options;
    lo.rank = layout.host;
    lo.world_size = layout.hosts;
    lo.key_prefix = options.key_prefix + "/leaders";
    lo.shared_memory = false;
    auto made = CreateGlooCommunicator(lo, store);
    if (!made.ok()) {
      return made.status().WithContext(who + ": connecting the hosts' first ranks (this is host " +
                                       std::to_string(layout.host) + ")");
    }
    leaders = std::move(made).value();
  }
  return std::unique_ptr<Communicator>(std::make_unique<HostAwareCommunicator>(
      options, std::move(layout), std::move(flat), std::move(local), std::move(leaders)));
}

}  // namespace parallax::comm::internal
