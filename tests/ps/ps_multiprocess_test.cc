// Two real parallax-ps processes and three worker threads on loopback, sync
// mode, 50 steps: the final table equals a single-process reference.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <thread>

#include "core/plan/job_plan.h"
#include "core/ps/client.h"
#include "core/ps/initializer.h"
#include "core/optim/optimizer.h"
#include "tests/testing/subprocess.h"
#include "tests/testing/temp_dir.h"
#include "tests/testing/build_paths.h"

namespace parallax::ps {
namespace {

std::string BinDir() { return testing::BinDirOr(::parallax::testing::BuildBinDir()); }

constexpr uint32_t kWorkers = 3;
constexpr int kSteps = 50;
constexpr uint32_t kDim = 16;
constexpr int64_t kRows = 5000;

class PsMultiProcessTest : public ::testing::Test {
 protected:
  // The step's batch of worker `w`: ids with repeats, and gradients.
  static void Batch(uint32_t w, int step, std::vector<int64_t>* ids, std::vector<float>* g) {
    std::mt19937_64 rng(w * 7919 + step);
    ids->clear();
    g->clear();
    for (int k = 0; k < 64; ++k) ids->push_back(static_cast<int64_t>(rng() % 300) * 13 % kRows);
    for (size_t k = 0; k < ids->size() * kDim; ++k)
      g->push_back(static_cast<float>(static_cast<int>(rng() % 2001) - 1000) / 1000.0f);
  }

  // Waits for a shard's --port-file; the shard writes it once it listens.

