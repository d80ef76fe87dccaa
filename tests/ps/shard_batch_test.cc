// Wire version 2, batches (schemas/ps_wire.md, "Batches"): a shard checks
// every part before it applies any and answers once, when every part is
// answerable; a client sends each shard one message per Batch() call; and
// the training is the same as with one message per variable and partition.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <cstring>
#include <random>
#include <thread>

#include <zmq.hpp>
#include <zmq_addon.hpp>

#include "core/ps/client.h"
#include "core/ps/initializer.h"
#include "ps/shard_server.h"
#include "tests/ps/ps_test_util.h"

namespace parallax::ps {
namespace {

using testing::ExpectOneErrorReply;
using testing::Frames;
using testing::MakeHeader;
using testing::MakeShard;
using testing::ReplyHeader;
using testing::ReplyValues;
using testing::Request;
using testing::Send;

constexpr int64_t kWaitMs = 10'000;

// Two SGD variables of 10 rows of 2 in one partition each, on shard 0.
PsPlan TwoVariables(Consistency mode, uint32_t workers) {
  PsPlan plan;
  plan.consistency = mode;
  plan.num_workers = workers;
  plan.num_shards = 1;
  plan.variables = {testing::SmallSgdVariable(0, "a"), testing::SmallSgdVariable(1, "b")};
  return plan;
}

// A batch envelope around `parts`.
Frames Batch(const std::vector<Frames>& parts, uint64_t request_id = 100, uint32_t attempt = 0) {
  Header h;
  h.version = ps_wire::kBatchVersion;
  h.op = ps_wire::kOpBatch;
  h.count = static_cast<uint32_t>(parts.size());
  h.request_id = request_id;
  h.attempt = attempt;
  Frames b;
  b.f.resize(4);
  b.f[0].resize(ps_wire::kHeaderSize);
  ps_wire::WriteHeader(h, b.f[0].data());
  for (const Frames& p : parts) {
    for (size_t i = 0; i < 3; ++i) b.f[1 + i] += p.f[i];
  }
  return b;
}

// A batch reply's parts, each as a version-1 reply would be (an ERROR
// part's count back to 0); empty when `m` is not one.
std::vector<OutMessage> Parts(const OutMessage& m) {
  std::vector<OutMessage> out;
  if (!m.part_headers) return out;
  const void* frames[4] = {m.frames[0].data(), m.part_headers->data(), m.frames[1].data(),
                           m.values.data()};
  const size_t sizes[4] = {m.frames[0].size(), m.part_headers->size(), m.frames[1].size(),
                           m.values.size()};
  Header env;
  std::vector<BatchPart> parts;
  WireLimits limits;
  const WireError e = ParseBatch(frames, sizes, 4, limits, /*expect_reply=*/true, &env, &parts);
  EXPECT_TRUE(e.ok()) << e.text;
  for (const BatchPart& p : parts) {
    OutMessage part;
    part.identity = m.identity;
    Header h = ps_wire::ReadHeader(p.frames[0]);
    if (h.op == static_cast<uint8_t>(Op::kError)) h.count = 0;
    part.frames[0].resize(ps_wire::kHeaderSize);
    ps_wire::WriteHeader(h, part.frames[0].data());
    part.frames[1].assign(static_cast<const char*>(p.frames[1]), p.sizes[1]);
    part.values = ValueFrame(p.sizes[2]);
    if (p.sizes[2] > 0) std::memcpy(part.values.data(), p.frames[2], p.sizes[2]);
    out.push_back(std::move(part));
  }
  return out;
}

Frames PushPull(uint32_t var, uint32_t worker, int64_t clock, std::vector<int64_t> ids,
                std::vector<float> grads, uint64_t request_id) {
  return Request(MakeHeader(Op::kPushPull, var, 0, worker, static_cast<uint32_t>(ids.size()), 2,
                            clock, request_id),
                 ids, grads);
}

std::vector<float> Weights(const ShardCore& core, uint32_t var) {
  const VariableTable* t = core.table(var);
  std::vector<float> w;
  for (int64_t id = 0; id < 10; ++id) {
    const int64_t idx = t->Find(id);
    w.push_back(idx >= 0 ? t->weights(static_cast<uint32_t>(idx))[0] : 0.0f);
    w.push_back(idx >= 0 ? t->weights(static_cast<uint32_t>(idx))[1] : 0.0f);
  }
  return w;
}

TEST(ShardBatchTest, OneReplyWithEveryPartsAnswerInOrderEqualToSeparateMessages) {
  auto batched = MakeShard(TwoVariables(Consistency::kAsync, 1));
  auto separate = MakeShard(TwoVariables(Consistency::kAsync, 1));
  ASSERT_TRUE(batched && separate);
  const Frames a = PushPull(0, 0, 0, {1, 3}, {1, 2, 3, 4}, 7);
  const Frames b = PushPull(1, 0, 0, {4}, {-1, 5}, 8);
  const auto out = Send(batched.get(), Batch({a, b}));
  ASSERT_EQ(out.size(), 1u);
  const Header env = ReplyHeader(out[0]);
  EXPECT_EQ(env.version, ps_wire::kBatchVersion);
  EXPECT_EQ(env.op, ps_wire::kOpBatch);
  EXPECT_EQ(env.request_id, 100u);
  EXPECT_TRUE(env.flags & ps_wire::kFlagReply);
  const auto parts = Parts(out[0]);
  ASSERT_EQ(parts.size(), 2u);
  const auto one = Send(separate.get(), a);
  const auto two = Send(separate.get(), b);
  ASSERT_EQ(one.size(), 1u);
  ASSERT_EQ(two.size(), 1u);
  EXPECT_EQ(ReplyHeader(parts[0]).request_id, 7u);
  EXPECT_EQ(ReplyHeader(parts[1]).request_id, 8u);
  EXPECT_EQ(ReplyValues(parts[0]), ReplyValues(one[0]));
  EXPECT_EQ(ReplyValues(parts[1]), ReplyValues(two[0]));
  // SGD, lr 0.1, from zeros
  EXPECT_EQ(ReplyValues(parts[0]),
            (std::vector<float>{-(0.1f * 1), -(0.1f * 2), -(0.1f * 3), -(0.1f * 4)}));
  EXPECT_EQ(Weights(*batched, 0), Weights(*separate, 0));
  EXPECT_EQ(Weights(*batched, 1), Weights(*separate, 1));
  const auto stats = nlohmann::json::parse(batched->StatsJson());
  EXPECT_EQ(stats.at("requests"), 1);
  EXPECT_EQ(stats.at("batches"), 1);
  EXPECT_EQ(stats.at("push_pulls"), 2);
}

// Each bad part, after a good one: the whole batch is refused by one ERROR
// naming the part, and the shard's rows and counters are as before.
TEST(ShardBatchTest, ABadPartRefusesTheWholeBatchAndNothingApplies) {
  struct Case {
    const char* what;
    Frames bad;
    ErrorCode code;
  };
  const float nan = std::nanf("");
  std::vector<Case> cases = {
      {"id outside the variable", PushPull(1, 0, 0, {12}, {1, 1}, 8), ErrorCode::kIdOutOfRange},
      {"non-finite gradient", PushPull(1, 0, 0, {2}, {nan, 1}, 8), ErrorCode::kNonFinite},
      {"unknown variable", PushPull(9, 0, 0, {2}, {1, 1}, 8), ErrorCode::kUnknownVariable},
      {"the same request and partition twice", PushPull(0, 0, 0, {2}, {1, 1}, 7),
       ErrorCode::kBadPartition},
      {"a control op", Request(MakeHeader(Op::kClock, 0, 0, 0, 0, 0, 0, 8), {}, {}),
       ErrorCode::kUnknownOp},
  };
  Frames bad_dim = PushPull(1, 0, 0, {2}, {1, 1}, 8);
  Header bh = ps_wire::ReadHeader(bad_dim.f[0].data());
  bh.dim = 1;  // its values then take 4 bytes where the variable's row takes 8
  ps_wire::WriteHeader(bh, bad_dim.f[0].data());
  bad_dim.f[2].resize(4);
  cases.push_back({"a dim that is not the variable's", bad_dim, ErrorCode::kBadDim});
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    auto core = MakeShard(TwoVariables(Consistency::kAsync, 1));
    ASSERT_TRUE(core);
    const auto before_a = Weights(*core, 0), before_b = Weights(*core, 1);
    const auto out = Send(core.get(), Batch({PushPull(0, 0, 0, {1}, {1, 1}, 7), c.bad}));
    ExpectOneErrorReply(out, c.code);
    const Header h = ReplyHeader(out[0]);
    EXPECT_EQ(h.version, ps_wire::kBatchVersion);
    EXPECT_EQ(h.request_id, 100u);
    EXPECT_NE(out[0].frames[1].find("batch part 1 of 2"), std::string::npos) << out[0].frames[1];
    EXPECT_NE(out[0].frames[1].find("nothing in the batch was applied"), std::string::npos);
    EXPECT_EQ(Weights(*core, 0), before_a);
    EXPECT_EQ(Weights(*core, 1), before_b);
    const auto stats = nlohmann::json::parse(core->StatsJson());
    EXPECT_EQ(stats.at("push_pulls"), 0);
    EXPECT_EQ(stats.at("errors"), 1);
    EXPECT_EQ(core->UpdatesApplied(), 0);
  }
}

TEST(ShardBatchTest, SyncTwoPushesOfOneStepToAPartitionRefuseTheBatch) {
  auto core = MakeShard(TwoVariables(Consistency::kSync, 2));
  ASSERT_TRUE(core);
  const auto out = Send(core.get(), Batch({PushPull(0, 0, 0, {1}, {1, 1}, 7),
                                           PushPull(0, 0, 0, {2}, {1, 1}, 8)}));
  ExpectOneErrorReply(out, ErrorCode::kBadClock);
  // Nothing was buffered: worker 0 can still push step 0.
  const auto again = Send(core.get(), PushPull(0, 0, 0, {1}, {1, 1}, 9));
  EXPECT_TRUE(again.empty());  // held until worker 1 pushes
}

// Sync: the reply comes once every part's step applied, i.e. once the
// other worker pushed every variable, whether it batches or not.
TEST(ShardBatchTest, SyncReplyWaitsUntilEveryPartIsAnswerable) {
  auto core = MakeShard(TwoVariables(Consistency::kSync, 2));
  ASSERT_TRUE(core);
  auto out = Send(core.get(), Batch({PushPull(0, 0, 0, {1}, {1, 1}, 7),
                                     PushPull(1, 0, 0, {1}, {2, 2}, 8)}), "w0");
  EXPECT_TRUE(out.empty());
  out = Send(core.get(), PushPull(0, 1, 0, {1}, {3, 3}, 1), "w1");
  // Worker 1's push-pull of a is answered; worker 0's batch still waits for b.
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].identity, "w1") << "worker 0's batch answered early";
  out = Send(core.get(), PushPull(1, 1, 0, {1}, {4, 4}, 2), "w1");
  ASSERT_EQ(out.size(), 2u);
  const OutMessage* batch = nullptr;
  for (const auto& m : out) {
    if (m.identity == "w0") batch = &m;
  }
  ASSERT_NE(batch, nullptr);
  const auto parts = Parts(*batch);
  ASSERT_EQ(parts.size(), 2u);
  // SGD, lr 0.1, of the mean of (1, 3) and of (2, 4)
  EXPECT_EQ(ReplyValues(parts[0]), (std::vector<float>{-(0.1f * 2), -(0.1f * 2)}));
  EXPECT_EQ(ReplyValues(parts[1]), (std::vector<float>{-(0.1f * 3), -(0.1f * 3)}));
}

