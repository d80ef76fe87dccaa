// Row versions (schemas/ps_wire.md, "Row versions"): a PULL with the
// ROW_VERSIONS flag names the version of each row the worker holds, and the
// shard sends a row only when the worker holds none or its copy is more than
// the request's bound of pushes behind. What the row cache's
// cache_rule = "version" stands on: a copy a worker may keep reading never
// misses more than the bound of its shard's updates.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <cstring>
#include <random>
#include <utility>
#include <vector>

#include "core/ps/client.h"
#include "ps/shard_server.h"
#include "tests/ps/ps_test_util.h"

namespace parallax::ps {
namespace {

using testing::ExpectOneErrorReply;
using testing::Frames;
using testing::MakeHeader;
using testing::ReplyHeader;
using testing::Request;
using testing::Send;

constexpr int64_t kWaitMs = 10'000;
constexpr uint32_t kDim = 3;

// One Adagrad table of 40 rows of 3 in two partitions (ids < 20: partition
// 0), both on shard 0; async.
PsPlan Plan(uint32_t workers = 2) {
  PsPlan plan = testing::OnePartitionPlan(Consistency::kAsync, OptimizerType::kAdagrad, 40, kDim,
                                          workers, /*seed=*/11);
  plan.variables[0].partitions = 2;
  plan.variables[0].scheme = PartitionScheme::kRange;
  plan.variables[0].partition_shards = {0, 0};
  return plan;
}

Status Done(PsClient* c, StatusOr<Ticket> t) {
  if (!t.ok()) return t.status();
  return c->Wait(*t, DeadlineIn(kWaitMs));
}

std::vector<float> Pull(PsClient* c, const std::vector<int64_t>& ids) {
  std::vector<float> rows;
  Status s = Done(c, c->Pull(0, ids, 0, &rows));
  EXPECT_TRUE(s.ok()) << s.ToString();
  return rows;
}

void PushTimes(PsClient* c, int64_t id, int times) {
  for (int k = 0; k < times; ++k) {
    const std::vector<float> g = {0.5f, -0.25f, 1.0f};
    Status s = Done(c, c->Push(0, std::vector<int64_t>{id}, g, k));
    ASSERT_TRUE(s.ok()) << s.ToString();
  }
}

// A ROW_VERSIONS pull of `ids` (of variable 0, partition 0) holding `held`,
// straight to a shard core: each id's version in the reply (kRowFresh: not
// sent) and the rows sent.
std::pair<std::vector<uint32_t>, uint32_t> CheckedPull(ShardCore* core, const std::vector<int64_t>& ids,
                                                       const std::vector<uint32_t>& held,
                                                       int64_t bound) {
  Header h = MakeHeader(Op::kPull, 0, 0, 0, static_cast<uint32_t>(ids.size()), kDim, 0);
  h.flags = ps_wire::kFlagRowVersions;
  h.version_seen = bound;
  Frames f = Request(h, ids, {});
  f.f[2].assign(reinterpret_cast<const char*>(held.data()), held.size() * 4);
  auto out = Send(core, f);
  EXPECT_EQ(out.size(), 1u);
  if (out.size() != 1) return {};
  EXPECT_EQ(ReplyHeader(out[0]).op, static_cast<uint8_t>(Op::kPull)) << out[0].frames[1];
  std::vector<uint32_t> v(ids.size());
  if (out[0].frames[1].size() == v.size() * 4) std::memcpy(v.data(), out[0].frames[1].data(), v.size() * 4);
  return {v, ReplyHeader(out[0]).worker};
}

class RowVersionsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    endpoints_ = testing::StartShardServers(plan_, &servers_);
    ASSERT_EQ(endpoints_.size(), 1u);
    reader_ = testing::ConnectClient(plan_, endpoints_, 0);
    writer_ = testing::ConnectClient(plan_, endpoints_, 1);
    ASSERT_TRUE(reader_ && writer_);
  }

  PsPlan plan_ = Plan();
  std::vector<std::unique_ptr<ShardServer>> servers_;
  std::vector<std::string> endpoints_;
  std::unique_ptr<PsClient> reader_, writer_;
};