  parallax::testing::TempDir dir_;
};

TEST_F(PsMultiProcessTest, TwoShardsThreeWorkersSyncEqualsSingleProcessReference) {
  PsPlan plan;
  plan.consistency = Consistency::kSync;
  plan.num_workers = kWorkers;
  plan.num_shards = 2;
  VariableSpec v;
  v.id = 0;
  v.name = "emb";
  v.rows = kRows;
  v.dim = kDim;
  v.partitions = 4;
  v.scheme = PartitionScheme::kHash;
  v.partition_shards = {0, 1, 1, 0};
  v.optimizer.type = OptimizerType::kMomentum;
  v.optimizer.lr = 0.05f;
  v.init.seed = 11;
  plan.variables.push_back(v);
  const std::string plan_file = dir_.File("plan.json");
  std::ofstream(plan_file) << plan::JobPlanToJson(plan::JobPlanOfPs(plan));

  std::vector<std::unique_ptr<parallax::testing::ChildProcess>> shards;
  std::vector<std::string> endpoints;
  auto start_shards = [&](const std::string& tag) {
    shards.clear();
    endpoints.clear();
    for (int s = 0; s < 2; ++s) {
      const std::string name = tag + "shard" + std::to_string(s);
      shards.push_back(std::make_unique<parallax::testing::ChildProcess>(
          std::vector<std::string>{BinDir() + "/parallax-ps", "--plan", plan_file, "--shard",
                                   std::to_string(s), "--listen", "tcp://127.0.0.1:0",
                                   "--port-file", dir_.File(name + ".endpoint")},
          dir_.File(name + ".log")));
      endpoints.push_back(parallax::testing::WaitForFileWord(dir_.File(name + ".endpoint"), 20'000,
                                                             shards.back().get()));
      if (endpoints.back().empty()) return false;
    }
    return true;
  };
  ASSERT_TRUE(start_shards("")) << "a shard did not start; see its log in " << dir_.path();

  std::vector<std::thread> workers;
  std::atomic<int> failures{0};
  for (uint32_t w = 0; w < kWorkers; ++w) {
    workers.emplace_back([&, w] {
      PsClientOptions o;
      o.plan = plan;
      o.shard_endpoints = endpoints;
      o.worker = w;
      auto c = PsClient::Create(o);
      if (!c.ok()) {
        ++failures;
        return;
      }
      std::vector<int64_t> ids;
      std::vector<float> g, rows;
      for (int step = 0; step < kSteps; ++step) {
        Batch(w, step, &ids, &g);
        auto pull = (*c)->Pull(0, ids, step, &rows);
        if (!pull.ok() || !(*c)->Wait(*pull, DeadlineIn(30'000)).ok()) {
          ++failures;
          return;
        }
        auto push = (*c)->Push(0, ids, g, step);
        if (!push.ok() || !(*c)->Wait(*push, DeadlineIn(30'000)).ok()) {
          ++failures;
          return;
        }
      }
    });
  }
  for (auto& t : workers) t.join();
  ASSERT_EQ(failures, 0);

  // Single-process reference: every step, each worker's rows deduplicated
  // (summed in position order), summed over workers in rank order, mean.
  std::map<int64_t, std::vector<float>> w, m;
  for (int step = 0; step < kSteps; ++step) {
    std::map<int64_t, std::vector<float>> total;
    for (uint32_t r = 0; r < kWorkers; ++r) {
      std::vector<int64_t> ids;
      std::vector<float> g;
      Batch(r, step, &ids, &g);
      std::map<int64_t, std::vector<float>> mine;
      for (size_t i = 0; i < ids.size(); ++i) {
        auto& row = mine[ids[i]];
        row.resize(kDim, 0.0f);
        for (uint32_t j = 0; j < kDim; ++j) row[j] += g[i * kDim + j];
      }
      for (auto& [id, row] : mine) {
        auto& t = total[id];
        t.resize(kDim, 0.0f);
        for (uint32_t j = 0; j < kDim; ++j) t[j] += row[j];
      }
    }
    for (auto& [id, t] : total) {
      if (!w.count(id)) {
        w[id].resize(kDim);
        InitializeRow(v.init, 0, id, kDim, w[id].data());
        m[id].assign(kDim, 0.0f);
      }
      for (float& x : t) x /= static_cast<float>(kWorkers);
      optim::ApplyUpdate(v.optimizer, v.optimizer.lr, kDim, t.data(), w[id].data(), m[id].data(), nullptr, nullptr);
    }
  }

  PsClientOptions o;
  o.plan = plan;
  o.shard_endpoints = endpoints;
  auto c = PsClient::Create(o);
  ASSERT_TRUE(c.ok());
  std::vector<int64_t> ids;
  for (auto& [id, row] : w) ids.push_back(id);
  ASSERT_GT(ids.size(), 100u);
  std::vector<float> rows;
  auto t = (*c)->Pull(0, ids, kSteps, &rows);
  ASSERT_TRUE(t.ok());
  ASSERT_TRUE((*c)->Wait(*t, DeadlineIn(30'000)).ok());
  int differing = 0;
  for (size_t i = 0; i < ids.size(); ++i)
    for (uint32_t j = 0; j < kDim; ++j) differing += rows[i * kDim + j] != w[ids[i]][j];
  EXPECT_EQ(differing, 0) << "of " << ids.size() * kDim << " values";

  std::vector<std::string> stats;
  auto st = (*c)->Stats(&stats);
  ASSERT_TRUE(st.ok());
  ASSERT_TRUE((*c)->Wait(*st, DeadlineIn(30'000)).ok());
  for (const auto& s : stats) EXPECT_NE(s.find("\"sync_steps_applied\""), std::string::npos);

  // Checkpoint at step 50, restart both shards, restore: the same table.
  const std::string ckpt = dir_.File("ckpt");
  std::filesystem::create_directories(ckpt);
  auto save = (*c)->Save(ckpt, kSteps);
  ASSERT_TRUE(save.ok());
  Status saved = (*c)->Wait(*save, DeadlineIn(30'000));
  ASSERT_TRUE(saved.ok()) << saved.ToString();
  c->reset();
  for (auto& s : shards) {
    s->Signal(SIGTERM);
    const int status = s->Wait(10'000);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
  }
  ASSERT_TRUE(start_shards("restarted-"));
  o.shard_endpoints = endpoints;
  auto fresh = PsClient::Create(o);
  ASSERT_TRUE(fresh.ok());
  auto load = (*fresh)->Load(ckpt);
  ASSERT_TRUE(load.ok());
  Status loaded = (*fresh)->Wait(*load, DeadlineIn(30'000));
  ASSERT_TRUE(loaded.ok()) << loaded.ToString();
  std::vector<float> restored;
  auto again = (*fresh)->Pull(0, ids, kSteps, &restored);
  ASSERT_TRUE(again.ok());
  ASSERT_TRUE((*fresh)->Wait(*again, DeadlineIn(30'000)).ok());
  EXPECT_EQ(restored, rows);
}

}  // namespace
}  // namespace parallax::ps
