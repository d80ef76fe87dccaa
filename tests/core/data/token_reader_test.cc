#include "core/data/token_reader.h"

#include <gtest/gtest.h>

#include <numeric>
#include <set>

#include "core/data/token_file.h"
#include "tests/testing/temp_dir.h"

namespace parallax::data {
namespace {

// Token i of the test corpus is i, so an example is identified by its target.
std::vector<uint32_t> Iota(size_t n) {
  std::vector<uint32_t> v(n);
  std::iota(v.begin(), v.end(), 0u);
  return v;
}

std::unique_ptr<TokenReader> Make(size_t tokens, TokenReaderOptions options) {
  auto reader = TokenReader::FromTokens(Iota(tokens), options);
  EXPECT_TRUE(reader.ok()) << reader.status().ToString();
  return std::move(reader).value();
}

class TokenReaderTest : public ::testing::Test {
 protected:
  parallax::testing::TempDir dir_;
};

TEST_F(TokenReaderTest, ContextPrecedesTargetOldestFirst) {
  TokenReaderOptions o;
  o.context = 3;
  o.shuffle = false;
  auto r = Make(10, o);
  EXPECT_EQ(r->examples_per_epoch(), 7u);
  TokenBatch b;
  r->Next(2, &b);
  EXPECT_EQ(b.targets, (std::vector<uint32_t>{3, 4}));
  EXPECT_EQ(b.context, (std::vector<uint32_t>{0, 1, 2, 1, 2, 3}));
}

TEST_F(TokenReaderTest, EpochIsAPermutationAndWraps) {
  TokenReaderOptions o;
  o.context = 2;
  o.seed = 5;
  auto r = Make(102, o);  // 100 examples: targets 2..101
  TokenBatch b;
  std::multiset<uint32_t> seen;
  for (int i = 0; i < 10; ++i) {
    EXPECT_EQ(r->epoch(), 0);
    r->Next(10, &b);
    for (size_t j = 0; j < b.targets.size(); ++j) {
      seen.insert(b.targets[j]);
      EXPECT_EQ(b.context[2 * j + 1] + 1, b.targets[j]);
    }
  }
  EXPECT_EQ(seen.size(), 100u);
  EXPECT_EQ(std::set<uint32_t>(seen.begin(), seen.end()).size(), 100u);
  EXPECT_EQ(*seen.begin(), 2u);
  EXPECT_EQ(*seen.rbegin(), 101u);
  EXPECT_EQ(r->epoch(), 1);
  // Epoch 1 is another permutation of the same examples.
  std::vector<uint32_t> epoch0(seen.begin(), seen.end());
  TokenBatch c;
  r->Next(100, &c);
  EXPECT_EQ(std::multiset<uint32_t>(c.targets.begin(), c.targets.end()),
            std::multiset<uint32_t>(epoch0.begin(), epoch0.end()));
  EXPECT_EQ(r->epoch(), 2);
}

TEST_F(TokenReaderTest, BatchCrossingAnEpochBoundaryWraps) {
  TokenReaderOptions o;
  o.context = 1;
  o.shuffle = false;
  auto r = Make(6, o);  // 5 examples
  TokenBatch b;
  r->Next(7, &b);
  EXPECT_EQ(b.targets, (std::vector<uint32_t>{1, 2, 3, 4, 5, 1, 2}));
  EXPECT_EQ(r->epoch(), 1);
}

TEST_F(TokenReaderTest, DeterministicForASeedDifferentAcrossSeeds) {
  TokenReaderOptions o;
  o.seed = 42;
  auto a = Make(1000, o), b = Make(1000, o);
  o.seed = 43;
  auto c = Make(1000, o);
  TokenBatch ba, bb, bc;
  a->Next(64, &ba);
  b->Next(64, &bb);
  c->Next(64, &bc);
  EXPECT_EQ(ba.targets, bb.targets);
  EXPECT_EQ(ba.context, bb.context);
  EXPECT_NE(ba.targets, bc.targets);
  // Shuffled: not the file order.
  std::vector<uint32_t> in_order(64);
  std::iota(in_order.begin(), in_order.end(), 4u);
  EXPECT_NE(ba.targets, in_order);
}

// The sync-mode equivalence: for every step, the union of N shards' batches
// of B is the 1-shard batch of N*B, row j of shard s being row j*N + s.
TEST_F(TokenReaderTest, ShardsInterleaveIntoTheOneShardBatch) {
  constexpr int kShards = 3;
  constexpr size_t kBatch = 7;
  TokenReaderOptions o;
  o.seed = 9;
  o.context = 2;
  auto whole = Make(50, o);  // 48 examples: several epochs over the steps below
  std::vector<std::unique_ptr<TokenReader>> shards;
  for (int s = 0; s < kShards; ++s) {
    TokenReaderOptions so = o;
    so.shard = s;
    so.num_shards = kShards;
    shards.push_back(Make(50, so));
  }
  TokenBatch w, part;
  for (int step = 0; step < 12; ++step) {
    whole->Next(kShards * kBatch, &w);
    for (int s = 0; s < kShards; ++s) {
      shards[s]->Next(kBatch, &part);
      for (size_t j = 0; j < kBatch; ++j) {
        ASSERT_EQ(part.targets[j], w.targets[j * kShards + s]) << "step " << step;
        ASSERT_EQ(part.context[2 * j], w.context[2 * (j * kShards + s)]);
      }
    }
  }
  // Within an epoch, shards are disjoint: 16 steps of 3 x 1 cover 48 examples once.
  std::set<uint32_t> union_targets;
  for (int s = 0; s < kShards; ++s) {
    TokenReaderOptions so = o;
    so.shard = s;
    so.num_shards = kShards;
    auto r = Make(50, so);
    r->Next(16, &part);
    for (uint32_t t : part.targets) EXPECT_TRUE(union_targets.insert(t).second) << t;
  }
  EXPECT_EQ(union_targets.size(), 48u);
}

TEST_F(TokenReaderTest, RestorePositionResumesExactly) {
  TokenReaderOptions o;
  o.seed = 3;
  o.shard = 1;
  o.num_shards = 2;
  auto a = Make(300, o);
  TokenBatch b;
  for (int i = 0; i < 40; ++i) a->Next(5, &b);  // past the first epoch
  const std::string position = a->SavePosition();
  std::vector<TokenBatch> expected(5);
  for (TokenBatch& e : expected) a->Next(13, &e);

  auto resumed = Make(300, o);
  ASSERT_TRUE(resumed->RestorePosition(position).ok());
  EXPECT_EQ(resumed->epoch(), 1);
  for (const TokenBatch& e : expected) {
    resumed->Next(13, &b);
    EXPECT_EQ(b.targets, e.targets);
    EXPECT_EQ(b.context, e.context);
  }
}

TEST_F(TokenReaderTest, ForeignOrCorruptPositionsAreRejected) {
  TokenReaderOptions o;
  o.seed = 3;
  auto a = Make(300, o);
  TokenBatch b;
  a->Next(17, &b);
  const std::string position = a->SavePosition();
  auto expect_rejected = [&](std::string_view bytes, const std::string& what) {
    auto r = Make(300, o);
    Status s = r->RestorePosition(bytes);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << what;
    EXPECT_EQ(r->epoch(), 0) << what;
    TokenBatch first, fresh;
    r->Next(1, &first);
    Make(300, o)->Next(1, &fresh);
    EXPECT_EQ(first.targets, fresh.targets) << what << ": position changed after an error";
  };
  expect_rejected("", "empty");
  expect_rejected("garbage bytes that are not a position at all", "garbage");
  std::string flipped = position;
  flipped[50] ^= 1;
  expect_rejected(flipped, "flipped bit");
  expect_rejected(position.substr(0, position.size() - 1), "truncated");

  // Other readers' positions: another seed, another shard layout, another file.
  TokenReaderOptions other = o;
  other.seed = 4;
  expect_rejected(Make(300, other)->SavePosition(), "other seed");
  // Another shard of the same count is refused (another count is converted:
  // ReshardedPositionSkipsNothingTwice).
  TokenReaderOptions half = o;
  half.num_shards = 2;
  half.shard = 1;
  TokenReaderOptions other_half = half;
  other_half.shard = 0;
  EXPECT_EQ(Make(300, other_half)->RestorePosition(Make(300, half)->SavePosition()).code(),
            StatusCode::kInvalidArgument);
  other = o;
  other.context = 5;
  expect_rejected(Make(300, other)->SavePosition(), "other context");
  expect_rejected(Make(301, o)->SavePosition(), "other file");
  auto shifted = TokenReader::FromTokens(std::vector<uint32_t>(300, 7), o);
  ASSERT_TRUE(shifted.ok());
  expect_rejected((*shifted)->SavePosition(), "same length, other contents");
}

// 4 shards consumed 3 batches of 5 (60 stream items); 3 shards resume from
// any one of their positions at ceil(60 / 3) = 20 each: together they go on
// at stream item 60, none repeated; with 7 shards at ceil(60 / 7) = 9, the
// 3 items 60..62 are skipped.
TEST_F(TokenReaderTest, ReshardedPositionSkipsNothingTwice) {
  TokenReaderOptions o;
  o.seed = 5;
  o.shuffle = false;  // stream item i is example i: target context + i
  o.context = 2;
  o.num_shards = 4;
  o.shard = 3;
  auto old = Make(400, o);
  TokenBatch b;
  for (int i = 0; i < 3; ++i) old->Next(5, &b);
  const std::string position = old->SavePosition();
  for (const auto& [shards, first] : {std::pair<int, uint32_t>{3, 60}, {7, 63}}) {
    std::set<uint32_t> next;
    for (int s = 0; s < shards; ++s) {
      TokenReaderOptions n = o;
      n.num_shards = shards;
      n.shard = s;
      auto r = Make(400, n);
      ASSERT_TRUE(r->RestorePosition(position).ok()) << shards << " shards";
      r->Next(1, &b);
      next.insert(b.targets[0] - o.context);
    }
    std::set<uint32_t> expected;
    for (int s = 0; s < shards; ++s) expected.insert(first + static_cast<uint32_t>(s));
    EXPECT_EQ(next, expected) << shards << " shards";
  }
}

TEST_F(TokenReaderTest, OpenReadsTokenFilesAndChecksOptions) {
  ASSERT_TRUE(WriteTokenFile(dir_.File("t.tok"), Iota(20)).ok());
  TokenReaderOptions o;
  o.shuffle = false;
  auto r = TokenReader::Open(dir_.File("t.tok"), o);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ((*r)->examples_per_epoch(), 16u);

  EXPECT_EQ(TokenReader::Open(dir_.File("none.tok"), o).status().code(), StatusCode::kNotFound);
  o.context = 20;
  auto short_file = TokenReader::Open(dir_.File("t.tok"), o);
  EXPECT_EQ(short_file.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(short_file.status().message().find("t.tok"), std::string::npos);
  o.context = 4;
  o.shard = 2;
  o.num_shards = 2;
  EXPECT_EQ(TokenReader::Open(dir_.File("t.tok"), o).status().code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace parallax::data