TEST(ShardBatchTest, WireVersionsAreAnsweredOrRefusedByName) {
  auto core = MakeShard(TwoVariables(Consistency::kAsync, 1));
  ASSERT_TRUE(core);
  // Version 1 is answered as before.
  auto out = Send(core.get(), PushPull(0, 0, 0, {1}, {1, 1}, 7));
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(ReplyHeader(out[0]).op, static_cast<uint8_t>(Op::kPushPull));
  // Version 3 is refused, and the text says which versions this shard speaks.
  Frames v3 = PushPull(0, 0, 0, {1}, {1, 1}, 7);
  Header h = ps_wire::ReadHeader(v3.f[0].data());
  h.version = 3;
  ps_wire::WriteHeader(h, v3.f[0].data());
  out = Send(core.get(), v3);
  ExpectOneErrorReply(out, ErrorCode::kBadVersion);
  EXPECT_NE(out[0].frames[1].find("speaks 1, and 2 for batches"), std::string::npos)
      << out[0].frames[1];
  // A part must be version 1.
  Frames inner = PushPull(0, 0, 0, {1}, {1, 1}, 7);
  h = ps_wire::ReadHeader(inner.f[0].data());
  h.version = ps_wire::kBatchVersion;
  ps_wire::WriteHeader(h, inner.f[0].data());
  out = Send(core.get(), Batch({inner}));
  ExpectOneErrorReply(out, ErrorCode::kBadVersion);
  // Version 2 is a batch: any other op, or a part count the frames do not
  // have, is refused.
  Frames env = Batch({PushPull(0, 0, 0, {1}, {1, 1}, 7)});
  h = ps_wire::ReadHeader(env.f[0].data());
  h.op = static_cast<uint8_t>(Op::kPull);
  ps_wire::WriteHeader(h, env.f[0].data());
  ExpectOneErrorReply(Send(core.get(), env), ErrorCode::kUnknownOp);
  h.op = ps_wire::kOpBatch;
  h.count = 2;
  ps_wire::WriteHeader(h, env.f[0].data());
  ExpectOneErrorReply(Send(core.get(), env), ErrorCode::kBadFrames);
  // Parts whose headers ask for more ids than frame 2 has.
  h.count = 1;
  ps_wire::WriteHeader(h, env.f[0].data());
  env.f[2].resize(env.f[2].size() - 8);
  ExpectOneErrorReply(Send(core.get(), env), ErrorCode::kBadCount);
  EXPECT_EQ(core->UpdatesApplied(), 1);  // the version-1 push only
}

