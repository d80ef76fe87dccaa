#include "core/ps/row_cache.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>

#include "schemas/ps_wire.h"

namespace parallax::ps {
namespace {

VariableSpec Table(uint32_t dim = 2, uint32_t partitions = 2) {
  VariableSpec v;
  v.id = 0;
  v.name = "emb";
  v.rows = 1000;
  v.dim = dim;
  v.partitions = partitions;
  v.scheme = PartitionScheme::kRange;  // ids < 500: partition 0
  v.partition_shards.assign(partitions, 0);
  return v;
}

std::vector<float> RowsOf(std::vector<int64_t> ids, float step, uint32_t dim = 2) {
  std::vector<float> out;
  for (int64_t id : ids)
    for (uint32_t d = 0; d < dim; ++d) out.push_back(static_cast<float>(id) + step / 100.0f);
  return out;
}

// What a gradient push list sums to, by id.
std::map<int64_t, float> Sums(const RowsToPush& p, uint32_t dim = 2) {
  std::map<int64_t, float> out;
  for (size_t i = 0; i < p.ids.size(); ++i) out[p.ids[i]] += p.grads[i * dim];
  return out;
}

TEST(RowCacheTest, ARowServesAtMostStalenessStepsAfterItsPull) {
  RowCache cache(Table(), /*staleness=*/2, /*capacity=*/100, /*value_bytes=*/4, false);
  std::vector<int64_t> pull;
  cache.Plan(std::vector<int64_t>{7, 8, 7}, 10, &pull);
  EXPECT_EQ(pull, (std::vector<int64_t>{7, 8}));  // distinct, first-seen order
  cache.Insert(pull, RowsOf(pull, 10), 10);
  // Steps 10, 11, 12 are served; step 13 is 3 steps after the pull.
  for (int64_t step : {10, 11, 12}) {
    std::vector<float> out(4, -1.0f);
    std::vector<size_t> unserved;
    cache.Read(std::vector<int64_t>{8, 7}, step, out.data(), &unserved);
    EXPECT_TRUE(unserved.empty()) << "step " << step;
    EXPECT_FLOAT_EQ(out[0], 8.10f);
    EXPECT_FLOAT_EQ(out[2], 7.10f);
  }
  std::vector<float> out(4);
  std::vector<size_t> unserved;
  cache.Read(std::vector<int64_t>{8, 7}, 13, out.data(), &unserved);
  EXPECT_EQ(unserved, (std::vector<size_t>{0, 1}));
  pull.clear();
  cache.Plan(std::vector<int64_t>{7}, 13, &pull);
  EXPECT_EQ(pull, (std::vector<int64_t>{7}));
  // Step 10: 2 misses (the prefetch's plan); 11, 12: 2 hits each (the read
  // of step 10 was counted by its plan); 13: 2 stale refreshes.
  EXPECT_EQ(cache.counters().misses, 2);
  EXPECT_EQ(cache.counters().hits, 4);
  EXPECT_EQ(cache.counters().stale_refreshes, 2);
  EXPECT_EQ(cache.counters().bytes_saved, 4 * (8 + 2 * 4));
}

TEST(RowCacheTest, RowsLeaveWithTheirGradientsAfterTheLastStepTheyServe) {
  RowCache cache(Table(), /*staleness=*/2, 100, 4, /*accumulate=*/true);
  cache.Insert(std::vector<int64_t>{1, 2}, RowsOf({1, 2}, 0), 0);
  for (int64_t step = 0; step <= 2; ++step) {
    RowsToPush push;
    // Row 3 is not held: pushed at once, every step.
    cache.AddGradients(std::vector<int64_t>{1, 3, 1}, std::vector<float>{1, 1, 5, 5, 2, 2}, step,
                       &push);
    cache.TakeDue(step, &push);
    if (step < 2) {
      EXPECT_EQ(Sums(push), (std::map<int64_t, float>{{3, 5}})) << "step " << step;
    } else {
      // Row 1 pulled for step 0 serves steps 0-2: its 3 steps' sums go now.
      EXPECT_EQ(Sums(push), (std::map<int64_t, float>{{1, 9}, {3, 5}}));
    }
  }
  // Rows 1 and 2 served their last step: they left with their gradients.
  EXPECT_EQ(cache.size(), 0u);
  RowsToPush rest;
  cache.Clear(&rest);
  EXPECT_TRUE(rest.ids.empty());
}

TEST(RowCacheTest, EvictionAndResetsPushTheRowsGradientsAndDropTheRows) {
  RowCache cache(Table(), /*staleness=*/4, /*capacity=*/2, 4, /*accumulate=*/true);
  cache.Insert(std::vector<int64_t>{1, 600}, RowsOf({1, 600}, 0), 0);
  RowsToPush push;
  cache.AddGradients(std::vector<int64_t>{1, 600}, std::vector<float>{1, 1, 2, 2}, 0, &push);
  EXPECT_TRUE(push.ids.empty());
  std::vector<float> out(2);
  std::vector<size_t> unserved;
  cache.Read(std::vector<int64_t>{600}, 1, out.data(), &unserved);  // 1 is now the LRU row
  cache.Insert(std::vector<int64_t>{2}, RowsOf({2}, 1), 1);
  EXPECT_EQ(cache.size(), 2u);
  EXPECT_EQ(cache.counters().evictions, 1);
  cache.TakeDue(1, &push);
  EXPECT_EQ(Sums(push), (std::map<int64_t, float>{{1, 1}}));
  // Partition 1 (ids ≥ 500) reset on its shard: row 600 goes, with its gradient.
  cache.DropPartition(1);
  EXPECT_EQ(cache.counters().resets, 1);
  unserved.clear();
  cache.Read(std::vector<int64_t>{600, 2}, 2, std::vector<float>(4).data(), &unserved);
  EXPECT_EQ(unserved, (std::vector<size_t>{0}));
  push = {};
  cache.TakeDue(2, &push);
  EXPECT_EQ(Sums(push), (std::map<int64_t, float>{{600, 2}}));
  // A reused slot's new row starts without the old one's gradient.
  cache.Insert(std::vector<int64_t>{3}, RowsOf({3}, 2), 2);
  RowsToPush all;
  cache.Clear(&all);
  EXPECT_TRUE(all.ids.empty());
}

// A step that needs more rows than the capacity keeps them all through the
// step: evicting a row the step just pulled would make its lookup pull it
// again. The overflow leaves at the end of the step, least recently used
// first.
TEST(RowCacheTest, AStepsRowsStayThroughTheStepBeyondTheCapacity) {
  for (bool check_versions : {false, true}) {
    SCOPED_TRACE(check_versions ? "version checks" : "clock");
    RowCache cache(Table(), /*staleness=*/4, /*capacity=*/2, 4, /*accumulate=*/false,
                   check_versions);
    const std::vector<int64_t> ids{1, 2, 3, 4};
    std::vector<int64_t> pull;
    std::vector<uint32_t> held;
    cache.Plan(ids, 5, &pull, check_versions ? &held : nullptr);
    EXPECT_EQ(pull, ids);
    cache.Insert(pull, RowsOf(pull, 5), 5,
                 check_versions ? std::vector<uint32_t>{10, 11, 12, 13} : std::vector<uint32_t>{});
    std::vector<float> out(8);
    std::vector<size_t> unserved;
    cache.Read(ids, 5, out.data(), &unserved);
    EXPECT_TRUE(unserved.empty());
    EXPECT_FLOAT_EQ(out[0], 1.05f);
    EXPECT_EQ(cache.size(), 4u);
    EXPECT_EQ(cache.counters().evictions, 0);
    RowsToPush push;
    cache.TakeDue(5, &push);
    EXPECT_EQ(cache.size(), 2u);  // rows 1 and 2, used least recently, left
    EXPECT_EQ(cache.counters().evictions, 2);
    unserved.clear();
    cache.Read(ids, 6, out.data(), &unserved);
    EXPECT_EQ(unserved, (std::vector<size_t>{0, 1}));
    // 3 and 4 were read at step 6: a row pulled for it does not evict them.
    pull.clear();
    cache.Plan(std::vector<int64_t>{5}, 6, &pull, check_versions ? &held : nullptr);
    cache.Insert(pull, RowsOf(pull, 6), 6,
                 check_versions ? std::vector<uint32_t>{14} : std::vector<uint32_t>{});
    EXPECT_EQ(cache.size(), 3u);
    cache.TakeDue(6, &push);
    EXPECT_EQ(cache.size(), 2u);  // 4 and 5
    // At step 7 a new row evicts the least recently used one, 4, used at step 6.
    pull.clear();
    cache.Plan(std::vector<int64_t>{6}, 7, &pull, check_versions ? &held : nullptr);
    cache.Insert(pull, RowsOf(pull, 7), 7,
                 check_versions ? std::vector<uint32_t>{15} : std::vector<uint32_t>{});
    EXPECT_EQ(cache.size(), 2u);
    EXPECT_EQ(cache.counters().evictions, 4);
    unserved.clear();
    cache.Read(std::vector<int64_t>{4, 5, 6}, 7, out.data(), &unserved);
    EXPECT_EQ(unserved, (std::vector<size_t>{0}));
  }
}

// Least recently used counts in steps, and within a step by each row's
// first use; the order holds over many steps of rows used again and again
// (the queue of uses drops its spent records as it goes).
TEST(RowCacheTest, EvictsTheLeastRecentlyUsedRowsAfterManyStepsOfReuse) {
  RowCache cache(Table(), /*staleness=*/1, /*capacity=*/201, 4, /*accumulate=*/false,
                 /*check_versions=*/true);
  std::vector<int64_t> rows(200);
  for (int64_t i = 0; i < 200; ++i) rows[static_cast<size_t>(i)] = i;
  // Rows 900 and 901 first, then 0..199: one more than the capacity, so the
  // step's end evicts one (900, the first used) and the cache is full.
  std::vector<int64_t> first_ids{900, 901};
  first_ids.insert(first_ids.end(), rows.begin(), rows.end());
  cache.Insert(first_ids, RowsOf(first_ids, 0), 0, std::vector<uint32_t>(202, 7));
  std::vector<size_t> unserved;
  std::vector<float> out(2 * 200);
  RowsToPush push;
  for (int64_t step = 0; step <= 100; ++step) {
    // Each step reads rows 0..199, in an order that changes; the last, step
    // 100, reads 199 down to 0. (Served: pulled at step 0, then found fresh.)
    std::vector<int64_t> order = rows;
    if (step == 100) {
      std::reverse(order.begin(), order.end());
    } else {
      std::rotate(order.begin(), order.begin() + (step * 37) % 200, order.end());
    }
    if (step > 1) {
      cache.Insert(order, std::vector<float>(2 * 200), step,
                   std::vector<uint32_t>(200, ps_wire::kRowFresh));
    }
    unserved.clear();
    cache.Read(order, step, out.data(), &unserved);
    ASSERT_TRUE(unserved.empty()) << "step " << step;
    cache.TakeDue(step, &push);
    ASSERT_EQ(cache.size(), 201u) << "step " << step;
  }
  EXPECT_EQ(cache.counters().evictions, 1);
  // Steps 101..160 use rows 0..99 again (long enough for the queue to drop
  // spent records more than once); rows 100..199 were last used at step 100.
  std::vector<int64_t> again(rows.begin(), rows.begin() + 100);
  for (int64_t step = 101; step <= 160; ++step) {
    cache.Insert(again, std::vector<float>(2 * 100), step,
                 std::vector<uint32_t>(100, ps_wire::kRowFresh));
    cache.TakeDue(step, &push);
  }
  // 51 new rows at step 161 evict the least recently used: 901 (step 0),
  // then 50 of rows 100..199, of which step 100 used 199 first.
  std::vector<int64_t> fresh(51);
  for (int64_t i = 0; i < 51; ++i) fresh[static_cast<size_t>(i)] = 300 + i;
  cache.Insert(fresh, RowsOf(fresh, 161), 161, std::vector<uint32_t>(51, 9));
  EXPECT_EQ(cache.size(), 201u);
  EXPECT_EQ(cache.counters().evictions, 52);
  std::vector<uint32_t> held;
  cache.Held(std::vector<int64_t>{900, 901}, &held);
  EXPECT_EQ(held, (std::vector<uint32_t>{ps_wire::kNotHeld, ps_wire::kNotHeld}));
  cache.Held(rows, &held);
  for (int64_t id = 0; id < 200; ++id) {
    const bool evicted = id >= 150;
    EXPECT_EQ(held[static_cast<size_t>(id)] == ps_wire::kNotHeld, evicted) << "row " << id;
  }
}

TEST(RowCacheTest, AnOlderPullDoesNotMakeAHeldRowLookYounger) {
  RowCache cache(Table(), 1, 10, 4, false);
  cache.Insert(std::vector<int64_t>{5}, RowsOf({5}, 7), 7);
  cache.Insert(std::vector<int64_t>{5}, RowsOf({5}, 6), 6);
  std::vector<float> out(2);
  std::vector<size_t> unserved;
  cache.Read(std::vector<int64_t>{5}, 8, out.data(), &unserved);
  EXPECT_TRUE(unserved.empty());
  EXPECT_FLOAT_EQ(out[0], 5.07f);
}

// Without accumulation every gradient goes the step it is given, cached
// row or not.
TEST(RowCacheTest, WithoutAccumulationEveryGradientIsPushedAtOnce) {
  RowCache cache(Table(), 4, 10, 4, /*accumulate=*/false);
  cache.Insert(std::vector<int64_t>{1}, RowsOf({1}, 0), 0);
  RowsToPush push;
  cache.AddGradients(std::vector<int64_t>{1, 3, 1}, std::vector<float>{1, 1, 5, 5, 2, 2}, 0, &push);
  cache.TakeDue(0, &push);
  EXPECT_EQ(Sums(push), (std::map<int64_t, float>{{1, 3}, {3, 5}}));
  EXPECT_EQ(cache.size(), 1u);  // the row still serves
}

// A prefetch for the next step may come before this step's lookups: each
// distinct id still counts once per step.
TEST(RowCacheTest, CountsEachIdOncePerStepWhenStepsInterleave) {
  RowCache cache(Table(), 4, 10, 4, false);
  std::vector<int64_t> pull;
  cache.Plan(std::vector<int64_t>{1}, 0, &pull);  // miss
  cache.Insert(pull, RowsOf(pull, 0), 0);
  for (int64_t step = 0; step < 3; ++step) {
    pull.clear();
    cache.Plan(std::vector<int64_t>{1}, step + 1, &pull);  // the next step's prefetch: a hit
    EXPECT_TRUE(pull.empty());
    std::vector<float> out(4);  // two rows of dim 2
    std::vector<size_t> unserved;
    cache.Read(std::vector<int64_t>{1, 1}, step, out.data(), &unserved);  // counted already
    EXPECT_TRUE(unserved.empty());
  }
  EXPECT_EQ(cache.counters().misses, 1);
  EXPECT_EQ(cache.counters().hits, 3);
}

// With version checks (cache_rule = "version") a row outlives its
// `staleness` steps: a later step asks the shard with the version held, and
// a "fresh" answer (no row) lets the copy serve that step.
TEST(RowCacheTest, WithVersionChecksAStaleRowIsCheckedAndServesWhenTheShardSaysFresh) {
  RowCache cache(Table(), /*staleness=*/1, 100, /*value_bytes=*/4, /*accumulate=*/true,
                 /*check_versions=*/true);
  std::vector<int64_t> pull;
  std::vector<uint32_t> held;
  cache.Plan(std::vector<int64_t>{7, 8}, 0, &pull, &held);
  EXPECT_EQ(pull, (std::vector<int64_t>{7, 8}));
  EXPECT_EQ(held, (std::vector<uint32_t>{ps_wire::kNotHeld, ps_wire::kNotHeld}));
  cache.Insert(pull, RowsOf(pull, 0), 0, std::vector<uint32_t>{40, 90});
  RowsToPush push;
  cache.AddGradients(std::vector<int64_t>{7}, std::vector<float>{1, 1}, 0, &push);
  cache.TakeDue(0, &push);
  cache.AddGradients(std::vector<int64_t>{7}, std::vector<float>{2, 2}, 1, &push);
  cache.TakeDue(1, &push);  // 7's last step by the clock: its sum goes, the row stays
  EXPECT_EQ(Sums(push), (std::map<int64_t, float>{{7, 3}}));
  EXPECT_EQ(cache.size(), 2u);

  // Step 3: both are past their steps; the pull names the versions held.
  pull.clear();
  held.clear();
  cache.Plan(std::vector<int64_t>{8, 7}, 3, &pull, &held);
  EXPECT_EQ(pull, (std::vector<int64_t>{8, 7}));
  EXPECT_EQ(held, (std::vector<uint32_t>{90, 40}));
  // The shard: 8 is fresh (no row), 7 took too many pushes (its row, v 45).
  std::vector<float> rows = {0, 0, 7.03f, 7.03f};
  cache.Insert(pull, rows, 3, std::vector<uint32_t>{ps_wire::kRowFresh, 45});
  std::vector<float> out(4);
  std::vector<size_t> unserved;
  cache.Read(std::vector<int64_t>{7, 8}, 3, out.data(), &unserved);
  EXPECT_TRUE(unserved.empty());
  EXPECT_FLOAT_EQ(out[0], 7.03f);  // the new row
  EXPECT_FLOAT_EQ(out[2], 8.0f);   // the copy of step 0, found fresh
  // Step 4: 8's check was for step 3 only; 7 is in its steps again.
  pull.clear();
  held.clear();
  cache.Plan(std::vector<int64_t>{7, 8}, 4, &pull, &held);
  EXPECT_EQ(pull, (std::vector<int64_t>{8}));
  EXPECT_EQ(held, (std::vector<uint32_t>{90}));
  // A gradient of a row past its steps goes at once, not into a sum.
  push = {};
  cache.AddGradients(std::vector<int64_t>{8, 7}, std::vector<float>{5, 5, 6, 6}, 4, &push);
  EXPECT_EQ(Sums(push), (std::map<int64_t, float>{{8, 5}}));
  // Step 0: 2 misses; step 3: 8 a hit (checked), 7 a stale refresh; step 4:
  // 7 a hit, 8 a stale refresh so far. Bytes: a clock hit saves the id and
  // the row (8 + 8), a checked one the row less 8 bytes of versions, and
  // every row pulled costs 8 bytes of versions.
  EXPECT_EQ(cache.counters().misses, 2);
  EXPECT_EQ(cache.counters().hits, 2);
  EXPECT_EQ(cache.counters().stale_refreshes, 2);
  EXPECT_EQ(cache.counters().bytes_saved, -2 * 8 + (16 - 16) - 8 + 16 - 8);
}

// A "fresh" answer for a row dropped since the pull (its partition reset)
// serves nothing: the lookup pulls it.
TEST(RowCacheTest, AFreshAnswerForARowDroppedSinceThePullServesNothing) {
  RowCache cache(Table(), 1, 100, 4, false, /*check_versions=*/true);
  cache.Insert(std::vector<int64_t>{600}, RowsOf({600}, 0), 0, std::vector<uint32_t>{3});
  std::vector<int64_t> pull;
  std::vector<uint32_t> held;
  cache.Plan(std::vector<int64_t>{600}, 5, &pull, &held);
  EXPECT_EQ(held, (std::vector<uint32_t>{3}));
  cache.DropPartition(1);
  cache.Insert(pull, std::vector<float>(2), 5, std::vector<uint32_t>{ps_wire::kRowFresh});
  std::vector<size_t> unserved;
  cache.Read(std::vector<int64_t>{600}, 5, std::vector<float>(2).data(), &unserved);
  EXPECT_EQ(unserved, (std::vector<size_t>{0}));
  std::vector<uint32_t> now;
  cache.Held(std::vector<int64_t>{600}, &now);
  EXPECT_EQ(now, (std::vector<uint32_t>{ps_wire::kNotHeld}));
}

}  // namespace
}  // namespace parallax::ps
