// ps/reshard.h: a checkpoint of 2 partitions read as 3 (and back, and
// across schemes) keeps every row's weights, optimizer slots and Adam step.
#include "ps/reshard.h"

#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <map>
#include <set>

#include "core/ps/partition_file.h"
#include "ps/checkpoint.h"
#include "ps/variable_table.h"
#include "tests/testing/temp_dir.h"

namespace parallax::ps {
namespace {

struct Row {
  std::vector<float> weights, slot0, slot1;
  int64_t step = 0;
  bool operator==(const Row&) const = default;
};

VariableSpec Spec(uint32_t partitions, PartitionScheme scheme) {
  VariableSpec v;
  v.id = 7;
  v.name = "emb";
  v.rows = 200;
  v.dim = 3;
  v.partitions = partitions;
  v.scheme = scheme;
  v.partition_shards.assign(partitions, 0);
  v.optimizer.type = OptimizerType::kAdam;
  return v;
}

// Writes a table of 120 touched rows with distinct weights, slots and steps
// as `spec`'s partitions; returns the rows by id.
std::map<int64_t, Row> WriteCheckpoint(const std::string& dir, const VariableSpec& spec) {
  VariableTable table(spec);
  std::map<int64_t, Row> rows;
  for (int64_t id = 0; id < 200; id += 5) {
    for (int64_t k : {id, id + 1, id + 3}) {
      const uint32_t i = table.Touch(k);
      Row r;
      for (uint32_t d = 0; d < spec.dim; ++d) {
        r.weights.push_back(static_cast<float>(k) + 0.25f * d);
        r.slot0.push_back(-static_cast<float>(k) - d);
        r.slot1.push_back(0.5f * static_cast<float>(k * d));
      }
      std::memcpy(table.weights(i), r.weights.data(), spec.dim * 4);
      std::memcpy(table.slot(0, i), r.slot0.data(), spec.dim * 4);
      std::memcpy(table.slot(1, i), r.slot1.data(), spec.dim * 4);
      r.step = 1000 + k;
      *table.step(i) = r.step;
      rows[k] = r;
    }
  }
  for (uint32_t p = 0; p < spec.partitions; ++p) {
    EXPECT_TRUE(SavePartition(dir, table, p, /*applied=*/10 + p, /*version=*/40 + p).ok());
  }
  return rows;
}

std::map<int64_t, Row> RowsOf(const std::vector<PartitionSnapshot>& snaps, const VariableSpec& spec,
                              std::set<uint32_t>* partitions) {
  std::map<int64_t, Row> rows;
  const size_t dim = spec.dim;
  for (const PartitionSnapshot& s : snaps) {
    partitions->insert(s.partition);
    for (size_t r = 0; r < s.ids.size(); ++r) {
      EXPECT_EQ(PartitionOf(spec, s.ids[r]), s.partition) << "row " << s.ids[r];
      Row row;
      row.weights.assign(s.weights.begin() + r * dim, s.weights.begin() + (r + 1) * dim);
      row.slot0.assign(s.slots[0].begin() + r * dim, s.slots[0].begin() + (r + 1) * dim);
      row.slot1.assign(s.slots[1].begin() + r * dim, s.slots[1].begin() + (r + 1) * dim);
      row.step = s.steps[r];
      EXPECT_TRUE(rows.emplace(s.ids[r], row).second) << "row " << s.ids[r] << " twice";
    }
  }
  return rows;
}

class ReshardTest : public ::testing::TestWithParam<std::pair<int, int>> {
 protected:
  testing::TempDir dir_;
};

TEST_P(ReshardTest, EveryRowKeepsItsValuesSlotsAndStep) {
  const auto [from, to] = GetParam();
  const std::map<int64_t, Row> written =
      WriteCheckpoint(dir_.path(), Spec(static_cast<uint32_t>(from), PartitionScheme::kHash));
  const VariableSpec target = Spec(static_cast<uint32_t>(to), PartitionScheme::kHash);
  // Three "shards" own the new partitions round-robin; together they hold
  // every row exactly once.
  std::map<int64_t, Row> loaded;
  std::set<uint32_t> partitions;
  for (uint32_t shard = 0; shard < 3; ++shard) {
    std::vector<uint32_t> owned;
    for (uint32_t p = shard; p < target.partitions; p += 3) owned.push_back(p);
    auto snaps = LoadOwnedPartitions(dir_.path(), target, owned);
    ASSERT_TRUE(snaps.ok()) << snaps.status().ToString();
    ASSERT_EQ(snaps->size(), owned.size());
    for (const PartitionSnapshot& s : *snaps) {
      if (from == to) {
        EXPECT_EQ(s.applied, 10 + static_cast<int64_t>(s.partition));
      } else {
        EXPECT_EQ(s.applied, 10 + from - 1);  // the largest of the old ones
        EXPECT_EQ(s.version, 40 + from - 1);
      }
    }
    for (auto& [id, row] : RowsOf(*snaps, target, &partitions)) {
      EXPECT_TRUE(loaded.emplace(id, row).second) << "row " << id << " on two shards";
    }
  }
  EXPECT_EQ(partitions.size(), target.partitions);
  EXPECT_EQ(loaded, written);
}

INSTANTIATE_TEST_SUITE_P(Counts, ReshardTest,
                         ::testing::Values(std::make_pair(2, 3), std::make_pair(3, 2),
                                           std::make_pair(2, 2), std::make_pair(4, 1),
                                           std::make_pair(1, 5)));

TEST(ReshardSchemeTest, RangeToHashKeepsEveryRow) {
  testing::TempDir dir;
  const std::map<int64_t, Row> written = WriteCheckpoint(dir.path(), Spec(2, PartitionScheme::kRange));
  const VariableSpec target = Spec(3, PartitionScheme::kHash);
  auto snaps = LoadOwnedPartitions(dir.path(), target, {0, 1, 2});
  ASSERT_TRUE(snaps.ok()) << snaps.status().ToString();
  std::set<uint32_t> partitions;
  EXPECT_EQ(RowsOf(*snaps, target, &partitions), written);
}

TEST(ReshardErrorTest, AnotherDimOrAMissingPartNamesTheFile) {
  testing::TempDir dir;
  WriteCheckpoint(dir.path(), Spec(2, PartitionScheme::kHash));
  VariableSpec other = Spec(3, PartitionScheme::kHash);
  other.dim = 4;
  auto wrong = LoadOwnedPartitions(dir.path(), other, {0});
  ASSERT_FALSE(wrong.ok());
  EXPECT_NE(wrong.status().message().find("var7-part0.pxps"), std::string::npos)
      << wrong.status().message();
  EXPECT_NE(wrong.status().message().find("dim 3"), std::string::npos) << wrong.status().message();
  std::filesystem::remove(dir.File(PartitionFileName(7, 1)));
  auto missing = LoadOwnedPartitions(dir.path(), Spec(3, PartitionScheme::kHash), {0});
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("var7-part1.pxps"), std::string::npos)
      << missing.status().message();
}

}  // namespace
}  // namespace parallax::ps
