// Encoding and validation of PS wire messages (schemas/ps_wire.md). Pure
// functions over byte buffers: no sockets, so the shard, the client, the
// tests and the fuzz target share them.
#ifndef PARALLAX_CORE_PS_WIRE_H_
#define PARALLAX_CORE_PS_WIRE_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "schemas/ps_wire.h"

namespace parallax::ps {

using ps_wire::ErrorCode;
using ps_wire::Header;
using ps_wire::Op;

// A received message whose frames are structurally sound. Views into the
// frames: valid while they are. ids and values may be unaligned; read them
// with IdAt() / DecodeValues().
struct MessageView {
  Header header;
  const char* ids = nullptr;     // count × 8 bytes (data ops)
  const char* values = nullptr;  // count × dim × (2 or 4) bytes, or null
  size_t values_bytes = 0;
  std::string_view text;         // frame 1 of SAVE/LOAD/STATS/ERROR/ATTACH
  ps_wire::ShmRef shm_ref;       // requests with kFlagShm: where the values are and go

  int64_t IdAt(size_t i) const;
  bool fp16() const { return header.flags & ps_wire::kFlagFp16; }
  // Values in the connection's shared memory region, not in frame 2.
  bool shm() const { return header.flags & ps_wire::kFlagShm; }
};

struct WireLimits {
  size_t max_message_bytes = 256u << 20;  // all frames together
};

// What went wrong with a message, for the error reply.
struct WireError {
  ErrorCode code = ErrorCode::kNone;
  std::string text;
  bool ok() const { return code == ErrorCode::kNone; }
};

// Checks everything that can be checked without knowing the plan: frame
// count, header size, magic, version, op, flags, count against frame sizes,
// total size against `limits`. `expect_reply` says which direction the
// message must travel (kFlagReply set or clear).
WireError ParseMessage(const void* const* frames, const size_t* sizes, size_t num_frames,
                       const WireLimits& limits, bool expect_reply, MessageView* out);

// Whether a message's header frame says version 2 (a batch envelope).
bool IsBatch(const void* const* frames, const size_t* sizes, size_t num_frames);

// A version-2 batch (schemas/ps_wire.md, "Batches") is four frames: the
// envelope header; every part's header; every part's frame 1 (ids, or an
// ERROR reply's text); every part's frame 2 (values). Checks the
// envelope (header size, magic, version, op: kOpBatch, or kError for a
// 3-frame reply refusing the whole batch, whose text goes to `*text`;
// flags; part count against frame 1) and all frames together against `limits`, and
// cuts the parts out: parts[k] are part k's three frames, as a version-1
// message would have them, to check with ParseMessage. BAD_COUNT when the
// parts' sizes (from their headers) do not add up to frames 1 and 2.
struct BatchPart {
  const void* frames[3] = {nullptr, nullptr, nullptr};
  size_t sizes[3] = {0, 0, 0};
};
WireError ParseBatch(const void* const* frames, const size_t* sizes, size_t num_frames,
                     const WireLimits& limits, bool expect_reply, Header* out,
                     std::vector<BatchPart>* parts, std::string_view* text = nullptr);

// The sizes of frames 1 and 2 of a version-1 data message (request or
// reply) with header `h`, as the format defines them; in a batch's reply an
// ERROR part's frame 1 is its text, of h.count bytes. False for a header
// whose op carries no data.
bool PartFrameSizes(const Header& h, bool is_reply, size_t* ids_bytes, size_t* values_bytes);

// Frame 1 of a SET request: "name=value" (schemas/ps_wire.md, "Settings").
// Views into the text.
struct Setting {
  std::string_view name;
  std::string_view value;
};
// BAD_SETTING when `text` is not "name=value" with both parts non-empty.
WireError ParseSetting(std::string_view text, Setting* out);
std::string FormatSetting(std::string_view name, std::string_view value);

// Bytes of one value in the encoding the flags select.
inline size_t ValueBytes(uint16_t flags) { return (flags & ps_wire::kFlagFp16) ? 2 : 4; }

// Writes n floats as float32 or fp16 (round to nearest even) to `out`.
void EncodeValues(const float* in, size_t n, bool fp16, void* out);
// Reads n values of the message's encoding into floats.
void DecodeValues(const void* in, size_t n, bool fp16, float* out);

uint16_t FloatToHalf(float f);
float HalfToFloat(uint16_t h);

// Human names for logs and error texts.
const char* OpName(uint8_t op);
const char* ErrorCodeName(ErrorCode code);

}  // namespace parallax::ps

#endif  // PARALLAX_CORE_PS_WIRE_H_
