// DynamicTable (core/ps/dynamic_table.h): rows keyed by any 64-bit id, the
// same values and updates as a fixed table's, admission after N
// contributions, eviction by TTL and by a row budget (LRU, sampled LFU),
// never a row of the step in progress, and a checkpoint that continues
// exactly.
#include "core/ps/dynamic_table.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <set>

#include "core/optim/optimizer.h"
#include "core/ps/initializer.h"

namespace parallax::ps {
namespace {

constexpr uint32_t kDim = 4;

DynamicTableOptions Options(OptimizerType type = OptimizerType::kSgd) {
  DynamicTableOptions o;
  o.var.id = 3;
  o.var.name = "emb";
  o.var.dim = kDim;
  o.var.optimizer.type = type;
  o.var.optimizer.lr = 0.1f;
  o.var.init.scale = 0.05f;
  o.var.init.seed = 11;
  o.sketch_width = 1 << 12;
  return o;
}

std::unique_ptr<DynamicTable> Make(const DynamicTableOptions& o) {
  auto t = DynamicTable::Create(o);
  EXPECT_TRUE(t.ok()) << t.status().ToString();
  return t.ok() ? std::move(t).value() : nullptr;
}

std::vector<float> Init(const DynamicTableOptions& o, uint64_t id) {
  std::vector<float> v(o.var.dim);
  InitializeRow(o.var.init, o.var.id, static_cast<int64_t>(id), o.var.dim, v.data());
  return v;
}

std::vector<float> ReadRow(DynamicTable& t, uint64_t id) {
  std::vector<float> v(t.dim());
  t.Read(id, v.data());
  return v;
}

// One push: every distinct id admitted (or its gradient dropped), then the
// same gradient g applied to each row.
void Push(DynamicTable& t, const std::vector<uint64_t>& ids, float g) {
  const std::vector<float> grad(t.dim(), g);
  for (uint64_t id : ids) {
    StatusOr<int64_t> slot = t.Admit(id);
    ASSERT_TRUE(slot.ok()) << slot.status().ToString();
    if (*slot == DynamicTable::kNotARow) {
      t.DropGradient();
    } else {
      t.Apply(*slot, grad.data());
    }
  }
}

// ReadAll (what a shard's pull uses) reads what Read does, id by id: rows,
// the initializer's values of ids that are not rows, zeros of a
// never-admitted id; and it counts the same.
TEST(DynamicTableTest, ReadAllReadsWhatReadDoes) {
  DynamicTableOptions o = Options();
  o.never_admit = {0};
  auto a = Make(o), b = Make(o);
  ASSERT_TRUE(a && b);
  for (DynamicTable* t : {a.get(), b.get()}) Push(*t, {5, ~uint64_t{0}, 1ull << 63}, 0.5f);
  const std::vector<uint64_t> ids = {5, 0, 77, ~uint64_t{0}, 1ull << 63, 5};
  std::vector<float> all(ids.size() * o.var.dim);
  a->ReadAll(ids.data(), ids.size(), all.data());
  for (size_t i = 0; i < ids.size(); ++i) {
    const std::vector<float> one = ReadRow(*b, ids[i]);
    EXPECT_EQ(std::vector<float>(all.begin() + i * o.var.dim, all.begin() + (i + 1) * o.var.dim),
              one)
        << ids[i];
  }
  EXPECT_EQ(a->stats().not_admitted_reads, b->stats().not_admitted_reads);
  EXPECT_EQ(a->stats().not_admitted_reads, 1);  // 77 (0 is never admitted: zeros, not counted)
}

TEST(DynamicTableTest, RowsStartFromTheFixedTablesInitializerAndUpdateTheSameWay) {
  for (OptimizerType type : {OptimizerType::kSgd, OptimizerType::kMomentum,
                             OptimizerType::kAdagrad, OptimizerType::kAdam}) {
    const DynamicTableOptions o = Options(type);
    auto t = Make(o);
    // A fixed table's row: the initializer, then ApplyUpdate with the
    // variable's optimizer and its state slots.
    std::vector<float> w = Init(o, 42), s1(kDim, optim::InitialStateValue(o.var.optimizer, 0)),
                       s2(kDim, optim::InitialStateValue(o.var.optimizer, 1));
    int64_t step = 0;
    const int slots = optim::StateSlots(type);
    EXPECT_EQ(ReadRow(*t, 42), w);  // not a row yet: the initializer's values
    for (int i = 0; i < 3; ++i) {
      const std::vector<float> g = {0.5f, -1.0f, 0.25f, 2.0f};
      StatusOr<int64_t> slot = t->Admit(42);
      ASSERT_TRUE(slot.ok());
      ASSERT_NE(*slot, DynamicTable::kNotARow);
      t->Apply(*slot, g.data());
      optim::ApplyUpdate(o.var.optimizer, o.var.optimizer.lr, kDim, g.data(), w.data(),
                         slots > 0 ? s1.data() : nullptr, slots > 1 ? s2.data() : nullptr,
                         type == OptimizerType::kAdam ? &step : nullptr);
    }
    EXPECT_EQ(ReadRow(*t, 42), w) << static_cast<int>(type);
  }
}

TEST(DynamicTableTest, AnyIdOfThe64BitRangeIsARow) {
  auto t = Make(Options());
  const std::vector<uint64_t> ids = {0, 1, UINT64_MAX, static_cast<uint64_t>(INT64_MIN),
                                     static_cast<uint64_t>(-12345), 0x8000000000000001ULL};
  Push(*t, ids, 1.0f);
  EXPECT_EQ(t->stats().rows, static_cast<int64_t>(ids.size()));
  std::vector<uint64_t> held = t->Ids();
  std::sort(held.begin(), held.end());
  std::vector<uint64_t> expected = ids;
  std::sort(expected.begin(), expected.end());
  EXPECT_EQ(held, expected);
  for (uint64_t id : ids) {
    std::vector<float> w = Init(Options(), id);
    for (float& x : w) x -= 0.1f;
    EXPECT_EQ(ReadRow(*t, id), w) << id;
  }
}

TEST(DynamicTableTest, AnIdBecomesARowOnlyAfterAdmitAfterContributions) {
  DynamicTableOptions o = Options();
  o.admit_after = 3;
  auto t = Make(o);
  Push(*t, {7}, 1.0f);
  Push(*t, {7}, 1.0f);
  EXPECT_EQ(t->Find(7), DynamicTable::kNotARow);
  EXPECT_EQ(ReadRow(*t, 7), Init(o, 7));  // read, not stored, gradients dropped
  Push(*t, {7}, 1.0f);
  ASSERT_NE(t->Find(7), DynamicTable::kNotARow);
  std::vector<float> w = Init(o, 7);
  for (float& x : w) x -= 0.1f;  // only the admitting contribution's gradient
  EXPECT_EQ(ReadRow(*t, 7), w);
  const DynamicTableStats s = t->stats();
  EXPECT_EQ(s.admitted, 1);
  EXPECT_EQ(s.dropped_gradients, 2);
  EXPECT_EQ(s.not_admitted_reads, 1);
}

TEST(DynamicTableTest, NeverAdmittedIdsReadAsZerosAndTakeNoRow) {
  DynamicTableOptions o = Options();
  o.never_admit = {0};
  auto t = Make(o);
  Push(*t, {0, 0, 5}, 1.0f);
  EXPECT_EQ(t->Find(0), DynamicTable::kNotARow);
  EXPECT_EQ(ReadRow(*t, 0), std::vector<float>(kDim, 0.0f));
  EXPECT_EQ(t->stats().rows, 1);
}

TEST(DynamicTableTest, ARowUntouchedForTtlStepsIsEvictedAndStartsOverWhenSeenAgain) {
  DynamicTableOptions o = Options();
  o.ttl_steps = 2;
  auto t = Make(o);
  t->AdvanceTo(1);
  Push(*t, {10, 20}, 1.0f);
  t->AdvanceTo(2);
  Push(*t, {20}, 1.0f);
  t->AdvanceTo(3);  // 10 untouched in step 2 only: kept
  EXPECT_NE(t->Find(10), DynamicTable::kNotARow);
  t->AdvanceTo(4);  // 10 untouched in steps 2 and 3: gone; 20 last touched in step 2: kept
  EXPECT_EQ(t->Find(10), DynamicTable::kNotARow);
  EXPECT_NE(t->Find(20), DynamicTable::kNotARow);
  EXPECT_EQ(t->stats().evicted_ttl, 1);
  EXPECT_EQ(ReadRow(*t, 10), Init(o, 10));
  Push(*t, {10}, 0.0f);  // seen again: a new row from the initializer
  EXPECT_EQ(ReadRow(*t, 10), Init(o, 10));
}

TEST(DynamicTableTest, TheBudgetEvictsTheLeastRecentlyUsedRowNeverOneOfTheStep) {
  DynamicTableOptions o = Options();
  o.max_rows = 3;
  auto t = Make(o);
  t->AdvanceTo(1);
  Push(*t, {1, 2, 3}, 1.0f);
  t->AdvanceTo(2);
  Push(*t, {2}, 1.0f);  // 1 and 3 are older, 1 the oldest
  Push(*t, {4}, 1.0f);  // evicts 1
  EXPECT_EQ(t->Find(1), DynamicTable::kNotARow);
  Push(*t, {5}, 1.0f);  // evicts 3, the last row of step 1
  EXPECT_EQ(t->Find(3), DynamicTable::kNotARow);
  for (uint64_t id : {2, 4, 5}) EXPECT_NE(t->Find(id), DynamicTable::kNotARow) << id;
  EXPECT_EQ(t->stats().evicted_budget, 2);
  // Every row is of step 2 now: a sixth has no room in this step.
  EXPECT_FALSE(t->Admit(6).ok());
  EXPECT_EQ(t->stats().rows, 3);
}

// A contribution's rows are found before any of its new rows makes room, so
// a row it reads is never the one evicted for a new id listed before it.
TEST(DynamicTableTest, AdmitAllNeverEvictsARowOfTheSameContribution) {
  DynamicTableOptions o = Options();
  o.max_rows = 3;
  auto t = Make(o);
  t->AdvanceTo(1);
  Push(*t, {1, 2, 3}, 1.0f);  // 1 is the least recently used
  t->AdvanceTo(2);
  const std::vector<uint64_t> ids = {4, 1};
  std::vector<int64_t> slots(2);
  ASSERT_TRUE(t->AdmitAll(ids.data(), ids.size(), slots.data()).ok());
  EXPECT_NE(slots[0], slots[1]);
  EXPECT_EQ(t->Find(4), slots[0]);
  EXPECT_EQ(t->Find(1), slots[1]);
  EXPECT_EQ(t->Find(2), DynamicTable::kNotARow);  // the coldest row not of this step
  EXPECT_EQ(t->stats().rows, 3);
}

TEST(DynamicTableTest, AStepThatAloneNeedsMoreThanTheBudgetFailsSayingWhatToSet) {
  DynamicTableOptions o = Options();
  o.max_rows = 2;
  auto t = Make(o);
  t->AdvanceTo(7);
  ASSERT_TRUE(t->Admit(1).ok());
  ASSERT_TRUE(t->Admit(2).ok());
  StatusOr<int64_t> third = t->Admit(3);
  ASSERT_FALSE(third.ok());
  EXPECT_EQ(third.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(third.status().message().find("step 7"), std::string::npos);
  EXPECT_NE(third.status().message().find("max_rows"), std::string::npos);
  EXPECT_NE(t->Find(1), DynamicTable::kNotARow);  // nothing of the step was dropped
  EXPECT_NE(t->Find(2), DynamicTable::kNotARow);
  t->AdvanceTo(8);
  ASSERT_TRUE(t->Admit(3).ok());  // the next step may evict them
  EXPECT_EQ(t->stats().rows, 2);
}

TEST(DynamicTableTest, UnderAStreamOfNewIdsRowsNeverExceedTheBudgetAndSlotsAreReused) {
  for (EvictionPolicy policy : {EvictionPolicy::kLru, EvictionPolicy::kLfu}) {
    DynamicTableOptions o = Options();
    o.max_rows = 100;
    o.policy = policy;
    auto t = Make(o);
    std::mt19937_64 gen(5);
    for (int step = 1; step <= 200; ++step) {
      t->AdvanceTo(step);
      std::vector<uint64_t> ids;
      for (int i = 0; i < 20; ++i) ids.push_back(gen());
      Push(*t, ids, 1.0f);
      ASSERT_LE(t->stats().rows, 100);
    }
    const DynamicTableStats s = t->stats();
    EXPECT_EQ(s.rows, 100);
    EXPECT_EQ(s.admitted, 4000);
    EXPECT_EQ(s.evicted_budget, 3900);
    const int64_t bytes_at_budget = s.bytes;
    for (int step = 201; step <= 400; ++step) {
      t->AdvanceTo(step);
      std::vector<uint64_t> ids;
      for (int i = 0; i < 20; ++i) ids.push_back(gen());
      Push(*t, ids, 1.0f);
    }
    EXPECT_EQ(t->stats().bytes, bytes_at_budget);  // freed slots are reused
  }
}

TEST(DynamicTableTest, SampledLfuKeepsTheRowsTouchedMostOften) {
  DynamicTableOptions o = Options();
  o.max_rows = 50;
  o.policy = EvictionPolicy::kLfu;
  o.lfu_sample = 8;
  auto t = Make(o);
  std::mt19937_64 gen(9);
  const std::vector<uint64_t> hot = {1001, 1002, 1003, 1004, 1005};
  for (int step = 1; step <= 300; ++step) {
    t->AdvanceTo(step);
    std::vector<uint64_t> ids = hot;
    for (int i = 0; i < 10; ++i) ids.push_back(gen() | 1ULL << 40);
    Push(*t, ids, 1.0f);
    // The hot rows were touched in this step: they survive any eviction.
  }
  // Cold ids were each seen once; every hot row, touched 300 times, stays.
  for (uint64_t id : hot) EXPECT_NE(t->Find(id), DynamicTable::kNotARow) << id;
  t->AdvanceTo(301);
  // A step without the hot ids: new rows evict cold ones first.
  std::vector<uint64_t> fresh;
  for (int i = 0; i < 40; ++i) fresh.push_back(gen() | 1ULL << 41);
  Push(*t, fresh, 1.0f);
  int hot_left = 0;
  for (uint64_t id : hot) hot_left += t->Find(id) != DynamicTable::kNotARow;
  EXPECT_GE(hot_left, 4);  // sampling may miss colder rows, rarely
}

TEST(DynamicTableTest, ARestoredTableContinuesExactlyAsTheOriginal) {
  DynamicTableOptions o = Options(OptimizerType::kAdam);
  o.max_rows = 40;
  o.ttl_steps = 5;
  o.admit_after = 2;
  o.policy = EvictionPolicy::kLfu;
  o.seed = 77;
  auto a = Make(o);
  std::mt19937_64 gen(3);
  auto step_ids = [&] {
    std::vector<uint64_t> ids;
    for (int i = 0; i < 12; ++i) ids.push_back(gen() % 300);
    std::sort(ids.begin(), ids.end());
    ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
    return ids;
  };
  for (int step = 1; step <= 30; ++step) {
    a->AdvanceTo(step);
    Push(*a, step_ids(), 0.5f);
  }
  const std::string saved = a->Serialize();
  auto b = Make(o);
  ASSERT_TRUE(b->Restore(saved).ok());
  EXPECT_EQ(b->Serialize(), saved);
  for (int step = 31; step <= 60; ++step) {
    const std::vector<uint64_t> ids = step_ids();
    a->AdvanceTo(step);
    b->AdvanceTo(step);
    Push(*a, ids, 0.25f);
    Push(*b, ids, 0.25f);
  }
  EXPECT_EQ(a->Serialize(), b->Serialize());
  EXPECT_GT(a->stats().evicted_budget + a->stats().evicted_ttl, 0);
}

// A table with a budget commits its rows' memory when it is created (a
// shard's --prefault-mb): all of it when the budget fits, part of it
// otherwise, none without a budget; and it trains exactly as a table that
// commits nothing (slots, evictions, checkpoint bytes), contributions with
// repeated ids and ids not yet admitted included.
TEST(DynamicTableTest, ATableThatCommitsItsMemoryTrainsExactlyAsOneThatDoesNot) {
  DynamicTableOptions o = Options(OptimizerType::kAdam);
  o.max_rows = 20000;  // more than one chunk of rows
  o.ttl_steps = 40;
  o.admit_after = 2;
  o.policy = EvictionPolicy::kLfu;
  DynamicTableOptions whole = o, part = o, none = o, no_budget = o;
  whole.commit_bytes = size_t{1} << 30;
  part.commit_bytes = static_cast<size_t>(DynamicTable::BytesPerRow(o)) * 5000;
  no_budget.max_rows = 0;
  no_budget.commit_bytes = size_t{1} << 30;
  EXPECT_EQ(DynamicTable::CommittedRows(whole), 20000u);
  EXPECT_EQ(DynamicTable::CommittedRows(part), 5000u);
  EXPECT_EQ(DynamicTable::CommittedRows(none), 0u);
  EXPECT_EQ(DynamicTable::CommittedRows(no_budget), 0u);
  std::vector<std::unique_ptr<DynamicTable>> tables;
  for (const DynamicTableOptions* x : {&none, &whole, &part}) tables.push_back(Make(*x));
  const int64_t row_values = 20000 * 3 * int64_t{kDim} * int64_t{sizeof(float)};
  // The rows' memory, before any row (both reserved the index alike).
  EXPECT_GE(tables[1]->stats().bytes - tables[0]->stats().bytes, row_values);
  EXPECT_EQ(tables[1]->stats().rows, 0);
  std::mt19937_64 gen(21);
  for (int step = 1; step <= 120; ++step) {
    std::vector<uint64_t> ids;
    for (int i = 0; i < 400; ++i) ids.push_back(gen() % 60000);  // repeats, new ids, cold ids
    std::vector<float> grads(ids.size() * kDim);
    for (float& g : grads) g = static_cast<float>(gen() % 1000) / 1000.0f - 0.5f;
    for (auto& t : tables) {
      t->AdvanceTo(step);
      ASSERT_TRUE(t->Push(ids.data(), ids.size(), grads.data()).ok());
    }
  }
  const std::string expected = tables[0]->Serialize();
  EXPECT_GT(tables[0]->stats().evicted_budget + tables[0]->stats().evicted_ttl, 0);
  EXPECT_GT(tables[0]->stats().dropped_gradients, 0);
  for (size_t i = 1; i < tables.size(); ++i) {
    EXPECT_EQ(tables[i]->Serialize(), expected) << "table " << i;
    EXPECT_EQ(tables[i]->stats().rows, tables[0]->stats().rows);
  }
}

// Async and ssp: a worker far behind pushes while the table's step is the
// newest any push named. Sparing that step's rows (sync's rule) would fill
// the budget with every row the late worker touches and stop the job
// (TABLE_FULL); Spare::kContribution spares only the push's own rows.
TEST(DynamicTableTest, UnderAsyncOnlyAPushsOwnRowsAreSparedSoALateWorkerNeverFillsTheBudget) {
  for (EvictionPolicy policy : {EvictionPolicy::kLru, EvictionPolicy::kLfu}) {
    DynamicTableOptions o = Options();
    o.max_rows = 100;
    o.policy = policy;
    auto sync_rule = Make(o), async_rule = Make(o);
    sync_rule->AdvanceTo(7);  // the newest step; every push below is a late one
    async_rule->AdvanceTo(7);
    std::mt19937_64 gen(13);
    bool sync_full = false;
    for (int push = 0; push < 50; ++push) {
      std::vector<uint64_t> ids;
      for (int i = 0; i < 20; ++i) ids.push_back(gen());
      ids.push_back(ids[3]);  // a repeat
      std::vector<int64_t> slots(ids.size());
      Status st = async_rule->AdmitAll(ids.data(), ids.size(), slots.data(), nullptr,
                                       DynamicTable::Spare::kContribution);
      ASSERT_TRUE(st.ok()) << st.ToString();
      ASSERT_LE(async_rule->stats().rows, 100);
      for (size_t i = 0; i < ids.size(); ++i) {  // the push's own rows are all held
        ASSERT_NE(slots[i], DynamicTable::kNotARow);
        ASSERT_EQ(async_rule->Find(ids[i]), slots[i]) << "push " << push << " id " << i;
      }
      if (!sync_full) {
        std::vector<int64_t> sync_slots(ids.size());
        Status s = sync_rule->AdmitAll(ids.data(), ids.size(), sync_slots.data());
        if (!s.ok()) {
          sync_full = true;
          EXPECT_NE(s.message().find("step 7 alone"), std::string::npos) << s.message();
        }
      }
    }
    EXPECT_TRUE(sync_full) << "sync's rule spares step 7's rows: the budget fills";
    EXPECT_EQ(async_rule->stats().rows, 100);
    EXPECT_EQ(async_rule->stats().evicted_budget, 50 * 20 - 100);
    // One push alone over the budget still fails, saying so.
    std::vector<uint64_t> big;
    for (int i = 0; i < 101; ++i) big.push_back(gen());
    std::vector<int64_t> slots(big.size());
    Status st = async_rule->AdmitAll(big.data(), big.size(), slots.data(), nullptr,
                                     DynamicTable::Spare::kContribution);
    EXPECT_EQ(st.code(), StatusCode::kFailedPrecondition);
    EXPECT_NE(st.message().find("one push alone"), std::string::npos) << st.message();
  }
}

TEST(DynamicTableTest, BadSettingsAndBadCheckpointsAreRefused) {
  DynamicTableOptions o = Options();
  o.admit_after = 0;
  EXPECT_EQ(DynamicTable::Create(o).status().code(), StatusCode::kInvalidArgument);
  o = Options();
  o.max_rows = -1;
  EXPECT_NE(DynamicTable::Create(o).status().message().find("max_rows"), std::string::npos);
  o = Options();
  o.var.dim = 0;
  EXPECT_NE(DynamicTable::Create(o).status().message().find("dim"), std::string::npos);

  auto t = Make(Options());
  Push(*t, {1, 2, 3}, 1.0f);
  const std::string saved = t->Serialize();
  auto other = Make(Options(OptimizerType::kAdagrad));  // another number of state slots
  EXPECT_FALSE(other->Restore(saved).ok());
  EXPECT_FALSE(t->Restore(saved.substr(0, saved.size() - 3)).ok());
  EXPECT_FALSE(t->Restore("not a table").ok());
  EXPECT_EQ(t->Serialize(), saved);  // a refused restore changes nothing
}

}  // namespace
}  // namespace parallax::ps