TEST(ShardBatchTest, TheEnvelopeFencesTheBatch) {
  PsPlan plan = TwoVariables(Consistency::kAsync, 1);
  ShardOptions o;
  o.plan = plan;
  o.attempt = 3;
  auto core = ShardCore::Create(o);
  ASSERT_TRUE(core.ok());
  auto out = Send(core->get(), Batch({PushPull(0, 0, 0, {1}, {1, 1}, 7)}, 100, /*attempt=*/2));
  ExpectOneErrorReply(out, ErrorCode::kStaleAttempt);
  EXPECT_EQ(ReplyHeader(out[0]).version, ps_wire::kBatchVersion);
  out = Send(core->get(), Batch({PushPull(0, 0, 0, {1}, {1, 1}, 7)}, 101, /*attempt=*/3));
  ASSERT_EQ(out.size(), 1u);
  const auto parts = Parts(out[0]);
  ASSERT_EQ(parts.size(), 1u);
  EXPECT_EQ(ReplyHeader(parts[0]).attempt, 3u);
}

// Clients against real shard servers on loopback.
class BatchClientTest : public ::testing::Test {
 protected:
  static PsPlan Plan(Consistency mode, uint32_t workers, uint32_t shards, uint32_t vars) {
    PsPlan plan;
    plan.consistency = mode;
    plan.num_workers = workers;
    plan.num_shards = shards;
    for (uint32_t v = 0; v < vars; ++v) {
      VariableSpec s;
      s.id = v;
      s.name = "t" + std::to_string(v);
      s.rows = 300;
      s.dim = 4 + v;
      s.partitions = 3;
      s.optimizer.type = OptimizerType::kAdagrad;
      s.optimizer.lr = 0.05f;
      s.optimizer.initial_accumulator = 0.1f;
      for (uint32_t p = 0; p < s.partitions; ++p) s.partition_shards.push_back((p + v) % shards);
      plan.variables.push_back(s);
    }
    return plan;
  }

