#include "core/comm/wire_bytes.h"

#include <algorithm>

#include "core/base/logging.h"

namespace parallax::comm {
namespace {

// Wire bytes of `rank`, given the payload sizes of the messages it sends and
// of those it receives (one per message, zero-length ones included).
WireBytes Frame(const std::vector<size_t>& sends, const std::vector<size_t>& recvs) {
  WireBytes w;
  for (size_t n : sends) {
    w.sent += 2 * kGlooPreambleBytes + static_cast<int64_t>(n);  // notify + data
    w.received += kGlooPreambleBytes;                            // peer's recv-ready
  }
  for (size_t n : recvs) {
    w.received += 2 * kGlooPreambleBytes + static_cast<int64_t>(n);
    w.sent += kGlooPreambleBytes;
  }
  return w;
}

void CheckRank(int world, int rank) {
  PX_CHECK(world >= 1 && rank >= 0 && rank < world) << "rank " << rank << " of " << world;
}

size_t RoundUp(size_t n, size_t m) { return (n + m - 1) / m * m; }

// The payload of every message `rank` sends in gloo::allreduce's ring
// (gloo/allreduce.cc ring()), in order.
std::vector<size_t> RingAllReduceSends(int world, int rank, size_t total, size_t element_size,
                                       size_t max_segment_bytes) {
  const size_t n = static_cast<size_t>(world);
  const size_t r = static_cast<size_t>(rank);
  const size_t max_segment = element_size * std::max<size_t>(1, max_segment_bytes / element_size);
  const size_t segments = RoundUp(std::max((total + max_segment - 1) / max_segment, 2 * n), n);
  const size_t per_rank = segments / n;
  const size_t segment_bytes = RoundUp((total + segments - 1) / segments, element_size);
  std::vector<size_t> sends;
  auto add = [&](size_t first_segment, size_t i) {
    const size_t offset = ((first_segment + i) * segment_bytes) % (segments * segment_bytes);
    if (offset < total) sends.push_back(std::min(segment_bytes, total - offset));
  };
  for (size_t i = 0; i < segments - per_rank; ++i) add((r + 1) * per_rank, i);  // reduce-scatter
  for (size_t i = 0; i < segments - per_rank; ++i) add(r * per_rank, i);        // all-gather
  return sends;
}

std::vector<size_t> AllGathervSends(int world, int rank, const std::vector<size_t>& bytes) {
  std::vector<size_t> sends;
  for (int i = 0; i < world - 1; ++i) sends.push_back(bytes[(world + rank - i) % world]);
  return sends;
}

// The ranks `rank` sends to in gloo::broadcast's binomial tree, and whether
// it receives (gloo/broadcast.cc).
void BroadcastTree(int world, int rank, int root, int* sends, bool* receives) {
  const size_t vsize = static_cast<size_t>(world);
  const size_t vrank = static_cast<size_t>((rank + world - root) % world);
  size_t dim = 0;
  while ((size_t{1} << dim) < vsize) ++dim;
  size_t mask = (size_t{1} << dim) - 1;
  *sends = 0;
  *receives = false;
  for (size_t i = 0; i < dim; ++i) {
    mask ^= size_t{1} << i;
    if ((vrank & mask) != 0) continue;
    const size_t vpeer = vrank ^ (size_t{1} << i);
    if (vpeer >= vsize) continue;
    if ((vrank & (size_t{1} << i)) == 0) {
      ++*sends;
    } else {
      *receives = true;
    }
  }
}

}  // namespace

WireBytes GlooAllReduceWire(int world, int rank, size_t bytes, size_t element_size,
                            size_t max_segment_bytes) {
  CheckRank(world, rank);
  PX_CHECK(element_size > 0);
  if (world == 1 || bytes == 0) return {};
  // Rank r sends to r - 1 and receives what r + 1 sends.
  return Frame(
      RingAllReduceSends(world, rank, bytes, element_size, max_segment_bytes),
      RingAllReduceSends(world, (rank + 1) % world, bytes, element_size, max_segment_bytes));
}

WireBytes GlooAllGatherWire(int world, int rank, size_t bytes_per_rank) {
  CheckRank(world, rank);
  if (world == 1) return {};
  // 2(N-1) messages each way, alternating the two halves of a rank's input.
  std::vector<size_t> messages;
  for (int i = 0; i < 2 * (world - 1); ++i) {
    messages.push_back(i % 2 == 0 ? bytes_per_rank / 2 : bytes_per_rank - bytes_per_rank / 2);
  }
  return Frame(messages, messages);
}

WireBytes GlooAllGathervWire(int world, int rank, const std::vector<size_t>& bytes) {
  CheckRank(world, rank);
  PX_CHECK(bytes.size() == static_cast<size_t>(world));
  if (world == 1) return {};
  // Rank r sends to r + 1 and receives what r - 1 sends.
  return Frame(AllGathervSends(world, rank, bytes),
               AllGathervSends(world, (rank + world - 1) % world, bytes));
}

WireBytes GlooBroadcastWire(int world, int rank, int root, size_t bytes) {
  CheckRank(world, rank);
  if (world == 1) return {};
  int sends = 0;
  bool receives = false;
  BroadcastTree(world, rank, root, &sends, &receives);
  return Frame(std::vector<size_t>(static_cast<size_t>(sends), bytes),
               receives ? std::vector<size_t>{bytes} : std::vector<size_t>{});
}

WireBytes GlooBarrierWire(int world, int rank) {
  CheckRank(world, rank);
  std::vector<size_t> messages;
  for (int d = 1; d < world; d <<= 1) messages.push_back(0);
  return Frame(messages, messages);
}

}  // namespace parallax::comm
