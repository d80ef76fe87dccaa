#include "core/ps/wire.h"

#include <cmath>
#include <cstring>

namespace parallax::ps {
namespace {

WireError Err(ErrorCode code, std::string text) { return WireError{code, std::move(text)}; }

bool IsDataOp(uint8_t op) {
  return op == static_cast<uint8_t>(Op::kPull) || op == static_cast<uint8_t>(Op::kPush) ||
         op == static_cast<uint8_t>(Op::kPushPull) || op == static_cast<uint8_t>(Op::kWrite);
}

// All frames together against the limit; `what` names the message.
WireError CheckTotal(const size_t* sizes, size_t num_frames, const WireLimits& limits,
                     const char* what) {
  size_t total = 0;
  for (size_t i = 0; i < num_frames; ++i) total += sizes[i];
  if (total > limits.max_message_bytes)
    return Err(ErrorCode::kTooLarge, std::string(what) + " of " + std::to_string(total) +
                                         " bytes is over the limit of " +
                                         std::to_string(limits.max_message_bytes));
  return {};
}

// The REPLY flag against the direction the message must travel.
WireError CheckDirection(const Header& h, bool expect_reply) {
  const bool is_reply = h.flags & ps_wire::kFlagReply;
  if (is_reply != expect_reply)
    return Err(ErrorCode::kBadFlags, expect_reply ? "expected a reply" : "a reply sent to a shard");
  return {};
}

}  // namespace

int64_t MessageView::IdAt(size_t i) const {
  int64_t v;
  std::memcpy(&v, ids + i * sizeof(int64_t), sizeof v);
  return v;
}

WireError ParseMessage(const void* const* frames, const size_t* sizes, size_t num_frames,
                       const WireLimits& limits, bool expect_reply, MessageView* out) {
  *out = MessageView{};
  if (num_frames != ps_wire::kNumFrames)
    return Err(ErrorCode::kBadFrames, "expected 3 frames (header, ids, values), got " +
                                          std::to_string(num_frames));
  if (WireError e = CheckTotal(sizes, num_frames, limits, "message"); !e.ok()) return e;
  if (sizes[0] != ps_wire::kHeaderSize)
    return Err(ErrorCode::kBadFrames, "header frame has " + std::to_string(sizes[0]) +
                                          " bytes, expected 64");
  const Header h = ps_wire::ReadHeader(frames[0]);
  out->header = h;
  if (h.magic != ps_wire::kMagic) return Err(ErrorCode::kBadMagic, "bad magic number");
  if (h.version != ps_wire::kVersion)
    return Err(ErrorCode::kBadVersion,
               "wire version " + std::to_string(h.version) +
                   (h.version == ps_wire::kBatchVersion
                        ? " (a batch envelope) is not allowed here: a batch's parts are version 1"
                        : " is not supported (this build speaks 1, and 2 for batches)"));
  if (h.op == 0 || h.op > ps_wire::kMaxOp)
    return Err(ErrorCode::kUnknownOp, "unknown op " + std::to_string(h.op));
  if (h.flags & ~ps_wire::kKnownFlags)
    return Err(ErrorCode::kBadFlags, "unknown flag bits " + std::to_string(h.flags));
  if (WireError e = CheckDirection(h, expect_reply); !e.ok()) return e;
  const bool is_reply = expect_reply;
  // Clocks and versions are step and update counts: never negative, and
  // far from overflow when the shard adds to them.
  if (h.clock < 0 || h.clock > ps_wire::kMaxClock || h.version_seen < 0 ||
      h.version_seen > ps_wire::kMaxClock)
    return Err(ErrorCode::kBadClock, "clock " + std::to_string(h.clock) + " or version " +
                                         std::to_string(h.version_seen) + " is out of range");
  if (h.op == static_cast<uint8_t>(Op::kError) && !is_reply)
    return Err(ErrorCode::kUnknownOp, "ERROR is a reply-only op");
  const bool shm = h.flags & ps_wire::kFlagShm;
  if (h.flags & ps_wire::kFlagRowState) {
    if (h.op != static_cast<uint8_t>(Op::kPull) && h.op != static_cast<uint8_t>(Op::kWrite))
      return Err(ErrorCode::kBadFlags, std::string("the ROW_STATE flag is for PULL and WRITE, not ") + OpName(h.op));
    if (h.flags & (ps_wire::kFlagFp16 | ps_wire::kFlagShm))
      return Err(ErrorCode::kBadFlags, "a ROW_STATE message's values are float32 and inline: not with FP16 or SHM");
  }
  if (h.flags & ps_wire::kFlagRowVersions) {
    if (h.op != static_cast<uint8_t>(Op::kPull))
      return Err(ErrorCode::kBadFlags, std::string("the ROW_VERSIONS flag is for PULL, not ") + OpName(h.op));
    if (h.flags & (ps_wire::kFlagShm | ps_wire::kFlagRowState))
      return Err(ErrorCode::kBadFlags, "a ROW_VERSIONS pull's rows are inline and weights only: not with SHM or ROW_STATE");
    if (is_reply && h.worker > h.count)
      return Err(ErrorCode::kBadCount, "a ROW_VERSIONS reply says " + std::to_string(h.worker) +
                                           " rows sent of " + std::to_string(h.count) + " asked for");
  }
  if (!IsDataOp(h.op)) {
    if (shm) return Err(ErrorCode::kBadFlags, std::string("the SHM flag is for data ops, not ") + OpName(h.op));
    if (sizes[2] != 0) return Err(ErrorCode::kBadCount, "values frame must be empty for this op");
    out->text = std::string_view(static_cast<const char*>(frames[1]), sizes[1]);
    return {};
  }
  const uint64_t count = h.count;
  if (count > 0 && h.dim == 0) return Err(ErrorCode::kBadDim, "dim is 0");
  if (h.dim > (1u << 20)) return Err(ErrorCode::kBadDim, "dim " + std::to_string(h.dim) + " is over 1048576");
  size_t want_ids = 0, want_values = 0;
  PartFrameSizes(h, is_reply, &want_ids, &want_values);
  if (sizes[1] != want_ids)
    return Err(ErrorCode::kBadCount, "count " + std::to_string(count) + " needs " +
                                         std::to_string(want_ids) + " bytes of ids, got " +
                                         std::to_string(sizes[1]));
  out->ids = static_cast<const char*>(frames[1]);
  if (shm) {
    // Values live in shared memory: a request names where (ShmRef), a reply
    // carries nothing more. The shard checks the offsets against its region.
    if (sizes[2] != want_values)
      return Err(ErrorCode::kBadCount, "a shared-memory " + std::string(is_reply ? "reply" : "request") +
                                           " needs " + std::to_string(want_values) +
                                           " bytes in the values frame, got " + std::to_string(sizes[2]));
    if (!is_reply) {
      std::memcpy(&out->shm_ref, frames[2], sizeof out->shm_ref);
      if (out->shm_ref.values % 4 != 0 || out->shm_ref.reply % 4 != 0)
        return Err(ErrorCode::kSharedMemory, "shared-memory offsets " + std::to_string(out->shm_ref.values) +
                                                 " and " + std::to_string(out->shm_ref.reply) +
                                                 " must be multiples of 4");
    }
    return {};
  }
  if (sizes[2] != want_values)
    return Err(ErrorCode::kBadCount, "count " + std::to_string(count) + " × dim " +
                                         std::to_string(h.dim) + " needs " + std::to_string(want_values) +
                                         " bytes of values, got " + std::to_string(sizes[2]));
  out->values = static_cast<const char*>(frames[2]);
  out->values_bytes = sizes[2];
  return {};
}

bool IsBatch(const void* const* frames, const size_t* sizes, size_t num_frames) {
  if (num_frames < 1 || sizes[0] != ps_wire::kHeaderSize) return false;
  const Header h = ps_wire::ReadHeader(frames[0]);
  return h.magic == ps_wire::kMagic && h.version == ps_wire::kBatchVersion;
}

bool PartFrameSizes(const Header& h, bool is_reply, size_t* ids_bytes, size_t* values_bytes) {
  const uint64_t count = h.count;
  if (is_reply && h.op == static_cast<uint8_t>(Op::kError)) {
    *ids_bytes = count;  // the text
    *values_bytes = 0;
    return true;
  }
  if (!IsDataOp(h.op)) return false;
  const Op op = static_cast<Op>(h.op);
  *ids_bytes = is_reply ? 0 : count * sizeof(int64_t);
  if (op == Op::kPull && (h.flags & ps_wire::kFlagRowVersions)) {
    // Request: ids, then the versions held. Reply: a version per id, then
    // the rows sent (`worker` of them).
    if (is_reply) {
      *ids_bytes = count * sizeof(uint32_t);
      *values_bytes = uint64_t{h.worker} * h.dim * ValueBytes(h.flags);
    } else {
      *values_bytes = count * sizeof(uint32_t);
    }
  } else if (h.flags & ps_wire::kFlagShm) {
    *values_bytes = is_reply ? 0 : ps_wire::kShmRefSize;
  } else {
    // Requests: PUSH, PUSH_PULL and WRITE carry values, PULL does not.
    // Replies: PULL and PUSH_PULL carry values, PUSH and WRITE do not.
    const bool has_values = is_reply ? op != Op::kPush && op != Op::kWrite : op != Op::kPull;
    // ParseMessage checks dim ≤ 2^20; this product cannot
    // overflow 64 bits for any u32 count and dim.
    *values_bytes = has_values ? count * h.dim * ValueBytes(h.flags) : 0;
  }
  return true;
}

WireError ParseBatch(const void* const* frames, const size_t* sizes, size_t num_frames,
                     const WireLimits& limits, bool expect_reply, Header* out,
                     std::vector<BatchPart>* parts, std::string_view* text) {
  *out = Header{};
  parts->clear();
  if (num_frames < 1 || sizes[0] != ps_wire::kHeaderSize)
    return Err(ErrorCode::kBadFrames, "a batch starts with a 64-byte header frame");
  if (WireError e = CheckTotal(sizes, num_frames, limits, "batch"); !e.ok()) return e;
  const Header h = ps_wire::ReadHeader(frames[0]);
  *out = h;
  if (h.magic != ps_wire::kMagic) return Err(ErrorCode::kBadMagic, "bad magic number");
  if (h.version != ps_wire::kBatchVersion)
    return Err(ErrorCode::kBadVersion, "a batch envelope has version 2, not " +
                                           std::to_string(h.version));
  if (h.flags & ~ps_wire::kFlagReply)
    return Err(ErrorCode::kBadFlags, "a batch envelope's flags may only be REPLY, got " +
                                         std::to_string(h.flags));
  if (WireError e = CheckDirection(h, expect_reply); !e.ok()) return e;
  const bool is_reply = expect_reply;
  if (is_reply && h.op == static_cast<uint8_t>(Op::kError)) {
    if (num_frames != ps_wire::kNumFrames || sizes[2] != 0)
      return Err(ErrorCode::kBadFrames, "a batch's ERROR reply is a header, a text and nothing");
    if (text != nullptr) *text = std::string_view(static_cast<const char*>(frames[1]), sizes[1]);
    return {};
  }
  if (h.op != ps_wire::kOpBatch)
    return Err(ErrorCode::kUnknownOp, "op " + std::to_string(h.op) +
                                          " in a version-2 header: only BATCH (12) is");
  if (h.count == 0 || h.count > ps_wire::kMaxBatchParts)
    return Err(ErrorCode::kBadCount, "a batch has 1 to " + std::to_string(ps_wire::kMaxBatchParts) +
                                         " parts, the header says " + std::to_string(h.count));
  if (num_frames != ps_wire::kBatchFrames)
    return Err(ErrorCode::kBadFrames, "a batch has 4 frames (envelope, part headers, ids, "
                                      "values), got " + std::to_string(num_frames));
  if (sizes[1] != ps_wire::kHeaderSize * size_t{h.count})
    return Err(ErrorCode::kBadFrames, "a batch of " + std::to_string(h.count) + " parts has " +
                                          std::to_string(ps_wire::kHeaderSize * size_t{h.count}) +
                                          " bytes of part headers, got " + std::to_string(sizes[1]));
  const char* hdrs = static_cast<const char*>(frames[1]);
  const char* ids = static_cast<const char*>(frames[2]);
  const char* values = static_cast<const char*>(frames[3]);
  size_t id_at = 0, value_at = 0;
  parts->resize(h.count);
  for (uint32_t k = 0; k < h.count; ++k) {
    const char* ph = hdrs + ps_wire::kHeaderSize * size_t{k};
    size_t id_bytes = 0, value_bytes = 0;
    if (!PartFrameSizes(ps_wire::ReadHeader(ph), is_reply, &id_bytes, &value_bytes)) {
      id_bytes = value_bytes = 0;  // not a data op: ParseMessage of the part says so
    }
    if (id_bytes > sizes[2] - id_at || value_bytes > sizes[3] - value_at)
      return Err(ErrorCode::kBadCount, "batch part " + std::to_string(k) +
                                           "'s ids or values run past the end of frame 2 or 3");
    BatchPart& p = (*parts)[k];
    p.frames[0] = ph;
    p.sizes[0] = ps_wire::kHeaderSize;
    p.frames[1] = ids + id_at;
    p.sizes[1] = id_bytes;
    p.frames[2] = values + value_at;
    p.sizes[2] = value_bytes;
    id_at += id_bytes;
    value_at += value_bytes;
  }
  if (id_at != sizes[2] || value_at != sizes[3])
    return Err(ErrorCode::kBadCount, "a batch's frames 2 and 3 have " + std::to_string(sizes[2]) +
                                         " and " + std::to_string(sizes[3]) +
                                         " bytes, its parts' headers " + std::to_string(id_at) +
                                         " and " + std::to_string(value_at));
  return {};
}

WireError ParseSetting(std::string_view text, Setting* out) {
  const size_t eq = text.find('=');
  if (eq == std::string_view::npos || eq == 0 || eq + 1 == text.size())
    return Err(ErrorCode::kBadSetting, "a SET needs \"name=value\", got \"" +
                                           std::string(text.substr(0, 64)) + "\"");
  out->name = text.substr(0, eq);
  out->value = text.substr(eq + 1);
  return {};
}

std::string FormatSetting(std::string_view name, std::string_view value) {
  return std::string(name) + "=" + std::string(value);
}

uint16_t FloatToHalf(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  const uint32_t sign = (x >> 16) & 0x8000u;
  const uint32_t abs = x & 0x7fffffffu;
  if (abs >= 0x7f800000u) return static_cast<uint16_t>(sign | 0x7c00u | (abs > 0x7f800000u ? 0x200u : 0));
  if (abs >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // overflow → inf
  if (abs < 0x38800000u) {  // subnormal or zero in half
    if (abs < 0x33000000u) return static_cast<uint16_t>(sign);
    const uint32_t e = abs >> 23;
    const uint32_t m = (abs & 0x7fffffu) | 0x800000u;
    const uint32_t shift = 126 - e;  // 14..24
    uint32_t half = m >> shift;
    const uint32_t rem = m & ((1u << shift) - 1);
    const uint32_t halfway = 1u << (shift - 1);
    if (rem > halfway || (rem == halfway && (half & 1))) ++half;
    return static_cast<uint16_t>(sign | half);
  }
  uint32_t half = ((abs - 0x38000000u) >> 13);
  const uint32_t rem = abs & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (half & 1))) ++half;
  return static_cast<uint16_t>(sign | half);
}