  std::vector<std::string> StartShards(const PsPlan& plan) {
    return testing::StartShardServers(plan, &servers_);
  }

  static std::unique_ptr<PsClient> Client(const PsPlan& plan, std::vector<std::string> endpoints,
                                          uint32_t worker, size_t max_batch_bytes = 64 << 20,
                                          bool shm = false) {
    return testing::ConnectClient(plan, std::move(endpoints), worker, [&](PsClientOptions* o) {
      o->max_batch_bytes = max_batch_bytes;
      o->shared_memory = shm;
    });
  }

  // Step `step` of worker `w`: ids (with repeats) and gradients per variable.
  static void StepData(const PsPlan& plan, uint32_t w, int step, std::vector<std::vector<int64_t>>* ids,
                       std::vector<std::vector<float>>* grads) {
    std::mt19937 rng(w * 7919 + step * 31);
    ids->assign(plan.variables.size(), {});
    grads->assign(plan.variables.size(), {});
    for (size_t v = 0; v < plan.variables.size(); ++v) {
      const auto& spec = plan.variables[v];
      for (int k = 0; k < 20; ++k) (*ids)[v].push_back(rng() % 60);
      for (size_t k = 0; k < (*ids)[v].size() * spec.dim; ++k)
        (*grads)[v].push_back((rng() % 2001) / 1000.0f - 1.0f);
    }
  }

