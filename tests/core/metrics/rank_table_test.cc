// The per-rank table of `parallax status JOB` and the job's web page
// (core/metrics/rank_table.h): one set of columns, the same figures in both
// styles.
#include "core/metrics/rank_table.h"

#include <gtest/gtest.h>

#include <algorithm>

#include "schemas/metric_names.h"

namespace parallax {
namespace {

namespace names = metric_names;

std::string WithoutSpaces(std::string s) {
  s.erase(std::remove(s.begin(), s.end(), ' '), s.end());
  return s;
}

TEST(RankTableTest, TerminalAndPageHaveTheSameColumnsAndFigures) {
  const std::map<std::string, double> r0 = {{names::kComputeMs, 12.345},
                                            {names::kDenseWaitMs, 1.5},
                                            {names::SentBytes(names::Path::kPsPush), 2048},
                                            {names::RecvBytes(names::Path::kLocalAgg), 3e6}};
  const std::map<std::string, double> r1;  // an older trainer: no values
  const std::vector<RankPoint> points = {{0, 100, 2.5, 300.3, &r0}, {1, 90, 2.75, 0, &r1}};
  const RankTable terminal = BuildRankTable(points, RankTableStyle::kTerminal);
  const RankTable page = BuildRankTable(points, RankTableStyle::kPage);
  EXPECT_EQ(terminal.columns, page.columns);
  // One column a path of the metric points, the paths in their order.
  ASSERT_EQ(terminal.columns.size(), 7 + names::kPaths.size());
  EXPECT_EQ(terminal.columns[7], "all-reduce S/R");
  EXPECT_EQ(terminal.columns.back(), "local agg S/R");
  ASSERT_EQ(terminal.rows.size(), 2u);
  ASSERT_EQ(page.rows.size(), 2u);
  for (size_t r = 0; r < 2; ++r) {
    ASSERT_EQ(terminal.rows[r].size(), terminal.columns.size());
    for (size_t c = 0; c < terminal.columns.size(); ++c) {
      EXPECT_EQ(terminal.rows[r][c], WithoutSpaces(page.rows[r][c])) << r << "," << c;
    }
  }
  EXPECT_EQ(terminal.rows[0][0], "0");
  EXPECT_EQ(terminal.rows[0][1], "100");
  EXPECT_EQ(terminal.rows[0][2], "2.5000");
  EXPECT_EQ(terminal.rows[0][3], "300.3");
  EXPECT_EQ(page.rows[0][4], "12.35 ms");
  EXPECT_EQ(terminal.rows[0][5], "1.50ms");
  EXPECT_EQ(page.rows[0][9], "2.05 KB / 0 B");   // PS push
  EXPECT_EQ(terminal.rows[0][11], "0B/3.00MB");  // local aggregation
  EXPECT_EQ(terminal.rows[1][4], "0.00ms");      // absent values read as 0
}

// A job with row caches gets a column of the share of rows they served;
// a point without the cache's values reads "-".
TEST(RankTableTest, RowCachesAddTheirHitShare) {
  const std::map<std::string, double> r0 = {{names::kRowCacheHits, 30},
                                            {names::kRowCacheMisses, 8},
                                            {names::kRowCacheStaleRefreshes, 2}};
  const std::map<std::string, double> r1;
  const std::vector<RankPoint> points = {{0, 10, 1, 1, &r0}, {1, 10, 1, 1, &r1}};
  const RankTable terminal = BuildRankTable(points, RankTableStyle::kTerminal);
  const RankTable page = BuildRankTable(points, RankTableStyle::kPage);
  ASSERT_EQ(terminal.columns.size(), 8 + names::kPaths.size());
  EXPECT_EQ(terminal.columns.back(), "cache hits");
  EXPECT_EQ(page.columns, terminal.columns);
  EXPECT_EQ(terminal.rows[0].back(), "75.0%");
  EXPECT_EQ(page.rows[0].back(), "75.0 %");
  EXPECT_EQ(terminal.rows[1].back(), "-");
  // Without caches the column is not there.
  const std::vector<RankPoint> plain = {{1, 10, 1, 1, &r1}};
  EXPECT_EQ(BuildRankTable(plain, RankTableStyle::kTerminal).columns.size(),
            7 + names::kPaths.size());
}

TEST(RankTableTest, NoPointsIsJustTheColumns) {
  const RankTable t = BuildRankTable({}, RankTableStyle::kPage);
  EXPECT_TRUE(t.rows.empty());
  EXPECT_EQ(t.columns.front(), "rank");
}

}  // namespace
}  // namespace parallax