float HalfToFloat(uint16_t h) {
  const uint32_t sign = (uint32_t{h} & 0x8000u) << 16;
  uint32_t e = (h >> 10) & 0x1f;
  uint32_t m = h & 0x3ffu;
  uint32_t x;
  if (e == 0x1f) {
    x = sign | 0x7f800000u | (m << 13);
  } else if (e == 0) {
    if (m == 0) {
      x = sign;
    } else {
      e = 113;
      while (!(m & 0x400u)) {
        m <<= 1;
        --e;
      }
      x = sign | (e << 23) | ((m & 0x3ffu) << 13);
    }
  } else {
    x = sign | ((e + 112) << 23) | (m << 13);
  }
  float f;
  std::memcpy(&f, &x, 4);
  return f;
}

void EncodeValues(const float* in, size_t n, bool fp16, void* out) {
  if (n == 0) return;  // buffers may be null
  if (!fp16) {
    std::memcpy(out, in, n * sizeof(float));
    return;
  }
  auto* o = static_cast<char*>(out);
  for (size_t i = 0; i < n; ++i) {
    const uint16_t h = FloatToHalf(in[i]);
    std::memcpy(o + 2 * i, &h, 2);
  }
}

void DecodeValues(const void* in, size_t n, bool fp16, float* out) {
  if (n == 0) return;  // buffers may be null
  if (!fp16) {
    std::memcpy(out, in, n * sizeof(float));
    return;
  }
  const auto* p = static_cast<const char*>(in);
  for (size_t i = 0; i < n; ++i) {
    uint16_t h;
    std::memcpy(&h, p + 2 * i, 2);
    out[i] = HalfToFloat(h);
  }
}

