// The PS wire format: what a worker and a PS shard exchange over ZeroMQ.
// schemas/ps_wire.md is the definition; this header is its machine-readable
// form. core/ps/wire.h encodes and validates messages.
//
// A message is a ZeroMQ multipart message of three frames:
//   [0] header   exactly kHeaderSize bytes, little-endian (layout below)
//   [1] ids      requests: count × int64 (little-endian); replies to data ops:
//                empty (rows come back in request order); in an ERROR reply or
//                a SAVE/LOAD/STATS message: UTF-8 text (path, JSON, message)
//   [2] values   count × dim × float32, or × fp16 when kFlagFp16 is set;
//                present in PUSH/PUSH_PULL requests and PULL/PUSH_PULL replies.
//                With kFlagShm (same-host shared memory, after ATTACH): a
//                request's frame 2 is a ShmRef (16 bytes) saying where in the
//                worker's region the gradients are and where the rows go; a
//                reply's frame 2 is empty (the rows are in the region)
// (The shard's ROUTER socket adds the peer identity in front; it is not
// part of the format.)
//
// Version 2, a batch (schemas/ps_wire.md, "Batches"): N version-1 data
// messages (PULL, PUSH, PUSH_PULL, WRITE) in 4 frames: [0] the envelope
// header (version kBatchVersion, op kOpBatch, count = N parts), [1] the N
// parts' headers, [2] their frame-1 bytes (ids) one after another, [3]
// their frame-2 bytes (values, or SHM references) one after another. The
// reply has the same shape, one version-1 reply per part in the request's
// order (an ERROR part's count = its text's bytes, in frame 2), or is a
// 3-frame kError envelope that refuses the whole batch (nothing applied).
//
// This header depends on nothing but the standard library so that any
// process can include it.
#ifndef PARALLAX_SCHEMAS_PS_WIRE_H_
#define PARALLAX_SCHEMAS_PS_WIRE_H_

#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>

