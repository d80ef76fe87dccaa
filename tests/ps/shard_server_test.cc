// ShardServer and PsClient together, in one process: worker threads with
// their own clients against real shard servers on loopback.
#include "ps/shard_server.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <set>
#include <thread>

#include "core/ps/client.h"
#include "tests/ps/ps_test_util.h"
#include "core/ps/initializer.h"

namespace parallax::ps {
namespace {

constexpr uint32_t kDim = 8;
constexpr int64_t kWaitMs = 10'000;

class ShardServerTest : public ::testing::Test {
 protected:
  PsPlan MakePlan(Consistency mode, uint32_t workers, uint32_t shards, uint32_t partitions) {
    PsPlan plan;
    plan.consistency = mode;
    plan.num_workers = workers;
    plan.num_shards = shards;
    VariableSpec v;
    v.id = 0;
    v.name = "emb";
    v.rows = 200;
    v.dim = kDim;
    v.partitions = partitions;
    v.optimizer.type = OptimizerType::kSgd;
    v.optimizer.lr = 0.1f;
    for (uint32_t p = 0; p < partitions; ++p) v.partition_shards.push_back(p % shards);
    plan.variables.push_back(v);
    return plan;
  }

  void StartShards(const PsPlan& plan) {
    plan_ = plan;
    endpoints_ = testing::StartShardServers(plan, &servers_);
    ASSERT_EQ(endpoints_.size(), plan.num_shards);
  }

  std::unique_ptr<PsClient> Client(uint32_t worker) {
    return testing::ConnectClient(plan_, endpoints_, worker);
  }

  static void Ok(PsClient* c, StatusOr<Ticket> t) {
    ASSERT_TRUE(t.ok()) << t.status().ToString();
    Status s = c->Wait(*t, DeadlineIn(kWaitMs));
    ASSERT_TRUE(s.ok()) << s.ToString();
  }