const char* OpName(uint8_t op) {
  switch (op) {
    case 1: return "PULL";
    case 2: return "PUSH";
    case 3: return "PUSH_PULL";
    case 4: return "CLOCK";
    case 5: return "SAVE";
    case 6: return "LOAD";
    case 7: return "STATS";
    case 8: return "ERROR";
    case 9: return "ATTACH";
    case 10: return "SET";
    case 11: return "WRITE";
    case 12: return "BATCH";
  }
  return "UNKNOWN";
}

const char* ErrorCodeName(ErrorCode code) {
  switch (code) {
    case ErrorCode::kNone: return "NONE";
    case ErrorCode::kBadMagic: return "BAD_MAGIC";
    case ErrorCode::kBadVersion: return "BAD_VERSION";
    case ErrorCode::kUnknownOp: return "UNKNOWN_OP";
    case ErrorCode::kUnknownVariable: return "UNKNOWN_VARIABLE";
    case ErrorCode::kBadPartition: return "BAD_PARTITION";
    case ErrorCode::kBadCount: return "BAD_COUNT";
    case ErrorCode::kIdOutOfRange: return "ID_OUT_OF_RANGE";
    case ErrorCode::kNonFinite: return "NON_FINITE";
    case ErrorCode::kTooLarge: return "TOO_LARGE";
    case ErrorCode::kBadFrames: return "BAD_FRAMES";
    case ErrorCode::kBadDim: return "BAD_DIM";
    case ErrorCode::kBadClock: return "BAD_CLOCK";
    case ErrorCode::kCheckpoint: return "CHECKPOINT";
    case ErrorCode::kBadFlags: return "BAD_FLAGS";
    case ErrorCode::kStaleAttempt: return "STALE_ATTEMPT";
    case ErrorCode::kInternal: return "INTERNAL";
    case ErrorCode::kBadWorker: return "BAD_WORKER";
    case ErrorCode::kSharedMemory: return "SHARED_MEMORY";
    case ErrorCode::kBadSetting: return "BAD_SETTING";
    case ErrorCode::kStaleGeneration: return "STALE_GENERATION";
    case ErrorCode::kTableFull: return "TABLE_FULL";
    case ErrorCode::kBadRowState: return "BAD_ROW_STATE";
  }
  return "UNKNOWN";
}

}  // namespace parallax::ps
