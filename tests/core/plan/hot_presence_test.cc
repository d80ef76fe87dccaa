// PresenceCounter (bounded counts of the steps each row appears in) and the
// key-value form of what it measured (core/plan/hot_presence.h).
#include "core/plan/hot_presence.h"

#include <gtest/gtest.h>

#include <vector>

namespace parallax::plan {
namespace {

TEST(PresenceCounterTest, CountsARowOncePerStepAndKeepsTheMostPresentWithinItsCapacity) {
  PresenceCounter counter(4);
  int64_t tail = 1000;
  for (int step = 0; step < 50; ++step) {
    // Rows 1-4 in every step (twice: still once a step), row 5 in every
    // other, and 20 rows of the step's own that never come back.
    std::vector<int64_t> ids = {1, 2, 3, 4, 1, 2};
    if (step % 2 == 0) ids.push_back(5);
    for (int k = 0; k < 20; ++k) ids.push_back(tail++);
    counter.AddStep(ids);
  }
  const TablePresence p = counter.Take();
  EXPECT_EQ(p.steps, 50);
  ASSERT_EQ(p.row_steps.size(), 4u);
  for (int64_t id : {1, 2, 3, 4}) EXPECT_EQ(p.row_steps.at(id), 50) << id;
  counter.Reset();
  EXPECT_EQ(counter.steps(), 0);
  EXPECT_TRUE(counter.Take().row_steps.empty());
}

TEST(PresenceCounterTest, ARecurringRowPrunedEarlyIsCountedAgain) {
  // Capacity 2: the counter prunes beyond 4 rows. Row 9 first appears after
  // a prune; it still ends up counted in each step it appeared from then.
  PresenceCounter counter(2);
  for (int step = 0; step < 10; ++step) {
    std::vector<int64_t> ids = {1, 100 + step, 200 + step};
    if (step >= 5) ids.push_back(9);
    counter.AddStep(ids);
  }
  const TablePresence p = counter.Take();
  EXPECT_EQ(p.row_steps.at(1), 10);
  EXPECT_EQ(p.row_steps.at(9), 5);
}

TEST(PresenceCounterTest, CountsOneStepInEvery) {
  PresenceCounter counter(16, /*every=*/4);
  for (int step = 0; step < 10; ++step) counter.AddStep(std::vector<int64_t>{step, 100});
  EXPECT_EQ(counter.calls(), 10);
  EXPECT_EQ(counter.steps(), 3);  // steps 0, 4, 8
  const TablePresence p = counter.Take();
  EXPECT_EQ(p.steps, 3);
  EXPECT_EQ(p.row_steps.at(100), 3);
  for (int64_t id : {0, 4, 8}) EXPECT_EQ(p.row_steps.at(id), 1) << id;
  EXPECT_EQ(p.row_steps.count(1), 0u);
}

TEST(PresenceFormatTest, RoundTripsAndRefusesWhatNoCounterWrites) {
  MeasuredPresence m;
  m.attempt = 3;
  m.first_step = 100;
  m.step = 200;
  m.tables["emb"] = {100, {{7, 100}, {-3, 1}, {int64_t{1} << 50, 42}}};
  m.tables["other"] = {100, {}};
  auto back = ParsePresence(FormatPresence(m));
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->attempt, 3);
  EXPECT_EQ(back->first_step, 100);
  EXPECT_EQ(back->step, 200);
  ASSERT_EQ(back->tables.size(), 2u);
  EXPECT_EQ(back->tables["emb"].row_steps, m.tables["emb"].row_steps);
  EXPECT_EQ(back->tables["emb"].steps, 100);

  for (const char* bad : {
           "not json",
           R"({"version":2,"attempt":1,"first_step":0,"step":1,"tables":{}})",
           R"({"version":1,"attempt":1,"step":1,"tables":{}})",
           R"({"version":1,"attempt":1,"first_step":0,"step":5,"tables":{"emb":{"steps":5,"rows":[1]}}})",
           R"({"version":1,"attempt":1,"first_step":0,"step":5,"tables":{"emb":{"steps":5,"rows":[1,6]}}})",
           R"({"version":1,"attempt":1,"first_step":0,"step":5,"tables":{"emb":{"steps":-1,"rows":[]}}})",
           R"({"version":1,"attempt":1,"first_step":0,"step":5,"tables":{"emb":{"steps":5,"rows":[1.5,2]}}})",
       }) {
    auto p = ParsePresence(bad);
    EXPECT_FALSE(p.ok()) << bad;
    if (!p.ok()) {
      EXPECT_NE(p.status().message().find("hot-row presence"), std::string::npos) << p.status().ToString();
    }
  }
}

}  // namespace
}  // namespace parallax::plan