  PsPlan plan_;
  std::vector<std::string> endpoints_;
  std::vector<std::unique_ptr<ShardServer>> servers_;
};

TEST_F(ShardServerTest, AsyncSlowWorkerPushesStaleGradients) {
  StartShards(MakePlan(Consistency::kAsync, 2, 1, 2));
  auto fast = Client(0);
  auto slow = Client(1);
  std::vector<int64_t> ids = {1, 2, 3, 4};
  std::vector<float> rows, grads(ids.size() * kDim, 0.01f);
  Ok(slow.get(), slow->Pull(0, ids, 0, &rows));
  // The slow worker computes while the fast one runs ten steps.
  std::thread fast_worker([&] {
    std::vector<float> r;
    for (int step = 0; step < 10; ++step) {
      Ok(fast.get(), fast->Pull(0, ids, step, &r));
      Ok(fast.get(), fast->Push(0, ids, grads, step));
    }
  });
  fast_worker.join();
  Ok(slow.get(), slow->Push(0, ids, grads, 0));
  std::vector<std::string> stats;
  Ok(slow.get(), slow->Stats(&stats));
  auto j = nlohmann::json::parse(stats[0]);
  const auto hist = j["staleness_histogram"].get<std::vector<int64_t>>();
  int64_t fresh = hist[0], stale = 0;
  for (size_t b = 1; b < hist.size(); ++b) stale += hist[b];
  EXPECT_EQ(fresh, 20) << stats[0];  // 10 fast pushes × 2 partitions
  EXPECT_EQ(stale, 2) << stats[0];   // the slow push, τ = 10, on each partition
  EXPECT_EQ(hist[4], 2) << stats[0];  // [8, 16)
}

// What the coordinator is sent (ps/stats_reporter.h) is the server's
// snapshot: the same counters STATS answers.
TEST_F(ShardServerTest, SnapshotHasTheCountersStatsReports) {
  StartShards(MakePlan(Consistency::kAsync, 2, 1, 2));
  auto fast = Client(0);
  auto slow = Client(1);
  std::vector<int64_t> ids = {1, 2, 3, 4};
  std::vector<float> rows, grads(ids.size() * kDim, 0.01f);
  Ok(slow.get(), slow->Pull(0, ids, 0, &rows));
  for (int step = 0; step < 10; ++step) {
    Ok(fast.get(), fast->Pull(0, ids, step, &rows));
    Ok(fast.get(), fast->Push(0, ids, grads, step));  // τ = 0
  }
  Ok(slow.get(), slow->Push(0, ids, grads, 0));  // τ = 10 on each partition
  std::vector<std::string> stats;
  Ok(slow.get(), slow->Stats(&stats));
  auto j = nlohmann::json::parse(stats[0]);
  // The loop publishes its snapshot once it has drained the messages that
  // were waiting, after it answered them: an answer can arrive before the
  // snapshot that counts it (the reporter reads it every 2 s). Wait for it.
  ShardSnapshot snap = servers_[0]->Snapshot();
  const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(kWaitMs);
  while (snap.stats.pushes < j["pushes"].get<int64_t>() && std::chrono::steady_clock::now() < until) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
    snap = servers_[0]->Snapshot();
  }
  EXPECT_EQ(snap.stats.pushes, j["pushes"].get<int64_t>());
  EXPECT_EQ(snap.stats.pushes, 22);  // 11 pushes × 2 partitions
  EXPECT_EQ(snap.stats.rows_pushed, j["rows_pushed"].get<int64_t>());
  const auto hist = j["staleness_histogram"].get<std::vector<int64_t>>();
  EXPECT_EQ(std::vector<int64_t>(snap.stats.staleness.begin(), snap.stats.staleness.end()), hist);
  EXPECT_EQ(snap.stats.staleness_sum, 20);  // τ = 10 twice, the fast pushes 0
  EXPECT_EQ(snap.rows_held, 4);
}

TEST_F(ShardServerTest, AsyncAppliesEveryPushExactlyOnce) {
  PsPlan plan = MakePlan(Consistency::kAsync, 3, 2, 4);
  plan.variables[0].init.type = Initializer::Type::kZeros;
  plan.variables[0].optimizer.lr = 1.0f;
  StartShards(plan);
  std::vector<std::thread> workers;
  for (uint32_t w = 0; w < 3; ++w) {
    workers.emplace_back([this, w] {
      auto c = Client(w);
      std::vector<int64_t> ids;
      for (int64_t id = 0; id < 20; ++id) ids.push_back(id);
      std::vector<float> g(ids.size() * kDim, 1.0f);
      std::vector<Ticket> tickets;
      for (int step = 0; step < 40; ++step) {
        auto t = c->Push(0, ids, g, step);  // fire and forget, waited at the end
        ASSERT_TRUE(t.ok());
        tickets.push_back(*t);
      }
      for (Ticket t : tickets) ASSERT_TRUE(c->Wait(t, DeadlineIn(kWaitMs)).ok());
    });
  }
  for (auto& t : workers) t.join();
  auto c = Client(0);
  std::vector<int64_t> ids = {0, 7, 19, 20};
  std::vector<float> rows;
  Ok(c.get(), c->Pull(0, ids, 0, &rows));
  for (uint32_t j = 0; j < kDim; ++j) {
    EXPECT_EQ(rows[0 * kDim + j], -120.0f);
    EXPECT_EQ(rows[2 * kDim + j], -120.0f);
    EXPECT_EQ(rows[3 * kDim + j], 0.0f);
  }
}

TEST_F(ShardServerTest, SspNeverLetsAWorkerRunMoreThanStalenessAhead) {
  PsPlan plan = MakePlan(Consistency::kSsp, 3, 2, 2);
  plan.staleness = 2;
  StartShards(plan);
  std::array<std::atomic<int64_t>, 3> finished{};  // steps each worker has pushed
  std::atomic<int> violations{0};
  std::atomic<int64_t> max_lead{0};
  std::vector<std::thread> workers;
  for (uint32_t w = 0; w < 3; ++w) {
    workers.emplace_back([&, w] {
      auto c = Client(w);
      std::mt19937 rng(w);
      std::vector<float> rows;
      for (int64_t step = 0; step < 30; ++step) {
        std::vector<int64_t> ids = {static_cast<int64_t>(rng() % 200), static_cast<int64_t>(rng() % 200)};
        if (ids[0] == ids[1]) ids.pop_back();
        Ok(c.get(), c->Pull(0, ids, step, &rows));
        int64_t slowest = finished[0];
        for (auto& f : finished) slowest = std::min<int64_t>(slowest, f);
        if (step - slowest > plan.staleness) ++violations;
        int64_t lead = step - slowest;
        int64_t prev = max_lead.load();
        while (lead > prev && !max_lead.compare_exchange_weak(prev, lead)) {}
        // Worker 2 is slow: it does extra work every step.
        if (w == 2) {
          volatile double x = 0;
          for (int i = 0; i < 200000; ++i) x = x + std::sqrt(static_cast<double>(i));
        }
        std::vector<float> g(ids.size() * kDim, 0.01f);
        finished[w] = step + 1;  // before the push, so the shard never knows more than this
        Ok(c.get(), c->Push(0, ids, g, step));
        Ok(c.get(), c->Clock(step));
      }
    });
  }
  for (auto& t : workers) t.join();
  EXPECT_EQ(violations, 0);
  EXPECT_LE(max_lead, plan.staleness);
}

TEST_F(ShardServerTest, SyncWorkersEqualSerialReference) {
  PsPlan plan = MakePlan(Consistency::kSync, 3, 2, 4);
  plan.variables[0].optimizer.type = OptimizerType::kAdagrad;
  plan.variables[0].optimizer.initial_accumulator = 0.1f;
  StartShards(plan);
  constexpr int kSteps = 15;
  auto batch = [](uint32_t w, int step, std::vector<int64_t>* ids, std::vector<float>* g) {
    std::mt19937 rng(w * 1000 + step);
    ids->clear();
    g->clear();
    for (int k = 0; k < 12; ++k) ids->push_back(rng() % 50);  // repeats on purpose
    for (size_t k = 0; k < ids->size() * kDim; ++k) g->push_back((rng() % 2001) / 1000.0f - 1.0f);
  };
  std::vector<std::thread> workers;
  for (uint32_t w = 0; w < 3; ++w) {
    workers.emplace_back([&, w] {
      auto c = Client(w);
      std::vector<int64_t> ids;
      std::vector<float> g, rows;
      for (int step = 0; step < kSteps; ++step) {
        batch(w, step, &ids, &g);
        Ok(c.get(), c->Pull(0, ids, step, &rows));
        Ok(c.get(), c->Push(0, ids, g, step));
      }
    });
  }
  for (auto& t : workers) t.join();
  // Serial reference: per step, per worker dedupe-sum in position order,
  // then sum workers in rank order, mean, Adagrad.
  const auto& spec = plan.variables[0];
  std::map<int64_t, std::vector<float>> w, a;
  for (int64_t id = 0; id < 50; ++id) {
    w[id].resize(kDim);
    InitializeRow(spec.init, 0, id, kDim, w[id].data());
    a[id].assign(kDim, 0.1f);
  }
  for (int step = 0; step < kSteps; ++step) {
    std::map<int64_t, std::vector<float>> total;
    for (uint32_t r = 0; r < 3; ++r) {
      std::vector<int64_t> ids;
      std::vector<float> g;
      batch(r, step, &ids, &g);
      std::map<int64_t, std::vector<float>> mine;
      for (size_t i = 0; i < ids.size(); ++i) {
        auto& m = mine[ids[i]];
        m.resize(kDim, 0.0f);
        for (uint32_t j = 0; j < kDim; ++j) m[j] += g[i * kDim + j];
      }
      for (auto& [id, m] : mine) {
        auto& t = total[id];
        t.resize(kDim, 0.0f);
        for (uint32_t j = 0; j < kDim; ++j) t[j] += m[j];
      }
    }
    for (auto& [id, t] : total) {
      for (uint32_t j = 0; j < kDim; ++j) {
        const float gj = t[j] / 3.0f;
        a[id][j] += gj * gj;
        w[id][j] -= spec.optimizer.lr * gj / (std::sqrt(a[id][j]) + spec.optimizer.epsilon);
      }
    }
  }
  auto c = Client(0);
  std::vector<int64_t> all;
  for (int64_t id = 0; id < 50; ++id) all.push_back(id);
  std::vector<float> rows;
  Ok(c.get(), c->Pull(0, all, kSteps, &rows));
  for (int64_t id = 0; id < 50; ++id)
    for (uint32_t j = 0; j < kDim; ++j) EXPECT_EQ(rows[id * kDim + j], w[id][j]) << id << "," << j;
}

TEST_F(ShardServerTest, PushPullReturnsUpdatedRowsInOneRoundTrip) {
  PsPlan plan = MakePlan(Consistency::kAsync, 1, 2, 2);
  plan.variables[0].init.type = Initializer::Type::kZeros;
  plan.value_encoding = ValueEncoding::kFp16;
  StartShards(plan);
  auto c = Client(0);
  std::vector<int64_t> ids = {5, 150, 5};
  std::vector<float> g(ids.size() * kDim, 1.0f), rows;
  Ok(c.get(), c->PushPull(0, ids, g, 0, &rows));
  ASSERT_EQ(rows.size(), ids.size() * kDim);
  EXPECT_NEAR(rows[0], -0.2f, 1e-3);  // id 5 twice, summed
  EXPECT_NEAR(rows[kDim], -0.1f, 1e-3);
  EXPECT_EQ(rows[2 * kDim], rows[0]);
}

}  // namespace
}  // namespace parallax::ps
