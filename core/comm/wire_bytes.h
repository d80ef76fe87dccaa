// What one rank of a Gloo collective writes to and reads from its TCP
// sockets: the payload its algorithm moves plus Gloo's own framing, i.e. the
// bytes the kernel counts for the socket (`ss -tin` bytes_sent /
// bytes_received), TCP/IP headers excluded.
//
// The figures replay the algorithm that gloo (Debian libgloo 0.0~git20220518)
// runs for each entry point the Communicator calls, message by message:
//   gloo::allreduce   ring: reduce-scatter then all-gather over
//                     roundUp(max(ceil(bytes / 1 MiB), 2N), N) segments;
//                     about 2(N-1)/N of the buffer each way.
//   gloo::allgather   ring: 2(N-1) messages of half a rank's input each way;
//                     (N-1) x the input each way.
//   gloo::allgatherv  ring: N-1 messages; sends every count but the right
//                     neighbour's, receives every count but its own.
//   gloo::broadcast   binomial tree from the root; a non-root receives the
//                     buffer once and sends it to each of its children.
//   gloo::barrier     ceil(log2 N) empty messages each way (dissemination).
// Framing (gloo/transport/tcp/pair.cc, unbound buffers): every message costs
// its sender a NOTIFY_SEND_READY and a SEND_UNBOUND_BUFFER preamble, and its
// receiver a NOTIFY_RECV_READY preamble, kGlooPreambleBytes each.
//
// Pure functions, thread-safe.
#ifndef PARALLAX_CORE_COMM_WIRE_BYTES_H_
#define PARALLAX_CORE_COMM_WIRE_BYTES_H_

#include <cstddef>
#include <cstdint>
#include <vector>

namespace parallax::comm {

// Bytes one rank sent and received, as the kernel counts them.
struct WireBytes {
  int64_t sent = 0;
  int64_t received = 0;

  WireBytes& operator+=(const WireBytes& o) {
    sent += o.sent;
    received += o.received;
    return *this;
  }
  friend bool operator==(const WireBytes&, const WireBytes&) = default;
};

// sizeof(gloo::transport::tcp::Op::preamble): six size_t.
inline constexpr int64_t kGlooPreambleBytes = 48;
// gloo::AllreduceOptions::kMaxSegmentSize.
inline constexpr size_t kGlooMaxSegmentBytes = 1024 * 1024;

// REQUIRES for all: world >= 1, 0 <= rank < world. A world of 1 moves
// nothing.
WireBytes GlooAllReduceWire(int world, int rank, size_t bytes, size_t element_size,
                            size_t max_segment_bytes = kGlooMaxSegmentBytes);
// `bytes_per_rank`: each rank's input.
WireBytes GlooAllGatherWire(int world, int rank, size_t bytes_per_rank);
// `bytes[r]`: rank r's input; bytes.size() == world.
WireBytes GlooAllGathervWire(int world, int rank, const std::vector<size_t>& bytes);
WireBytes GlooBroadcastWire(int world, int rank, int root, size_t bytes);
WireBytes GlooBarrierWire(int world, int rank);

}  // namespace parallax::comm

#endif  // PARALLAX_CORE_COMM_WIRE_BYTES_H_