  // Trains `steps` sync steps with `workers` worker threads, each step a
  // push-pull of every variable: batched or one call per variable. Returns
  // every worker's rows of the last step, and the shards' STATS.
  std::pair<std::vector<std::vector<std::vector<float>>>, std::vector<nlohmann::json>> Train(
      const PsPlan& plan, bool batch, int steps, size_t max_batch_bytes = 64 << 20,
      bool shm = false) {
    const auto endpoints = StartShards(plan);
    std::vector<std::vector<std::vector<float>>> last(plan.num_workers);
    std::vector<std::thread> threads;
    for (uint32_t w = 0; w < plan.num_workers; ++w) {
      threads.emplace_back([&, w] {
        auto c = Client(plan, endpoints, w, max_batch_bytes, shm);
        ASSERT_TRUE(c);
        std::vector<std::vector<int64_t>> ids;
        std::vector<std::vector<float>> grads;
        std::vector<std::vector<float>> rows(plan.variables.size());
        for (int step = 0; step < steps; ++step) {
          StepData(plan, w, step, &ids, &grads);
          std::vector<Ticket> tickets;
          if (batch) {
            std::vector<BatchCall> calls;
            for (size_t v = 0; v < ids.size(); ++v)
              calls.push_back({BatchCall::Kind::kPushPull, static_cast<uint32_t>(v), ids[v], grads[v], &rows[v]});
            auto t = c->Batch(calls, step);
            ASSERT_TRUE(t.ok()) << t.status().ToString();
            tickets = *t;
          } else {
            for (size_t v = 0; v < ids.size(); ++v) {
              auto t = c->PushPull(static_cast<uint32_t>(v), ids[v], grads[v], step, &rows[v]);
              ASSERT_TRUE(t.ok()) << t.status().ToString();
              tickets.push_back(*t);
            }
          }
          for (Ticket t : tickets) {
            Status s = c->Wait(t, DeadlineIn(kWaitMs));
            ASSERT_TRUE(s.ok()) << s.ToString();
          }
        }
        last[w] = rows;
      });
    }
    for (auto& t : threads) t.join();
    auto c = Client(plan, endpoints, 0);
    std::vector<std::string> texts;
    auto t = c->Stats(&texts);
    EXPECT_TRUE(t.ok() && c->Wait(*t, DeadlineIn(kWaitMs)).ok());
    std::vector<nlohmann::json> stats;
    for (const auto& s : texts) stats.push_back(nlohmann::json::parse(s));
    servers_.clear();
    return {last, stats};
  }