namespace parallax::ps_wire {

static_assert(std::endian::native == std::endian::little,
              "the PS wire format is little-endian; add byte swaps for this host");

constexpr uint32_t kMagic = 0x53505850;  // "PXPS" in memory order
constexpr uint16_t kVersion = 1;
// A batch envelope (below): one message carrying several version-1 data
// messages to one shard, answered by one message.
constexpr uint16_t kBatchVersion = 2;
constexpr uint32_t kHeaderSize = 64;
constexpr uint32_t kNumFrames = 3;
// header.clock and header.version lie in [0, kMaxClock].
constexpr int64_t kMaxClock = int64_t{1} << 60;

enum class Op : uint8_t {
  kPull = 1,      // ids → rows (reply: values, header.version = partition version)
  kPush = 2,      // ids + gradients → ack (count = 0)
  kPushPull = 3,  // push, then reply with the same ids' rows after it applied
  kClock = 4,     // worker finished step header.clock (ssp/sync progress); no ids
  kSave = 5,      // frame 1 = directory; every owned partition is written there
  kLoad = 6,      // frame 1 = directory; every owned partition is read from there
  kStats = 7,     // reply frame 1 = JSON object of counters
  kError = 8,     // reply only: header.error_code + frame 1 text
  kAttach = 9,    // frame 1 = name of a POSIX shared memory object the shard
                  // maps for this connection's kFlagShm requests
  kSet = 10,      // frame 1 = "name=value": a runtime setting of header.variable
                  // (or of every variable, kAllVariables) from step header.clock on
  kWrite = 11,    // ids + values → ack: the rows' weights become the values (initial
                  // values a worker gives, before the first step)
};
constexpr uint8_t kMaxOp = 11;  // of a version-1 message
// The op of a version-2 envelope (its reply: kBatch, or kError refusing the
// whole batch).
constexpr uint8_t kOpBatch = 12;
// Parts in one envelope, at most.
constexpr uint32_t kMaxBatchParts = 65536;
// Frames of a batch: envelope, part headers, ids, values.
constexpr uint32_t kBatchFrames = 4;

// header.variable of a kSet request that applies to every variable.
constexpr uint32_t kAllVariables = 0xFFFFFFFFu;

// header.flags bits.
constexpr uint16_t kFlagReply = 1u << 0;  // set on every shard → worker message
constexpr uint16_t kFlagFp16 = 1u << 1;   // values frame is IEEE half precision
constexpr uint16_t kFlagShm = 1u << 2;    // values live in the attached shared memory region
// PULL and WRITE only (request and reply), never with FP16 or SHM: a value
// row is a row's whole state, RowStateWidth(dim, slots) float32 values
// (weights, each optimizer slot, the row's step), and header.dim is that
// width. A shard's checkpoint-equivalent copy of a row, as the trainer's hot
// rows hand rows back to their shards and take them over (ps_wire.md, "Row
// state").
constexpr uint16_t kFlagRowState = 1u << 3;
// PULL only (request and reply), never with SHM or ROW_STATE: the row
// cache's version check (ps_wire.md, "Row versions"). The request's frame 2
// holds, per id, the row's version the worker holds (u32, kNotHeld when
// none) and its `version` field the bound s. The reply's frame 1 holds, per
// id, the row's version when its row is sent, kRowFresh when the worker's
// copy is at most s pushes behind (no row sent); its `worker` field counts
// the rows sent, and frame 2 holds them.
constexpr uint16_t kFlagRowVersions = 1u << 4;
constexpr uint32_t kNotHeld = 0xFFFFFFFFu;   // request: no copy held
constexpr uint32_t kRowFresh = 0xFFFFFFFFu;  // reply: the copy held is fresh enough
constexpr uint16_t kKnownFlags = kFlagReply | kFlagFp16 | kFlagShm | kFlagRowState | kFlagRowVersions;

// The width in floats of a row's state of a variable of `dim` with
// `slots` optimizer slots: the weights, the slots, then the row's step
// count (Adam's; 0 for the others) as two floats holding its low and high
// 24 bits, each an integer in [0, 2^24).
constexpr uint32_t RowStateWidth(uint32_t dim, int slots) {
  return (1 + static_cast<uint32_t>(slots)) * dim + 2;
}
// The step of a row state is below 2^48.
constexpr int64_t kMaxRowStep = (int64_t{1} << 48) - 1;
constexpr float kRowStepHalf = 16777216.0f;  // 2^24

// header.error_code of an kError reply. Stable numbers: never reuse one.
enum class ErrorCode : uint16_t {
  kNone = 0,
  kBadMagic = 1,
  kBadVersion = 2,
  kUnknownOp = 3,
  kUnknownVariable = 4,
  kBadPartition = 5,     // out of range, or not owned by this shard
  kBadCount = 6,         // count disagrees with the frame sizes
  kIdOutOfRange = 7,
  kNonFinite = 8,        // NaN or Inf in a gradient
  kTooLarge = 9,         // over the shard's message size limit
  kBadFrames = 10,       // wrong number of frames or header size
  kBadDim = 11,          // header.dim differs from the variable's
  kBadClock = 12,        // sync: a push for a step already applied, or a duplicate
  kCheckpoint = 13,      // SAVE/LOAD failed (I/O, checksum, shape); text says which
  kBadFlags = 14,
  kStaleAttempt = 15,    // header.attempt differs from the shard's
  kInternal = 16,
  kBadWorker = 17,       // worker rank not below the plan's contributor count
  kSharedMemory = 18,    // ATTACH failed, or a kFlagShm request without a region or outside it
  kBadSetting = 19,      // SET of an unknown setting, or a value it does not accept
  kStaleGeneration = 20, // header.generation differs from the shard's (a restarted shard)
  kTableFull = 21,       // a dynamic table's step needs more rows than its max_rows
  kBadRowState = 22,     // a ROW_STATE WRITE's step or optimizer slot no row can hold
};
constexpr uint16_t kMaxErrorCode = 22;

// Frame 2 of a kFlagShm data request: byte offsets into the region the
// connection attached. `values` holds count × dim values (PUSH, PUSH_PULL;
// ignored for PULL); `reply` receives count × dim values (PULL, PUSH_PULL;
// ignored for PUSH). Both are multiples of 4 and lie wholly inside the region.
struct ShmRef {
  uint64_t values = 0;
  uint64_t reply = 0;
};
constexpr uint32_t kShmRefSize = 16;
static_assert(sizeof(ShmRef) == kShmRefSize, "ShmRef must have no padding");

// Byte layout (offsets), all little-endian:
//    0 u32 magic        kMagic
//    4 u16 version      kVersion
//    6 u8  op           Op
//    7 u8  reserved0    0
//    8 u16 flags        kFlag*
//   10 u16 error_code   ErrorCode (ERROR replies); resets (data replies)
//   12 u32 variable     variable id from the plan
//   16 u32 partition    partition index within the variable
//   20 u32 worker       contributor rank (worker, or host with local aggregation);
//                       a ROW_VERSIONS reply: the rows sent
//   24 u32 count        rows in the message
//   28 u32 dim          row width; must equal the variable's dim when count > 0
//   32 u64 request_id   chosen by the worker, echoed in the reply
//   40 i64 clock        the worker's step (PULL/PUSH/PUSH_PULL/CLOCK)
//   48 i64 version      PULL reply: partition version; PUSH: version pulled at
//   56 u32 attempt      job attempt (fencing); 0 = not checked
//   60 u32 generation   the shard's generation in the attempt (fencing); 0 = not checked
struct Header {
  uint32_t magic = kMagic;
  uint16_t version = kVersion;
  uint8_t op = 0;
  uint8_t reserved0 = 0;
  uint16_t flags = 0;
  // ERROR replies: the ErrorCode. PULL, PUSH, PUSH_PULL and WRITE replies:
  // the variable's resets on this shard mod 2^16 ("Row cache").
  union {
    uint16_t error_code = 0;
    uint16_t resets;
  };
  uint32_t variable = 0;
  uint32_t partition = 0;
  uint32_t worker = 0;
  uint32_t count = 0;
  uint32_t dim = 0;
  uint64_t request_id = 0;
  int64_t clock = 0;
  int64_t version_seen = 0;
  uint32_t attempt = 0;
  uint32_t generation = 0;
};
static_assert(sizeof(Header) == kHeaderSize, "Header must have no padding");
static_assert(offsetof(Header, variable) == 12 && offsetof(Header, request_id) == 32 &&
                  offsetof(Header, version_seen) == 48 && offsetof(Header, attempt) == 56 &&
                  offsetof(Header, generation) == 60,
              "Header layout must match ps_wire.md");

// Writes `h` to `out` (kHeaderSize bytes). The struct has no padding and the
// host is little-endian, so this is a copy.
inline void WriteHeader(const Header& h, void* out) { std::memcpy(out, &h, kHeaderSize); }
// Reads kHeaderSize bytes. Validating the fields is the reader's job.
inline Header ReadHeader(const void* in) {
  Header h;
  std::memcpy(&h, in, kHeaderSize);
  return h;
}

}  // namespace parallax::ps_wire

#endif  // PARALLAX_SCHEMAS_PS_WIRE_H_