// The shard holds the updates a row took; over random rounds a copy comes
// back as "fresh" exactly when it misses at most `bound` of them, and a row
// sent equals what a plain pull reads. Checked alone and in a batch (wire
// version 2) beside a plain pull.
TEST_F(RowVersionsTest, ACopyIsFreshExactlyWhileItMissesAtMostTheBoundsUpdates) {
  constexpr int64_t kBound = 2;
  const std::vector<int64_t> ids = {3, 25, 7, 30};  // both partitions
  std::vector<uint32_t> held(ids.size(), ps_wire::kNotHeld);
  std::vector<uint32_t> versions;
  std::vector<float> rows;
  RowVersionCheck check{held, kBound, &versions};
  ASSERT_TRUE(Done(reader_.get(), reader_->PullChecked(0, ids, check, 0, &rows)).ok());
  ASSERT_EQ(versions.size(), ids.size());
  for (uint32_t v : versions) EXPECT_NE(v, ps_wire::kRowFresh) << "nothing held: every row is sent";
  EXPECT_EQ(rows, Pull(reader_.get(), ids));
  held = versions;

  std::mt19937 rng(5);
  std::vector<int> missed(ids.size(), 0);  // updates since the copy the reader holds
  int64_t fresh = 0;
  for (int round = 0; round < 12; ++round) {
    // Every row takes 0..4 updates from the other worker since the copy.
    std::vector<int> pushes(ids.size());
    for (size_t i = 0; i < ids.size(); ++i) {
      pushes[i] = static_cast<int>(rng() % 5);
      PushTimes(writer_.get(), ids[i], pushes[i]);
    }
    const bool batched = round % 2 == 1;
    std::vector<float> got(ids.size() * kDim, -7.0f);
    std::vector<uint32_t> now;
    RowVersionCheck c{held, kBound, &now};
    if (batched) {
      std::vector<float> plain;
      const std::vector<int64_t> other = {12};
      std::vector<BatchCall> calls = {{BatchCall::Kind::kPull, 0, ids, {}, &got, &c},
                                      {BatchCall::Kind::kPull, 0, other, {}, &plain}};
      auto t = reader_->Batch(calls, 0);
      ASSERT_TRUE(t.ok()) << t.status().ToString();
      for (Ticket tk : *t) ASSERT_TRUE(reader_->Wait(tk, DeadlineIn(kWaitMs)).ok());
      EXPECT_EQ(plain, Pull(reader_.get(), other));
    } else {
      ASSERT_TRUE(Done(reader_.get(), reader_->PullChecked(0, ids, c, 0, &got)).ok());
    }
    const std::vector<float> truth = Pull(reader_.get(), ids);
    for (size_t i = 0; i < ids.size(); ++i) {
      missed[i] += pushes[i];
      const std::vector<float> row(got.begin() + i * kDim, got.begin() + (i + 1) * kDim);
      const std::vector<float> want(truth.begin() + i * kDim, truth.begin() + (i + 1) * kDim);
      if (missed[i] <= kBound) {
        EXPECT_EQ(now[i], ps_wire::kRowFresh) << "round " << round << " id " << ids[i] << " missed "
                                              << missed[i];
        EXPECT_EQ(row, std::vector<float>(kDim, -7.0f)) << "a fresh row is not sent";
        ++fresh;
      } else {
        EXPECT_EQ(now[i], held[i] + static_cast<uint32_t>(missed[i]))
            << "round " << round << " id " << ids[i];
        EXPECT_EQ(row, want) << "a row sent is the shard's row now";
        held[i] = now[i];  // the reader's copy is the new one
        missed[i] = 0;
      }
    }
  }
  // The shard counts the rows it did not send.
  std::vector<std::string> stats;
  ASSERT_TRUE(Done(reader_.get(), reader_->Stats(&stats)).ok());
  EXPECT_GT(fresh, 0);
  EXPECT_EQ(nlohmann::json::parse(stats[0])["rows_fresh"].get<int64_t>(), fresh);
}

