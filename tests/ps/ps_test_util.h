// Helpers for PS tests: build raw wire messages and drive a ShardCore.
#ifndef PARALLAX_TESTS_PS_PS_TEST_UTIL_H_
#define PARALLAX_TESTS_PS_PS_TEST_UTIL_H_

#include <gtest/gtest.h>

#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/ps/client.h"
#include "core/ps/wire.h"
#include "ps/shard_core.h"
#include "ps/shard_server.h"

namespace parallax::ps::testing {

// The three frames of a request.
struct Frames {
  std::vector<std::string> f;
};

inline Frames Request(Header h, const std::vector<int64_t>& ids, const std::vector<float>& values,
                      bool fp16 = false) {
  Frames r;
  r.f.resize(3);
  r.f[0].resize(ps_wire::kHeaderSize);
  if (fp16) h.flags |= ps_wire::kFlagFp16;
  ps_wire::WriteHeader(h, r.f[0].data());
  r.f[1].assign(reinterpret_cast<const char*>(ids.data()), ids.size() * 8);
  r.f[2].resize(values.size() * (fp16 ? 2 : 4));
  EncodeValues(values.data(), values.size(), fp16, r.f[2].data());
  return r;
}

// One variable "emb" (id 0) of rows × dim in one partition on shard 0, its
// optimizer `opt` at lr 0.1 (Adagrad's accumulator from 0.1), its
// initializer's seed `seed`.
inline PsPlan OnePartitionPlan(Consistency mode, OptimizerType opt, int64_t rows, uint32_t dim,
                               uint32_t workers = 1, uint64_t seed = 3) {
  PsPlan plan;
  plan.consistency = mode;
  plan.num_workers = workers;
  VariableSpec v;
  v.id = 0;
  v.name = "emb";
  v.rows = rows;
  v.dim = dim;
  v.partitions = 1;
  v.partition_shards = {0};
  v.optimizer.type = opt;
  v.optimizer.lr = 0.1f;
  v.optimizer.initial_accumulator = 0.1f;
  v.init.seed = seed;
  plan.variables.push_back(v);
  return plan;
}

inline Header MakeHeader(Op op, uint32_t var, uint32_t partition, uint32_t worker, uint32_t count,
                         uint32_t dim, int64_t clock, uint64_t request_id = 1) {
  Header h;
  h.op = static_cast<uint8_t>(op);
  h.variable = var;
  h.partition = partition;
  h.worker = worker;
  h.count = count;
  h.dim = dim;
  h.clock = clock;
  h.request_id = request_id;
  return h;
}

inline std::vector<OutMessage> Send(ShardCore* core, const Frames& fr, const std::string& who = "w") {
  std::vector<const void*> data;
  std::vector<size_t> sizes;
  for (const auto& s : fr.f) {
    data.push_back(s.data());
    sizes.push_back(s.size());
  }
  std::vector<OutMessage> out;
  core->Handle(who, data.data(), sizes.data(), data.size(), &out);
  return out;
}

// A small SGD variable (10 rows of 2, lr 0.1, zeros) in one partition on
// shard 0: the shape the shard's settings and consistency tests use.
inline VariableSpec SmallSgdVariable(uint32_t id, std::string name) {
  VariableSpec v;
  v.id = id;
  v.name = std::move(name);
  v.rows = 10;
  v.dim = 2;
  v.partition_shards = {0};
  v.optimizer.type = OptimizerType::kSgd;
  v.optimizer.lr = 0.1f;
  v.init.type = Initializer::Type::kZeros;
  return v;
}

// A shard core of `plan` (a failure is a test failure, and null).
inline std::unique_ptr<ShardCore> MakeShard(const PsPlan& plan) {
  ShardOptions o;
  o.plan = plan;
  auto core = ShardCore::Create(o);
  EXPECT_TRUE(core.ok()) << core.status().ToString();
  return core.ok() ? std::move(core).value() : nullptr;
}

// A ShardServer per shard of `plan`, on loopback TCP unless `adjust` (given
// each shard's index and options) says otherwise, appended to *servers;
// their endpoints. A server that does not start is a test failure and ends
// the list there.
inline std::vector<std::string> StartShardServers(
    const PsPlan& plan, std::vector<std::unique_ptr<ShardServer>>* servers,
    const std::function<void(uint32_t, ShardServerOptions*)>& adjust = {}) {
  std::vector<std::string> endpoints;
  for (uint32_t s = 0; s < plan.num_shards; ++s) {
    ShardServerOptions o;
    o.shard.plan = plan;
    o.shard.shard = s;
    if (adjust) adjust(s, &o);
    auto server = ShardServer::Start(o);
    EXPECT_TRUE(server.ok()) << server.status().ToString();
    if (!server.ok()) break;
    endpoints.push_back((*server)->endpoint());
    servers->push_back(std::move(server).value());
  }
  return endpoints;
}

// A client of `plan`'s shards at `endpoints`, as worker `worker`, with what
// `adjust` sets in its options (a failure is a test failure, and null).
inline std::unique_ptr<PsClient> ConnectClient(
    const PsPlan& plan, std::vector<std::string> endpoints, uint32_t worker,
    const std::function<void(PsClientOptions*)>& adjust = {}) {
  PsClientOptions o;
  o.plan = plan;
  o.shard_endpoints = std::move(endpoints);
  o.worker = worker;
  if (adjust) adjust(&o);
  auto c = PsClient::Create(o);
  EXPECT_TRUE(c.ok()) << c.status().ToString();
  return c.ok() ? std::move(c).value() : nullptr;
}

inline Header ReplyHeader(const OutMessage& m) { return ps_wire::ReadHeader(m.frames[0].data()); }

// A SET of `var` (or ps_wire::kAllVariables) from step `clock` with frame 1
// `text` ("name=value"); the replies.
inline std::vector<OutMessage> SendSet(ShardCore* core, uint32_t var, int64_t clock,
                                       const std::string& text) {
  Frames f = Request(MakeHeader(Op::kSet, var, 0, 0, 0, 0, clock), {}, {});
  f.f[1] = text;
  return Send(core, f);
}

// `out` is one ERROR reply with `code` and a text saying why.
inline void ExpectOneErrorReply(const std::vector<OutMessage>& out, ErrorCode code) {
  ASSERT_EQ(out.size(), 1u);
  const Header h = ReplyHeader(out[0]);
  EXPECT_EQ(h.op, static_cast<uint8_t>(Op::kError));
  EXPECT_EQ(h.error_code, static_cast<uint16_t>(code))
      << ErrorCodeName(static_cast<ErrorCode>(h.error_code)) << ": " << out[0].frames[1];
  EXPECT_FALSE(out[0].frames[1].empty());
}

inline std::vector<float> ReplyValues(const OutMessage& m) {
  const Header h = ReplyHeader(m);
  std::vector<float> v(size_t{h.count} * h.dim);
  DecodeValues(m.values.data(), v.size(), h.flags & ps_wire::kFlagFp16, v.data());
  return v;
}

}  // namespace parallax::ps::testing

#endif  // PARALLAX_TESTS_PS_PS_TEST_UTIL_H_
