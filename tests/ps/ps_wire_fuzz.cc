// libFuzzer target: PS wire messages into the parser and a shard.
//
// Input layout: [u8 frame count (mod 5)] [u16 LE size of each frame but the
// last] [frame bytes...]; the last frame takes what remains. Each input is
// parsed by ParseMessage and handled by a ShardCore (sync and async); every
// reply the shard produces must itself parse as a well-formed reply.
// SAVE and LOAD are skipped: they touch the filesystem at a path from the
// input. Both shards have a 64 KiB shared memory region attached for the
// fuzzer's identity, so SHM-flagged requests reach the range checks.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "core/ps/shm_region.h"
#include "core/ps/wire.h"
#include "ps/shard_core.h"

namespace {

using namespace parallax::ps;
using parallax::Consistency;
using parallax::OptimizerType;

std::unique_ptr<ShardCore> MakeCore(Consistency mode) {
  PsPlan plan;
  plan.consistency = mode;
  plan.num_workers = 2;
  plan.num_shards = 2;
  plan.staleness = 1;
  VariableSpec v;
  v.id = 0;
  v.rows = 64;
  v.dim = 4;
  v.partitions = 2;
  v.scheme = PartitionScheme::kRange;
  v.partition_shards = {0, 1};
  v.optimizer.type = OptimizerType::kAdam;
  plan.variables.push_back(v);
  v.id = 1;
  v.rows = 1000;
  v.dim = 2;
  v.partitions = 3;
  v.scheme = PartitionScheme::kHash;
  v.partition_shards = {0, 0, 1};
  v.optimizer.type = OptimizerType::kAdagrad;
  plan.variables.push_back(v);
  ShardOptions o;
  o.plan = plan;
  o.limits.max_message_bytes = 1 << 16;
  o.max_steps_ahead = 4;
  auto core = std::move(ShardCore::Create(o)).value();
  static auto region = std::move(ShmRegion::Create(ShmRegion::NewName(), 64 * 1024)).value();
  Header h;
  h.op = static_cast<uint8_t>(Op::kAttach);
  std::string head(parallax::ps_wire::kHeaderSize, '\0');
  parallax::ps_wire::WriteHeader(h, head.data());
  const std::string& name = region->name();
  const void* f[3] = {head.data(), name.data(), name.data()};
  size_t s[3] = {head.size(), name.size(), 0};
  std::vector<OutMessage> out;
  core->Handle("fuzz", f, s, 3, &out);
  if (out.size() != 1 || parallax::ps_wire::ReadHeader(out[0].frames[0].data()).op != h.op) std::abort();
  return core;
}

void CheckReplies(const std::vector<OutMessage>& out) {
  WireLimits limits;
  limits.max_message_bytes = size_t{1} << 30;
  for (const auto& m : out) {
    if (m.part_headers || parallax::ps_wire::ReadHeader(m.frames[0].data()).version ==
                              parallax::ps_wire::kBatchVersion) {
      // A batch's reply (4 frames), or its ERROR (3): the envelope parses,
      // and so does every part as a version-1 reply.
      const void* f[4] = {m.frames[0].data(), m.part_headers ? m.part_headers->data() : nullptr,
                          m.frames[1].data(), m.values.data()};
      size_t s[4] = {m.frames[0].size(), m.part_headers ? m.part_headers->size() : 0,
                     m.frames[1].size(), m.values.size()};
      const size_t n = m.part_headers ? 4 : 3;
      if (!m.part_headers) {
        f[1] = f[2];
        s[1] = s[2];
        f[2] = f[3];
        s[2] = s[3];
      }
      Header env;
      std::vector<BatchPart> parts;
      if (!ParseBatch(f, s, n, limits, /*expect_reply=*/true, &env, &parts).ok()) std::abort();
      for (BatchPart& p : parts) {
        Header h = parallax::ps_wire::ReadHeader(p.frames[0]);
        char fixed[parallax::ps_wire::kHeaderSize];
        if (h.op == static_cast<uint8_t>(Op::kError)) h.count = 0;  // its text's length here
        parallax::ps_wire::WriteHeader(h, fixed);
        p.frames[0] = fixed;
        MessageView v;
        if (!ParseMessage(p.frames, p.sizes, 3, limits, /*expect_reply=*/true, &v).ok()) std::abort();
      }
      continue;
    }
    const void* f[3] = {m.frames[0].data(), m.frames[1].data(), m.values.data()};
    size_t s[3] = {m.frames[0].size(), m.frames[1].size(), m.values.size()};
    MessageView v;
    if (!ParseMessage(f, s, 3, limits, /*expect_reply=*/true, &v).ok()) std::abort();
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static auto sync_core = MakeCore(Consistency::kSync);
  static auto async_core = MakeCore(Consistency::kSsp);
  if (size < 1) return 0;
  const size_t n = data[0] % 5;
  size_t pos = 1;
  std::vector<std::string> frames;
  for (size_t i = 0; i < n; ++i) {
    size_t len = size - pos;
    if (i + 1 < n) {
      if (pos + 2 > size) return 0;
      len = data[pos] | (size_t{data[pos + 1]} << 8);
      pos += 2;
      if (len > size - pos) len = size - pos;
    }
    frames.emplace_back(reinterpret_cast<const char*>(data + pos), len);
    pos += len;
  }
  if (!frames.empty() && frames[0].size() > 6) {
    const uint8_t op = static_cast<uint8_t>(frames[0][6]);
    if (op == static_cast<uint8_t>(Op::kSave) || op == static_cast<uint8_t>(Op::kLoad)) return 0;
  }
  std::vector<const void*> ptrs;
  std::vector<size_t> sizes;
  for (const auto& f : frames) {
    ptrs.push_back(f.data());
    sizes.push_back(f.size());
  }
  MessageView view;
  (void)ParseMessage(ptrs.data(), sizes.data(), ptrs.size(), WireLimits{}, false, &view);
  std::vector<OutMessage> out;
  sync_core->Handle("fuzz", ptrs.data(), sizes.data(), ptrs.size(), &out);
  CheckReplies(out);
  out.clear();
  async_core->Handle("fuzz", ptrs.data(), sizes.data(), ptrs.size(), &out);
  CheckReplies(out);
  return 0;
}