  std::vector<std::unique_ptr<ShardServer>> servers_;
};

TEST_F(BatchClientTest, BatchedSyncTrainingEqualsOneCallPerVariableAndSendsOneRequestPerShard) {
  const PsPlan plan = Plan(Consistency::kSync, 2, 2, 4);
  constexpr int kSteps = 6;
  auto [separate, separate_stats] = Train(plan, /*batch=*/false, kSteps);
  auto [batched, batched_stats] = Train(plan, /*batch=*/true, kSteps);
  ASSERT_EQ(batched.size(), 2u);
  for (uint32_t w = 0; w < 2; ++w) {
    ASSERT_EQ(batched[w].size(), plan.variables.size());
    for (size_t v = 0; v < plan.variables.size(); ++v) {
      ASSERT_FALSE(batched[w][v].empty());
      EXPECT_EQ(batched[w][v], separate[w][v]) << "worker " << w << " variable " << v;
    }
  }
  // 4 variables × 3 partitions, 12 parts per worker-step over 2 shards:
  // one request per shard per worker-step batched, 6 per shard one call
  // per variable.
  for (size_t s = 0; s < 2; ++s) {
    EXPECT_EQ(batched_stats[s].at("requests"), 2 * kSteps) << batched_stats[s].dump();
    EXPECT_EQ(batched_stats[s].at("batches"), 2 * kSteps);
    EXPECT_EQ(batched_stats[s].at("push_pulls"), separate_stats[s].at("push_pulls"));
    EXPECT_EQ(separate_stats[s].at("requests"), 2 * kSteps * 6);
  }
}

TEST_F(BatchClientTest, ABatchOverTheSizeLimitGoesAsSeveralAndTrainsTheSame) {
  const PsPlan plan = Plan(Consistency::kSync, 2, 1, 3);
  constexpr int kSteps = 4;
  auto [whole, whole_stats] = Train(plan, /*batch=*/true, kSteps);
  // About two parts' worth: the 9 parts per worker-step go as several batches.
  auto [split, split_stats] = Train(plan, /*batch=*/true, kSteps, /*max_batch_bytes=*/600);
  for (uint32_t w = 0; w < 2; ++w) EXPECT_EQ(split[w], whole[w]);
  EXPECT_EQ(whole_stats[0].at("batches"), 2 * kSteps);
  EXPECT_GT(split_stats[0].at("requests"), 2 * 2 * kSteps) << split_stats[0].dump();
}

TEST_F(BatchClientTest, SharedMemoryBatchesTrainTheSame) {
  const PsPlan plan = Plan(Consistency::kSync, 2, 2, 3);
  constexpr int kSteps = 4;
  auto [inline_rows, inline_stats] = Train(plan, /*batch=*/true, kSteps);
  auto [shm_rows, shm_stats] = Train(plan, /*batch=*/true, kSteps, 64 << 20, /*shm=*/true);
  for (uint32_t w = 0; w < 2; ++w) EXPECT_EQ(shm_rows[w], inline_rows[w]);
  EXPECT_EQ(shm_stats[0].at("shm_regions"), 2) << shm_stats[0].dump();  // the 2 workers'
}