// Everything the flag allows checked before anything happens; a refused
// request changes nothing and names what is wrong.
TEST(RowVersionsRefusalTest, BadRowVersionMessagesAreRefusedByName) {
  const PsPlan plan = Plan(1);
  auto core = testing::MakeShard(plan);
  auto versioned = [](Op op, std::vector<int64_t> ids, size_t version_bytes, uint16_t more = 0) {
    Header h = MakeHeader(op, 0, 0, 0, static_cast<uint32_t>(ids.size()), kDim, 0);
    h.flags = ps_wire::kFlagRowVersions | more;
    h.version_seen = 2;
    Frames f = Request(h, ids, {});
    f.f[2].assign(version_bytes, '\xff');
    return f;
  };
  // Not on a push.
  auto out = Send(core.get(), versioned(Op::kPush, {1}, 4));
  ExpectOneErrorReply(out, ErrorCode::kBadFlags);
  EXPECT_NE(out[0].frames[1].find("ROW_VERSIONS flag is for PULL"), std::string::npos) << out[0].frames[1];
  // Not with shared memory.
  out = Send(core.get(), versioned(Op::kPull, {1}, 4, ps_wire::kFlagShm));
  ExpectOneErrorReply(out, ErrorCode::kBadFlags);
  // The versions held must be 4 bytes a row.
  out = Send(core.get(), versioned(Op::kPull, {1, 2}, 4));
  ExpectOneErrorReply(out, ErrorCode::kBadCount);
  // A well-formed one is answered: nothing held, both rows sent.
  out = Send(core.get(), versioned(Op::kPull, {1, 2}, 8));
  ASSERT_EQ(out.size(), 1u);
  const Header h = ReplyHeader(out[0]);
  ASSERT_EQ(h.op, static_cast<uint8_t>(Op::kPull)) << out[0].frames[1];
  EXPECT_TRUE(h.flags & ps_wire::kFlagRowVersions);
  EXPECT_EQ(h.count, 2u);
  EXPECT_EQ(h.worker, 2u);  // rows sent
  EXPECT_EQ(out[0].frames[1].size(), 8u);
  EXPECT_EQ(out[0].values.size(), 2u * kDim * 4);
}

// A dynamic table's versions: an id that is not a row is at the base; a
// row admitted starts at a number of its own, so the copy of the
// initializer's values a worker read before is not fresh, and every update
// advances it; a row evicted and admitted again starts over elsewhere, so a
// copy of the old row is not fresh either.
TEST(RowVersionsDynamicTest, AdmittedRowsCountUpdatesAndAnEvictedRowStartsOver) {
  PsPlan plan = testing::OnePartitionPlan(Consistency::kAsync, OptimizerType::kSgd, 0, kDim);
  DynamicTableSettings budget;
  budget.max_rows = 1;
  plan.variables[0].dynamic = budget;
  ASSERT_TRUE(ValidatePsPlan(&plan).ok());
  auto core = testing::MakeShard(plan);
  auto pull = [&](std::vector<int64_t> ids, std::vector<uint32_t> held, int64_t bound) {
    return CheckedPull(core.get(), ids, held, bound);
  };
  auto push = [&](int64_t id, int64_t clock) {
    auto out = Send(core.get(), Request(MakeHeader(Op::kPush, 0, 0, 0, 1, kDim, clock), {id},
                                        std::vector<float>(kDim, 1.0f)));
    ASSERT_EQ(ReplyHeader(out[0]).op, static_cast<uint8_t>(Op::kPush)) << out[0].frames[1];
  };
  const uint32_t none = ps_wire::kNotHeld, fresh = ps_wire::kRowFresh;
  auto [first, sent] = pull({5, 6}, {none, none}, 0);
  EXPECT_EQ(sent, 2u);
  const uint32_t base = first[0];
  EXPECT_EQ(first[1], base) << "ids that are not rows are at the base";
  EXPECT_EQ(pull({5, 6}, {base, base}, 0).first, (std::vector<uint32_t>{fresh, fresh}));
  push(5, 0);  // admitted, and updated once
  auto [after, sent2] = pull({5, 6}, {base, base}, 100);
  EXPECT_NE(after[0], fresh) << "a new row is not the initializer's values the copy holds";
  EXPECT_EQ(after[1], fresh);
  EXPECT_EQ(sent2, 1u);
  const uint32_t row5 = after[0];
  push(5, 1);
  EXPECT_EQ(pull({5}, {row5}, 1).first, (std::vector<uint32_t>{fresh}));
  EXPECT_EQ(pull({5}, {row5}, 0).first, (std::vector<uint32_t>{row5 + 1}));
  push(7, 2);  // the budget is one row: 5 goes
  push(5, 3);  // and comes back, from the initializer, updated once
  auto [back, sent3] = pull({5}, {row5 + 1}, 100);
  EXPECT_NE(back[0], fresh) << "a copy of the evicted row is not fresh";
  EXPECT_EQ(sent3, 1u);
}

