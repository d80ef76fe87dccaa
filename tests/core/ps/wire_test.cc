#include "core/ps/wire.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

namespace parallax::ps {
namespace {

class WireTest : public ::testing::Test {
 protected:
  WireError Parse(const Header& h, const std::string& ids, const std::string& values,
                  bool expect_reply = false, size_t limit = 1 << 20) {
    // The frames are kept (view_ points into them) until the next Parse.
    head_.assign(ps_wire::kHeaderSize, '\0');
    ps_wire::WriteHeader(h, head_.data());
    ids_ = ids;
    values_ = values;
    const void* frames[3] = {head_.data(), ids_.data(), values_.data()};
    size_t sizes[3] = {head_.size(), ids_.size(), values_.size()};
    WireLimits limits;
    limits.max_message_bytes = limit;
    return ParseMessage(frames, sizes, 3, limits, expect_reply, &view_);
  }
  static Header Push(uint32_t count, uint32_t dim) {
    Header h;
    h.op = static_cast<uint8_t>(Op::kPush);
    h.count = count;
    h.dim = dim;
    return h;
  }
  MessageView view_;
  std::string head_, ids_, values_;
};

TEST_F(WireTest, HeaderIsSixtyFourLittleEndianBytes) {
  Header h;
  h.variable = 0x01020304;
  h.request_id = 0x1122334455667788ULL;
  std::string b(64, '\0');
  ps_wire::WriteHeader(h, b.data());
  EXPECT_EQ(b.substr(0, 4), "PXPS");
  EXPECT_EQ(static_cast<unsigned char>(b[12]), 0x04);
  EXPECT_EQ(static_cast<unsigned char>(b[32]), 0x88);
  Header back = ps_wire::ReadHeader(b.data());
  EXPECT_EQ(back.request_id, h.request_id);
}

TEST_F(WireTest, AcceptsWellFormedPush) {
  std::vector<int64_t> ids = {3, 9};
  std::vector<float> v(2 * 4, 1.5f);
  const std::string id_bytes(reinterpret_cast<char*>(ids.data()), 16);
  const std::string value_bytes(reinterpret_cast<char*>(v.data()), 32);
  WireError e = Parse(Push(2, 4), id_bytes, value_bytes);  // view_ points into these
  ASSERT_TRUE(e.ok()) << e.text;
  EXPECT_EQ(view_.IdAt(1), 9);
  EXPECT_EQ(view_.values_bytes, 32u);
}

TEST_F(WireTest, RejectsBadMagicVersionOpFlags) {
  Header h = Push(0, 4);
  h.magic = 7;
  EXPECT_EQ(Parse(h, "", "").code, ErrorCode::kBadMagic);
  h = Push(0, 4);
  h.version = 2;
  EXPECT_EQ(Parse(h, "", "").code, ErrorCode::kBadVersion);
  h = Push(0, 4);
  h.op = 42;
  EXPECT_EQ(Parse(h, "", "").code, ErrorCode::kUnknownOp);
  h.op = 0;
  EXPECT_EQ(Parse(h, "", "").code, ErrorCode::kUnknownOp);
  h = Push(0, 4);
  h.flags = 0x80;
  EXPECT_EQ(Parse(h, "", "").code, ErrorCode::kBadFlags);
  h = Push(0, 4);
  h.flags = ps_wire::kFlagReply;
  EXPECT_EQ(Parse(h, "", "").code, ErrorCode::kBadFlags);
  h = Push(0, 4);
  h.clock = -1;
  EXPECT_EQ(Parse(h, "", "").code, ErrorCode::kBadClock);
  h = Push(0, 4);
  h.version_seen = INT64_MIN;
  EXPECT_EQ(Parse(h, "", "").code, ErrorCode::kBadClock);
  h = Push(0, 4);
  h.op = static_cast<uint8_t>(Op::kError);
  EXPECT_EQ(Parse(h, "", "").code, ErrorCode::kUnknownOp);
}

TEST_F(WireTest, RejectsCountDisagreeingWithFrames) {
  EXPECT_EQ(Parse(Push(2, 4), std::string(8, 'x'), std::string(32, 'x')).code, ErrorCode::kBadCount);
  EXPECT_EQ(Parse(Push(2, 4), std::string(16, 'x'), std::string(31, 'x')).code, ErrorCode::kBadCount);
  Header pull = Push(2, 4);
  pull.op = static_cast<uint8_t>(Op::kPull);
  EXPECT_EQ(Parse(pull, std::string(16, 'x'), std::string(4, 'x')).code, ErrorCode::kBadCount);
  EXPECT_TRUE(Parse(pull, std::string(16, 'x'), "").ok());
  // Overflowing products are caught before they are used.
  EXPECT_EQ(Parse(Push(0xffffffffu, 0xffffffffu), "", "").code, ErrorCode::kBadDim);
  EXPECT_EQ(Parse(Push(1, 0), std::string(8, 'x'), "").code, ErrorCode::kBadDim);
}

TEST_F(WireTest, RejectsOversizedAndMisframedMessages) {
  EXPECT_EQ(Parse(Push(1, 4), std::string(8, 'x'), std::string(16, 'x'), false, 60).code,
            ErrorCode::kTooLarge);
  std::string head(10, '\0');
  const void* frames[1] = {head.data()};
  size_t sizes[1] = {head.size()};
  EXPECT_EQ(ParseMessage(frames, sizes, 1, WireLimits{}, false, &view_).code, ErrorCode::kBadFrames);
  const void* f3[3] = {head.data(), head.data(), head.data()};
  size_t s3[3] = {10, 0, 0};
  EXPECT_EQ(ParseMessage(f3, s3, 3, WireLimits{}, false, &view_).code, ErrorCode::kBadFrames);
}

TEST_F(WireTest, SharedMemoryRequestsCarryAReferenceAndRepliesNothing) {
  Header h = Push(2, 4);
  h.flags = ps_wire::kFlagShm;
  ps_wire::ShmRef ref{128, 4096};
  const std::string ref_bytes(reinterpret_cast<const char*>(&ref), sizeof ref);
  WireError e = Parse(h, std::string(16, 'x'), ref_bytes);
  ASSERT_TRUE(e.ok()) << e.text;
  EXPECT_TRUE(view_.shm());
  EXPECT_EQ(view_.shm_ref.values, 128u);
  EXPECT_EQ(view_.shm_ref.reply, 4096u);
  // The reference is 16 bytes, never the values themselves.
  EXPECT_EQ(Parse(h, std::string(16, 'x'), std::string(32, 'x')).code, ErrorCode::kBadCount);
  EXPECT_EQ(Parse(h, std::string(16, 'x'), "").code, ErrorCode::kBadCount);
  ps_wire::ShmRef odd{6, 0};
  EXPECT_EQ(Parse(h, std::string(16, 'x'), std::string(reinterpret_cast<const char*>(&odd), 16)).code,
            ErrorCode::kSharedMemory);
  // Replies: an empty values frame.
  Header reply = h;
  reply.op = static_cast<uint8_t>(Op::kPull);
  reply.flags = ps_wire::kFlagShm | ps_wire::kFlagReply;
  EXPECT_TRUE(Parse(reply, "", "", /*expect_reply=*/true).ok());
  EXPECT_EQ(Parse(reply, "", std::string(32, 'x'), true).code, ErrorCode::kBadCount);
  // Only data ops may set it; ATTACH names its region in frame 1.
  Header stats = Push(0, 0);
  stats.op = static_cast<uint8_t>(Op::kStats);
  stats.flags = ps_wire::kFlagShm;
  EXPECT_EQ(Parse(stats, "", "").code, ErrorCode::kBadFlags);
  Header attach = Push(0, 0);
  attach.op = static_cast<uint8_t>(Op::kAttach);
  ASSERT_TRUE(Parse(attach, "/px-ps-1", "").ok());
  EXPECT_EQ(view_.text, "/px-ps-1");
}

// ROW_VERSIONS (schemas/ps_wire.md, "Row versions"): a request's frame 2 is
// a u32 per id; a reply's frame 1 a u32 per id and frame 2 the `worker`
// rows sent, never more rows than ids.
TEST_F(WireTest, RowVersionPullsCarryAVersionPerIdAndRepliesTheRowsSent) {
  Header h;
  h.op = static_cast<uint8_t>(Op::kPull);
  h.flags = ps_wire::kFlagRowVersions;
  h.count = 3;
  h.dim = 2;
  h.version_seen = 4;  // the bound
  const std::string ids(3 * 8, '\0');
  EXPECT_TRUE(Parse(h, ids, std::string(12, '\xff')).ok());
  EXPECT_EQ(view_.values_bytes, 12u);
  EXPECT_EQ(Parse(h, ids, "").code, ErrorCode::kBadCount);  // no versions held
  h.flags |= ps_wire::kFlagReply;
  h.worker = 1;  // one row sent
  EXPECT_TRUE(Parse(h, std::string(12, '\0'), std::string(8, '\0'), /*expect_reply=*/true).ok());
  EXPECT_EQ(Parse(h, std::string(12, '\0'), std::string(16, '\0'), true).code, ErrorCode::kBadCount);
  h.worker = 4;  // more rows than ids
  EXPECT_EQ(Parse(h, std::string(12, '\0'), std::string(32, '\0'), true).code, ErrorCode::kBadCount);
  h.worker = 0;
  h.flags = ps_wire::kFlagRowVersions | ps_wire::kFlagRowState;
  EXPECT_EQ(Parse(h, ids, std::string(12, '\0')).code, ErrorCode::kBadFlags);
  h.flags = ps_wire::kFlagRowVersions;
  h.op = static_cast<uint8_t>(Op::kPushPull);
  EXPECT_EQ(Parse(h, ids, std::string(24, '\0')).code, ErrorCode::kBadFlags);
}

TEST_F(WireTest, Fp16RoundTripsRepresentableValues) {
  for (float f : {0.0f, 1.0f, -2.5f, 0.099975586f, 65504.0f, 6.1035156e-05f, 5.9604645e-08f}) {
    EXPECT_EQ(HalfToFloat(FloatToHalf(f)), f) << f;
  }
  EXPECT_TRUE(std::isinf(HalfToFloat(FloatToHalf(1e6f))));
  EXPECT_TRUE(std::isnan(HalfToFloat(FloatToHalf(std::numeric_limits<float>::quiet_NaN()))));
  EXPECT_NEAR(HalfToFloat(FloatToHalf(0.1f)), 0.1f, 1e-4);
  std::vector<float> in = {1.0f, -0.5f, 3.25f};
  std::vector<char> buf(6);
  EncodeValues(in.data(), 3, true, buf.data());
  std::vector<float> out(3);
  DecodeValues(buf.data(), 3, true, out.data());
  EXPECT_EQ(out, in);
}

}  // namespace
}  // namespace parallax::ps