TEST_F(BatchClientTest, ABadCallSendsNothingAndARefusedBatchFailsEveryCallOnThatShard) {
  const PsPlan plan = Plan(Consistency::kAsync, 1, 1, 2);
  const auto endpoints = StartShards(plan);
  auto c = Client(plan, endpoints, 0);
  ASSERT_TRUE(c);
  std::vector<int64_t> good = {1, 2}, bad = {1, 500};
  std::vector<float> g0(2 * 4, 1.0f), g1(2 * 5, 1.0f), rows0, rows1;
  // Checked on the client: nothing is sent.
  auto t = c->Batch(std::vector<BatchCall>{{BatchCall::Kind::kPushPull, 0, good, g0, &rows0},
                                           {BatchCall::Kind::kPushPull, 1, bad, g1, &rows1}},
                    0);
  ASSERT_FALSE(t.ok());
  EXPECT_NE(t.status().message().find("batch call 1"), std::string::npos) << t.status().ToString();
  // Refused by the shard (a NaN gradient): both calls fail, nothing applied.
  g1[3] = std::nanf("");
  t = c->Batch(std::vector<BatchCall>{{BatchCall::Kind::kPushPull, 0, good, g0, &rows0},
                                      {BatchCall::Kind::kPushPull, 1, good, g1, &rows1}},
               0);
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  for (Ticket k : *t) {
    Status s = c->Wait(k, DeadlineIn(kWaitMs));
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.ToString();
    EXPECT_NE(s.message().find("NON_FINITE"), std::string::npos) << s.ToString();
  }
  std::vector<float> rows;
  auto p = c->Pull(0, good, 0, &rows);
  ASSERT_TRUE(p.ok());
  ASSERT_TRUE(c->Wait(*p, DeadlineIn(kWaitMs)).ok());
  std::vector<float> init(rows.size());
  for (size_t i = 0; i < good.size(); ++i)
    InitializeRow(plan.variables[0].init, 0, good[i], 4, init.data() + i * 4);
  EXPECT_EQ(rows, init);
}

// A shard of a build before batches: it takes 3 frames, answers anything else
// BAD_FRAMES with the header of frame 0 echoed (as version 1 did). The
// worker fails every call of the batch saying so, instead of waiting.
TEST(BatchOldShardTest, AShardThatSpeaksOnlyVersion1RefusesABatchByName) {
  zmq::context_t ctx(1);
  zmq::socket_t router(ctx, zmq::socket_type::router);
  router.set(zmq::sockopt::linger, 0);
  router.bind("tcp://127.0.0.1:*");
  const std::string endpoint = router.get(zmq::sockopt::last_endpoint);
  std::thread old_shard([&] {
    std::vector<zmq::message_t> msgs;
    if (!zmq::recv_multipart(router, std::back_inserter(msgs))) return;
    Header h = ps_wire::ReadHeader(msgs[1].data());  // frame 0 after the identity: 64 bytes
    Header r;
    r.op = static_cast<uint8_t>(Op::kError);
    r.flags = ps_wire::kFlagReply;
    r.error_code = static_cast<uint16_t>(ErrorCode::kBadFrames);
    r.request_id = h.request_id;
    r.partition = h.partition;
    std::string header(ps_wire::kHeaderSize, '\0');
    ps_wire::WriteHeader(r, header.data());
    const std::string text = "expected 3 frames (header, ids, values), got " +
                             std::to_string(msgs.size() - 1);
    std::array<zmq::const_buffer, 4> reply = {zmq::buffer(msgs[0].data(), msgs[0].size()),
                                              zmq::buffer(header), zmq::buffer(text),
                                              zmq::const_buffer(nullptr, 0)};
    zmq::send_multipart(router, reply);
  });
  PsPlan plan = TwoVariables(Consistency::kAsync, 1);
  PsClientOptions o;
  o.plan = plan;
  o.shard_endpoints = {endpoint};
  auto c = PsClient::Create(o);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  std::vector<int64_t> ids = {1};
  std::vector<float> a, b;
  auto t = (*c)->Batch(std::vector<BatchCall>{{BatchCall::Kind::kPull, 0, ids, {}, &a},
                                              {BatchCall::Kind::kPull, 1, ids, {}, &b}},
                       0);
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  for (Ticket k : *t) {
    Status s = (*c)->Wait(k, DeadlineIn(kWaitMs));
    EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition) << s.ToString();
    EXPECT_NE(s.message().find("BAD_FRAMES"), std::string::npos) << s.ToString();
    EXPECT_NE(s.message().find("speaks only version 1"), std::string::npos) << s.ToString();
  }
  old_shard.join();
}

}  // namespace
}  // namespace parallax::ps