// A shard's next process (a recovered generation, its rows from a
// checkpoint) draws its versions anew: a version the one before handed out
// names nothing there, and the rows are sent.
TEST(RowVersionsGenerationTest, AVersionFromAnotherShardProcessIsNotFresh) {
  const PsPlan plan = Plan(1);
  auto pull = [](ShardCore* core, const std::vector<int64_t>& ids, const std::vector<uint32_t>& held) {
    return CheckedPull(core, ids, held, 1000).first;
  };
  auto first = testing::MakeShard(plan);
  const std::vector<int64_t> ids = {1, 2, 3, 4, 5, 6, 7, 8};
  const std::vector<uint32_t> held = pull(first.get(), ids, std::vector<uint32_t>(8, ps_wire::kNotHeld));
  EXPECT_EQ(pull(first.get(), ids, held), std::vector<uint32_t>(8, ps_wire::kRowFresh));
  auto next = testing::MakeShard(plan);
  for (uint32_t v : pull(next.get(), ids, held)) EXPECT_NE(v, ps_wire::kRowFresh);
}

// Under ssp a pull can wait for the slowest worker: a checked one keeps the
// versions it holds until it is answered.
TEST(RowVersionsSspTest, AHeldPullKeepsTheVersionsItHoldsUntilItIsAnswered) {
  PsPlan plan = Plan(2);
  plan.consistency = Consistency::kSsp;
  plan.staleness = 0;
  auto core = testing::MakeShard(plan);
  const std::vector<int64_t> ids = {3, 4};
  const auto [held, sent] = CheckedPull(core.get(), ids, {ps_wire::kNotHeld, ps_wire::kNotHeld}, 5);
  ASSERT_EQ(sent, 2u);
  // Worker 0's pull for step 1 waits until worker 1 finished step 0 too.
  EXPECT_FALSE(Send(core.get(), Request(MakeHeader(Op::kClock, 0, 0, 0, 0, 0, 0), {}, {})).empty());
  Header h = MakeHeader(Op::kPull, 0, 0, 0, 2, kDim, /*clock=*/1, /*request_id=*/9);
  h.flags = ps_wire::kFlagRowVersions;
  h.version_seen = 5;
  Frames f = Request(h, ids, {});
  f.f[2].assign(reinterpret_cast<const char*>(held.data()), held.size() * 4);
  EXPECT_TRUE(Send(core.get(), f).empty());
  auto out = Send(core.get(), Request(MakeHeader(Op::kClock, 0, 0, 1, 0, 0, 0), {}, {}));
  bool answered = false;
  for (const OutMessage& m : out) {
    const Header r = ReplyHeader(m);
    if (r.request_id != 9) continue;
    answered = true;
    ASSERT_EQ(r.op, static_cast<uint8_t>(Op::kPull)) << m.frames[1];
    EXPECT_TRUE(r.flags & ps_wire::kFlagRowVersions);
    EXPECT_EQ(r.worker, 0u) << "both copies are fresh";
    ASSERT_EQ(m.frames[1].size(), 8u);
    std::vector<uint32_t> v(2);
    std::memcpy(v.data(), m.frames[1].data(), 8);
    EXPECT_EQ(v, std::vector<uint32_t>(2, ps_wire::kRowFresh));
  }
  EXPECT_TRUE(answered);
}

// The client refuses what the shard could not answer, before sending.
TEST_F(RowVersionsTest, TheClientRefusesChecksItCannotMake) {
  std::vector<uint32_t> versions;
  std::vector<float> rows;
  const std::vector<uint32_t> one = {ps_wire::kNotHeld};
  const std::vector<uint32_t> two = {ps_wire::kNotHeld, ps_wire::kNotHeld};
  auto repeated = reader_->PullChecked(0, std::vector<int64_t>{4, 4}, RowVersionCheck{two, 1, &versions}, 0, &rows);
  EXPECT_EQ(repeated.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(repeated.status().message().find("repeated ids"), std::string::npos);
  auto short_held = reader_->PullChecked(0, std::vector<int64_t>{4, 5}, RowVersionCheck{one, 1, &versions}, 0, &rows);
  EXPECT_EQ(short_held.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(short_held.status().message().find("1 versions held for 2 ids"), std::string::npos);
  auto no_out = reader_->PullChecked(0, std::vector<int64_t>{4}, RowVersionCheck{one, 1, nullptr}, 0, &rows);
  EXPECT_EQ(no_out.status().code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace parallax::ps
