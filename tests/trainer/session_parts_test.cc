// The Session's parts, each alone: the VariableRegistry (what a rank
// registers and samples), DenseSync (the all-reduce path) with ranks as
// threads on loopback Gloo, and SparseSync (the all-gather path with ranks
// as threads; the PS path against a real in-process shard server).
#include <gtest/gtest.h>

#include <cmath>
#include <numeric>

#include "core/ps/initializer.h"
#include "ps/shard_server.h"
#include "schemas/metric_names.h"
#include "tests/core/comm/rank_threads.h"
#include "trainer/dense_sync.h"
#include "trainer/sparse_sync.h"
#include "trainer/variable_registry.h"

namespace parallax::trainer {
namespace {

using comm::testing::CreateGlooWorld;
using comm::testing::RunRanks;

plan::PlannedVariable Dense(uint32_t id, const std::string& name, size_t size, float lr) {
  plan::PlannedVariable v;
  v.id = id;
  v.name = name;
  v.size = size;
  v.rows = 1;
  v.dim = static_cast<uint32_t>(size);
  v.optimizer.type = OptimizerType::kSgd;
  v.optimizer.lr = lr;
  return v;
}

plan::PlannedVariable Table(uint32_t id, const std::string& name, int64_t rows, uint32_t dim,
                            VariablePath path, float lr) {
  plan::PlannedVariable v;
  v.id = id;
  v.name = name;
  v.sparse = true;
  v.rows = rows;
  v.dim = dim;
  v.path = path;
  v.optimizer.type = OptimizerType::kSgd;
  v.optimizer.lr = lr;
  return v;
}

// ---- VariableRegistry ----

TEST(VariableRegistryTest, RegistersInOrderWithTheJobsOptimizers) {
  JobConfig job;
  job.dense_optimizer.type = OptimizerType::kAdam;
  job.sparse_optimizer.type = OptimizerType::kAdagrad;
  VariableRegistry r(job);
  EXPECT_EQ(*r.RegisterDense("w", 2000, {}), 0);
  VariableOptions own;
  own.optimizer = OptimizerSettings();  // SGD
  own.init.seed = 7;
  EXPECT_EQ(*r.RegisterSparse("emb", 100, 8, own), 1);
  EXPECT_EQ(*r.RegisterSparse("emb2", 10, 2, {}), 2);
  EXPECT_EQ(r.input(0).var.optimizer.type, OptimizerType::kAdam);
  EXPECT_EQ(r.input(0).var.dim, 1024u);  // dense rows of DenseRowDim(2000)
  EXPECT_EQ(r.input(0).var.rows, 2);
  EXPECT_EQ(r.input(1).var.optimizer.type, OptimizerType::kSgd);
  EXPECT_EQ(r.input(1).var.init.seed, 7u);
  EXPECT_EQ(r.input(2).var.optimizer.type, OptimizerType::kAdagrad);
  ASSERT_EQ(r.Registered().size(), 3u);
  EXPECT_EQ(r.Registered()[1].name, "emb");
}

// scale_lr_with_workers: the table's lr per worker, times the attempt's
// workers; a variable's own optimizer is not scaled.
TEST(VariableRegistryTest, ScalesTheJobsLearningRateWithTheWorkers) {
  JobConfig job;
  job.dense_optimizer.lr = 0.5f;
  job.sparse_optimizer.lr = 0.25f;
  job.sparse_scale_lr_with_workers = true;
  VariableRegistry r(job, 3);
  ASSERT_TRUE(r.RegisterDense("w", 4, {}).ok());
  ASSERT_TRUE(r.RegisterSparse("emb", 10, 2, {}).ok());
  VariableOptions own;
  own.optimizer = OptimizerSettings();
  own.optimizer->lr = 0.1f;
  ASSERT_TRUE(r.RegisterSparse("own", 10, 2, own).ok());
  EXPECT_FLOAT_EQ(r.input(0).var.optimizer.lr, 0.5f);
  EXPECT_FLOAT_EQ(r.input(1).var.optimizer.lr, 0.75f);
  EXPECT_FLOAT_EQ(r.input(2).var.optimizer.lr, 0.1f);
}

TEST(VariableRegistryTest, RefusesBadRegistrationsNamingTheVariable) {
  VariableRegistry r{JobConfig()};
  ASSERT_TRUE(r.RegisterDense("w", 4, {}).ok());
  EXPECT_EQ(r.RegisterDense("w", 4, {}).status().code(), StatusCode::kAlreadyExists);
  EXPECT_EQ(r.RegisterDense("z", 0, {}).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(r.RegisterSparse("t", 0, 4, {}).status().code(), StatusCode::kInvalidArgument);
  VariableOptions values;
  values.initial_values = {1, 2, 3};
  Status st = r.RegisterDense("v", 4, values).status();
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("\"v\""), std::string::npos) << st.message();
  EXPECT_EQ(r.RegisterSparse("t", 4, 1, values).status().code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(r.RegisterSparse("t3", 3, 1, values).ok());  // rows × dim values
  VariableOptions bad_lr;
  bad_lr.optimizer = OptimizerSettings();
  bad_lr.optimizer->lr = -1;
  st = r.RegisterDense("x", 4, bad_lr).status();
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("variable \"x\""), std::string::npos) << st.message();
  EXPECT_EQ(r.Check(5, false, "Gradient").code(), StatusCode::kNotFound);
  EXPECT_EQ(r.Check(0, true, "Lookup").code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(r.SampleIds(0, std::vector<int64_t>{1}).code(), StatusCode::kInvalidArgument);
  r.Close();
  st = r.RegisterDense("late", 4, {}).status();
  EXPECT_EQ(st.code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(st.message().find("after Start()"), std::string::npos) << st.message();
}

TEST(VariableRegistryTest, KeepsAFewSampledBatches) {
  VariableRegistry r{JobConfig()};
  const int t = *r.RegisterSparse("t", 1000, 4, {});
  for (size_t b = 0; b < VariableRegistry::kMaxSampledBatches + 10; ++b) {
    ASSERT_TRUE(r.SampleIds(t, std::vector<int64_t>{static_cast<int64_t>(b), 3}).ok());
  }
  const plan::VariableInput& in = r.input(t);
  ASSERT_EQ(in.sampled_batches.size(), VariableRegistry::kMaxSampledBatches);
  EXPECT_EQ(in.sampled_batches[5], (std::vector<int64_t>{5, 3}));
}

// ---- DenseSync ----

class DenseSyncTest : public ::testing::Test {
 protected:
  Timeline timeline_;  // the null recorder
};

// Two ranks: "w" gets both ranks' gradients, "b" only rank 0's (rank 1's
// counts as zero), the table "t" rows from both; every rank ends with the
// same values, the SGD update of the mean gradient. Buckets of 8 bytes
// make every gradient its own call.
TEST_F(DenseSyncTest, AveragesEveryRanksGradientsAndAppliesTheOptimizer) {
  for (size_t bucket : {size_t{64} << 20, size_t{8}}) {
    auto store = comm::NewInMemoryRendezvousStore();
    auto comms = CreateGlooWorld(2, store.get(), "dense" + std::to_string(bucket));
    ASSERT_EQ(comms.size(), 2u);
    std::vector<std::vector<float>> w(2), b(2), t(2);
    RunRanks(2, [&](int r) {
      StepMetrics metrics;
      DenseSync::Options o;
      o.fusion_bucket_bytes = bucket;
      DenseSync dense(o, comms[r].get(), &timeline_, &metrics);
      dense.Add(Dense(0, "w", 3, 0.5f), {1, 1, 1});
      dense.Add(Dense(1, "b", 2, 1.0f), {0, 0});
      dense.Add(Table(2, "t", 4, 2, VariablePath::kAllReduce, 1.0f), std::vector<float>(8, 0));
      ASSERT_TRUE(dense.Gradient(0, std::vector<float>{2.0f * (r + 1), 0, -2}).ok());
      EXPECT_TRUE(dense.HasGradient(0));
      if (r == 0) {
        ASSERT_TRUE(dense.Gradient(1, std::vector<float>{4, 4}).ok());
      }
      dense.AddRows(2, std::vector<int64_t>{r, 3}, std::vector<float>{1, 1, 2, 2});
      ASSERT_TRUE(dense.Finish().ok());
      EXPECT_FALSE(dense.HasGradient(0));
      auto span = [](std::span<const float> s) { return std::vector<float>(s.begin(), s.end()); };
      w[r] = span(dense.Values(0));
      b[r] = span(dense.Values(1));
      t[r] = span(dense.Values(2));
    });
    for (int r = 0; r < 2; ++r) {
      EXPECT_EQ(w[r], (std::vector<float>{1 - 0.5f * 3, 1, 1 + 0.5f * 2})) << r;
      EXPECT_EQ(b[r], (std::vector<float>{-2, -2})) << r;
      // Row 0 from rank 0, row 1 from rank 1 (each 1/2 after the mean),
      // row 3 from both (2 + 2) / 2.
      EXPECT_EQ(t[r], (std::vector<float>{-0.5f, -0.5f, -0.5f, -0.5f, 0, 0, -2, -2})) << r;
    }
  }
}

TEST_F(DenseSyncTest, RankZerosValuesWinAndOneRankNeedsNoCommunicator) {
  auto store = comm::NewInMemoryRendezvousStore();
  auto comms = CreateGlooWorld(2, store.get(), "broadcast");
  ASSERT_EQ(comms.size(), 2u);
  std::vector<std::vector<float>> got(2);
  RunRanks(2, [&](int r) {
    StepMetrics metrics;
    DenseSync dense({}, comms[r].get(), &timeline_, &metrics);
    dense.Add(Dense(0, "w", 2, 1.0f), {static_cast<float>(r), 10.0f + r});
    ASSERT_TRUE(dense.BroadcastDenseValues().ok());
    got[r].assign(dense.Values(0).begin(), dense.Values(0).end());
  });
  EXPECT_EQ(got[0], (std::vector<float>{0, 10}));
  EXPECT_EQ(got[1], got[0]);

  StepMetrics metrics;
  DenseSync alone({}, nullptr, &timeline_, &metrics);
  alone.Add(Dense(0, "w", 2, 0.1f), {1, 1});
  ASSERT_TRUE(alone.BroadcastDenseValues().ok());
  ASSERT_TRUE(alone.Gradient(0, std::vector<float>{10, 0}).ok());
  ASSERT_TRUE(alone.Finish().ok());
  EXPECT_EQ(std::vector<float>(alone.Values(0).begin(), alone.Values(0).end()),
            (std::vector<float>{0, 1}));
  std::vector<HeldVariable> held;
  alone.AppendHeld(&held);
  ASSERT_EQ(held.size(), 1u);
  EXPECT_EQ(held[0].name, "w");
  EXPECT_NE(held[0].dense_opt, nullptr);
}

// ---- SparseSync ----

class SparseSyncTest : public ::testing::Test {
 protected:
  Timeline timeline_;
};

// All-gather: both ranks' rows averaged into every replica.
TEST_F(SparseSyncTest, AllGatherAppliesEveryRanksRowsToEveryReplica) {
  auto store = comm::NewInMemoryRendezvousStore();
  auto comms = CreateGlooWorld(2, store.get(), "allgather");
  ASSERT_EQ(comms.size(), 2u);
  plan::JobPlan plan;
  std::vector<std::vector<float>> got(2);
  RunRanks(2, [&](int r) {
    StepMetrics metrics;
    SparseSync sparse({}, &plan, comms[r].get(), nullptr, PsConnection(), &timeline_, &metrics);
    sparse.AddAllGather(Table(0, "t", 3, 1, VariablePath::kAllGather, 1.0f), {0, 0, 0});
    sparse.AddRows(0, std::vector<int64_t>{r, 2}, std::vector<float>{4, 1});
    EXPECT_TRUE(sparse.HasGradient(0));
    ASSERT_TRUE(sparse.StartPushes(0).ok());
    ASSERT_TRUE(sparse.ExchangeAllGather().ok());
    ASSERT_TRUE(sparse.FinishPushes(0).ok());
    EXPECT_FALSE(sparse.HasGradient(0));
    std::vector<float> rows;
    ASSERT_TRUE(sparse.Lookup(0, std::vector<int64_t>{0, 1, 2}, 1, &rows).ok());
    got[r] = rows;
  });
  EXPECT_EQ(got[0], (std::vector<float>{-2, -2, -1}));
  EXPECT_EQ(got[1], got[0]);
}

// `v` on the PS path of `plan`, in `partitions` partitions of shard 0.
void AddToPs(const plan::PlannedVariable& v, uint32_t partitions, plan::JobPlan* plan) {
  plan->variables.push_back(v);
  ps::VariableSpec spec;
  spec.id = v.id;
  spec.name = v.name;
  spec.rows = v.rows;
  spec.dim = v.dim;
  spec.partitions = partitions;
  spec.partition_shards.assign(partitions, 0);
  spec.optimizer = v.optimizer;
  plan->ps.variables.push_back(spec);
}

// A real in-process shard server for `plan` and a connection to it.
struct PsServer {
  std::unique_ptr<ps::ShardServer> server;
  PsConnection conn;
};
PsServer StartPs(const plan::JobPlan& plan) {
  PsServer out;
  ps::ShardServerOptions so;
  so.shard.plan = plan.ps;
  so.shard.shard = 0;
  auto server = ps::ShardServer::Start(so);
  EXPECT_TRUE(server.ok()) << server.status().ToString();
  if (!server.ok()) return out;
  out.server = std::move(server).value();
  ps::PsClientOptions po;
  po.plan = plan.ps;
  po.shard_endpoints = {out.server->endpoint()};
  out.conn.endpoints = po.shard_endpoints;
  auto client = ps::PsClient::Create(po);
  EXPECT_TRUE(client.ok()) << client.status().ToString();
  if (client.ok()) out.conn.client = std::move(client).value();
  return out;
}

// The PS path against a real shard server: a prefetch serves the next
// step's lookups of the ids it holds, a push is applied once the step finishes, and the
// pulled rows are the shard's.
TEST_F(SparseSyncTest, PsPathPullsPrefetchesAndPushes) {
  plan::JobPlan plan;
  plan::PlannedVariable t = Table(0, "emb", 50, 2, VariablePath::kPs, 0.5f);
  AddToPs(t, 2, &plan);
  PsServer ps = StartPs(plan);
  ASSERT_NE(ps.conn.client, nullptr);
  PsConnection conn = std::move(ps.conn);

  StepMetrics metrics;
  SparseSync sparse({}, &plan, nullptr, nullptr, std::move(conn), &timeline_, &metrics);
  sparse.AddPs(t);
  std::vector<float> initial(2), rows;
  ps::InitializeRow(t.init, 0, 7, 2, initial.data());
  ASSERT_TRUE(sparse.Lookup(0, std::vector<int64_t>{7}, 0, &rows).ok());
  EXPECT_EQ(rows, initial);
  sparse.AddRows(0, std::vector<int64_t>{7, 7}, std::vector<float>{1, 2, 1, 2});  // summed
  ASSERT_TRUE(sparse.Prefetch(0, std::vector<int64_t>{7, 9}, 1).ok());
  ASSERT_TRUE(sparse.StartPushes(0).ok());
  ASSERT_TRUE(sparse.ExchangeAllGather().ok());
  ASSERT_TRUE(sparse.FinishPushes(0).ok());
  ASSERT_TRUE(sparse.AdvancePrefetches().ok());
  ASSERT_TRUE(sparse.Lookup(0, std::vector<int64_t>{7, 9}, 1, &rows).ok());
  ASSERT_EQ(rows.size(), 4u);
  EXPECT_FLOAT_EQ(rows[0], initial[0] - 0.5f * 2);
  EXPECT_FLOAT_EQ(rows[1], initial[1] - 0.5f * 4);
  // Every lookup of the step whose ids the prefetch holds is served from it
  // (no pull leaves); one with another id is pulled.
  const int64_t pulled = sparse.ps()->transport_bytes().pull_sent;
  std::vector<float> again;
  ASSERT_TRUE(sparse.Lookup(0, std::vector<int64_t>{9, 7, 9}, 1, &again).ok());
  EXPECT_EQ(again, (std::vector<float>{rows[2], rows[3], rows[0], rows[1], rows[2], rows[3]}));
  EXPECT_EQ(sparse.ps()->transport_bytes().pull_sent, pulled);
  ASSERT_TRUE(sparse.Lookup(0, std::vector<int64_t>{7, 8}, 1, &again).ok());
  EXPECT_GT(sparse.ps()->transport_bytes().pull_sent, pulled);
  EXPECT_EQ(std::vector<float>(again.begin(), again.begin() + 2),
            std::vector<float>(rows.begin(), rows.begin() + 2));
  std::vector<float> read;
  ASSERT_TRUE(sparse.ReadSparse(0, 7, 1, 1, &read).ok());
  EXPECT_EQ(read, std::vector<float>(rows.begin(), rows.begin() + 2));
}

// Given initial values reach the shards before the first pull: a table's
// rows across partitions, a dense variable's values (its last row padded).
TEST_F(SparseSyncTest, PsPathStartsFromTheGivenInitialValues) {
  plan::JobPlan plan;
  AddToPs(Table(0, "emb", 50, 2, VariablePath::kPs, 0.5f), 3, &plan);
  plan::PlannedVariable w = Dense(1, "w", 5, 0.5f);
  w.path = VariablePath::kPs;
  w.dim = 2;
  w.rows = 3;
  AddToPs(w, 1, &plan);
  PsServer ps = StartPs(plan);
  ASSERT_NE(ps.conn.client, nullptr);
  StepMetrics metrics;
  SparseSync sparse({}, &plan, nullptr, nullptr, std::move(ps.conn), &timeline_, &metrics);
  sparse.AddPs(plan.variables[0]);
  sparse.AddPs(plan.variables[1]);
  std::vector<float> table(100), dense = {1, 2, 3, 4, 5};
  std::iota(table.begin(), table.end(), 0.0f);
  ASSERT_TRUE(sparse.WriteInitialValues({{0, table}, {1, dense}}, /*rank0=*/true).ok());
  std::vector<float> rows;
  ASSERT_TRUE(sparse.Lookup(0, std::vector<int64_t>{49, 0, 17}, 0, &rows).ok());
  EXPECT_EQ(rows, (std::vector<float>{98, 99, 0, 1, 34, 35}));
  ASSERT_TRUE(sparse.PullDenseValues().ok());
  const std::span<const float> got = sparse.DenseValues(1);
  EXPECT_EQ(std::vector<float>(got.begin(), got.end()), dense);
  // A rank other than 0 writes nothing.
  ASSERT_TRUE(sparse.WriteInitialValues({{0, std::vector<float>(100, 7.0f)}}, false).ok());
  ASSERT_TRUE(sparse.Lookup(0, std::vector<int64_t>{1}, 0, &rows).ok());
  EXPECT_EQ(rows, (std::vector<float>{2, 3}));
}


// ---- SparseSync's row cache (async) ----

// An async plan with `emb` (50 rows of dim 2, SGD lr 1) in 2 partitions,
// and a second worker's client to the same shard.
struct CachedPs {
  plan::JobPlan plan;
  PsServer ps;
  std::unique_ptr<ps::PsClient> writer;
  std::vector<float> Row(int64_t id) {  // the shard's row now
    std::vector<float> out;
    auto t = writer->Pull(0, std::vector<int64_t>{id}, 0, &out);
    EXPECT_TRUE(t.ok() && writer->Wait(*t, ps::DeadlineIn(10'000)).ok());
    return out;
  }
  void Add(int64_t id, float delta, int64_t clock) {  // a push of gradient -delta
    auto t = writer->Push(0, std::vector<int64_t>{id}, std::vector<float>{-delta, -delta}, clock);
    ASSERT_TRUE(t.ok());
    ASSERT_TRUE(writer->Wait(*t, ps::DeadlineIn(10'000)).ok());
  }
};
std::unique_ptr<CachedPs> StartCachedPs() {
  auto out = std::make_unique<CachedPs>();
  out->plan.ps.consistency = Consistency::kAsync;
  out->plan.ps.num_workers = 2;
  AddToPs(Table(0, "emb", 50, 2, VariablePath::kPs, 1.0f), 2, &out->plan);
  out->ps = StartPs(out->plan);
  if (out->ps.conn.client == nullptr) return nullptr;
  ps::PsClientOptions po;
  po.plan = out->plan.ps;
  po.shard_endpoints = out->ps.conn.endpoints;
  po.worker = 1;
  auto writer = ps::PsClient::Create(po);
  EXPECT_TRUE(writer.ok());
  if (!writer.ok()) return nullptr;
  out->writer = std::move(writer).value();
  return out;
}

// A SparseSync over `c`'s shard, its table added, whose cache checks row
// versions (cache_rule = "version") with bound `staleness`.
std::unique_ptr<SparseSync> VersionCheckedSync(CachedPs* c, int64_t staleness, Timeline* timeline,
                                               StepMetrics* metrics) {
  SparseSync::Options o;
  o.cache_staleness = staleness;
  o.cache_check_versions = true;
  auto sparse = std::make_unique<SparseSync>(o, &c->plan, nullptr, nullptr, std::move(c->ps.conn),
                                             timeline, metrics);
  sparse->AddPs(c->plan.variables[0]);
  return sparse;
}

// The bound, with another worker updating a row before every step: a row
// read at step c holds every update applied before the pull for a step at
// or after c − staleness (3 of them at most missing), and the cache does
// serve it in between. Accumulated, gradients of a cached row wait in the
// cache and go at the last step the row serves. With the shard gone, the cache serves
// what it may and no further: the next lookup waits for the shard.
TEST_F(SparseSyncTest, RowCacheReadsNoRowOlderThanItsStaleness) {
  auto c = StartCachedPs();
  ASSERT_NE(c, nullptr);
  SparseSync::Options o;
  o.cache_staleness = 2;
  o.cache_accumulate = true;
  o.step_timeout = std::chrono::milliseconds(1500);
  StepMetrics metrics;
  SparseSync sparse(o, &c->plan, nullptr, nullptr, std::move(c->ps.conn), &timeline_, &metrics);
  sparse.AddPs(c->plan.variables[0]);
  const std::vector<float> row7 = c->Row(7), row9 = c->Row(9);
  std::vector<int64_t> seen;  // updates of row 7 each step's lookup holds
  for (int64_t step = 0; step < 10; ++step) {
    c->Add(7, 1.0f, step);  // row 7 = its initial value + step + 1
    std::vector<float> rows;
    ASSERT_TRUE(sparse.Lookup(0, std::vector<int64_t>{7, 9}, step, &rows).ok()) << step;
    seen.push_back(std::lround(rows[0] - row7[0]));
    EXPECT_GE(seen.back(), step + 1 - o.cache_staleness) << "step " << step;
    EXPECT_LE(seen.back(), step + 1);
    // Row 9 has only this worker's gradients: those pushed before its pull.
    EXPECT_FLOAT_EQ(rows[2], row9[0] - static_cast<float>(3 * (step / 3))) << "step " << step;
    if (step < 9) sparse.AddRows(0, std::vector<int64_t>{9}, std::vector<float>{1, 1});
    ASSERT_TRUE(sparse.StartPushes(step).ok());
    ASSERT_TRUE(sparse.FinishPushes(step).ok());
    ASSERT_TRUE(sparse.AdvancePrefetches().ok());
    // Pulled for steps 0, 3, 6: its gradients of 3 steps go at steps 2, 5, 8.
    const float pushed = static_cast<float>(step >= 8 ? 9 : step >= 5 ? 6 : step >= 2 ? 3 : 0);
    EXPECT_FLOAT_EQ(c->Row(9)[0], row9[0] - pushed) << "step " << step;
  }
  // Pulled for steps 0, 3, 6 and 9; served from the cache in between.
  EXPECT_EQ(seen, (std::vector<int64_t>{1, 1, 1, 4, 4, 4, 7, 7, 7, 10}));
  // Distinct rows per step: misses at step 0, stale refreshes at 3, 6, 9,
  // hits in between; a hit saves an id and a row (8 + 2 × 4 bytes). (No
  // EndStep here: Take's "per step" divides by 1.)
  const auto values = metrics.Take(nullptr, nullptr);
  EXPECT_EQ(metric_names::ValueOf(values, metric_names::kRowCacheHits), 12.0);
  EXPECT_EQ(metric_names::ValueOf(values, metric_names::kRowCacheMisses), 2.0);
  EXPECT_EQ(metric_names::ValueOf(values, metric_names::kRowCacheStaleRefreshes), 6.0);
  EXPECT_EQ(metric_names::ValueOf(values, metric_names::kRowCacheBytesSaved), 12.0 * 16);

  c->ps.server->Stop();
  std::vector<float> rows;
  EXPECT_TRUE(sparse.Lookup(0, std::vector<int64_t>{7}, 10, &rows).ok());
  EXPECT_TRUE(sparse.Lookup(0, std::vector<int64_t>{7}, 11, &rows).ok());
  EXPECT_EQ(std::lround(rows[0] - row7[0]), 10);
  const auto asked = std::chrono::steady_clock::now();
  Status st = sparse.Lookup(0, std::vector<int64_t>{7}, 12, &rows);
  EXPECT_EQ(st.code(), StatusCode::kDeadlineExceeded) << st.ToString();
  EXPECT_GE(std::chrono::steady_clock::now() - asked, o.step_timeout);
}

// cache_rule = "version": a row past its staleness steps stays, and the
// step that needs it asks its shard, which sends it only when it took more
// than `staleness` updates since. Row 7 takes the other worker's updates in
// bursts; row 9 none. Every read misses at most 2 of row 7's updates, and
// row 9 is pulled once and then served for good. Odd steps are prefetched
// (a batch of one table), even ones looked up directly.
TEST_F(SparseSyncTest, RowCacheWithVersionChecksReadsNoRowMissingMoreThanItsStalenessUpdates) {
  auto c = StartCachedPs();
  ASSERT_NE(c, nullptr);
  constexpr int64_t kStaleness = 2;
  StepMetrics metrics;
  std::unique_ptr<SparseSync> owned = VersionCheckedSync(c.get(), kStaleness, &timeline_, &metrics);
  SparseSync& sparse = *owned;
  const std::vector<float> row7 = c->Row(7), row9 = c->Row(9);
  const int updates[12] = {1, 0, 0, 2, 0, 1, 0, 0, 0, 3, 0, 0};  // of row 7, before each step
  int64_t applied = 0;
  auto update = [&](int64_t step) {
    for (int k = 0; k < updates[step]; ++k) c->Add(7, 1.0f, step);
    applied += updates[step];
  };
  update(0);
  const std::vector<int64_t> ids = {7, 9};
  std::vector<int64_t> seen;
  for (int64_t step = 0; step < 12; ++step) {
    std::vector<float> rows;
    ASSERT_TRUE(sparse.Lookup(0, ids, step, &rows).ok()) << step;
    seen.push_back(std::lround(rows[0] - row7[0]));
    EXPECT_GE(seen.back(), applied - kStaleness) << "step " << step;
    EXPECT_LE(seen.back(), applied);
    EXPECT_EQ(rows[2], row9[0]) << "step " << step;
    ASSERT_TRUE(sparse.StartPushes(step).ok());
    ASSERT_TRUE(sparse.FinishPushes(step).ok());
    if (step + 1 < 12) {
      update(step + 1);
      if (step % 2 == 0) {
        ASSERT_TRUE(sparse.Prefetch(0, ids, step + 1).ok());
      }
    }
    ASSERT_TRUE(sparse.AdvancePrefetches().ok());
  }
  // Row 7 found fresh at steps 3 and 4 (2 updates behind: the bound), sent
  // again at 5 and 9 (3 behind), fresh at 8, served by the clock at the others.
  EXPECT_EQ(seen, (std::vector<int64_t>{1, 1, 1, 1, 1, 4, 4, 4, 4, 7, 7, 7}));
  const auto values = metrics.Take(nullptr, nullptr);
  EXPECT_EQ(metric_names::ValueOf(values, metric_names::kRowCacheHits), 9.0 + 11.0);
  EXPECT_EQ(metric_names::ValueOf(values, metric_names::kRowCacheMisses), 2.0);
  EXPECT_EQ(metric_names::ValueOf(values, metric_names::kRowCacheStaleRefreshes), 2.0);
  // 8 clock hits (row 9 at steps 1-2, row 7 at 1-2, 6-7, 10-11) save an id
  // and a row, 16 bytes each; 12 checked ones (row 9 from step 3 on, row 7
  // at 3, 4, 8) the row less its 8 bytes of versions and the id, 0; the 4
  // rows pulled cost 8 bytes of versions each.
  EXPECT_EQ(metric_names::ValueOf(values, metric_names::kRowCacheBytesSaved), 8.0 * 16 - 4 * 8);
}

// A row the shard re-initialises (a WRITE here; a dynamic table's eviction
// and a LOAD likewise) leaves the cache once a reply from its partition
// says so: the next lookup pulls the new value, though the copy was young.
TEST_F(SparseSyncTest, RowCacheDropsRowsItsShardReset) {
  auto c = StartCachedPs();
  ASSERT_NE(c, nullptr);
  SparseSync::Options o;
  o.cache_staleness = 100;
  StepMetrics metrics;
  SparseSync sparse(o, &c->plan, nullptr, nullptr, std::move(c->ps.conn), &timeline_, &metrics);
  sparse.AddPs(c->plan.variables[0]);
  const ps::VariableSpec& spec = c->plan.ps.variables[0];
  int64_t other = 8;  // another row of row 7's partition
  while (ps::PartitionOf(spec, other) != ps::PartitionOf(spec, 7)) ++other;
  std::vector<float> rows;
  ASSERT_TRUE(sparse.Lookup(0, std::vector<int64_t>{7}, 0, &rows).ok());
  const float before = rows[0];
  auto t = c->writer->Write(0, std::vector<int64_t>{7}, std::vector<float>{100, 100});
  ASSERT_TRUE(t.ok() && c->writer->Wait(*t, ps::DeadlineIn(10'000)).ok());
  ASSERT_TRUE(sparse.StartPushes(0).ok());
  ASSERT_TRUE(sparse.FinishPushes(0).ok());
  ASSERT_TRUE(sparse.Lookup(0, std::vector<int64_t>{7}, 1, &rows).ok());
  EXPECT_EQ(rows[0], before);  // nothing from that partition heard yet
  // This step pushes to the partition: its ack carries the reset.
  sparse.AddRows(0, std::vector<int64_t>{other}, std::vector<float>{0, 0});
  ASSERT_TRUE(sparse.StartPushes(1).ok());
  ASSERT_TRUE(sparse.FinishPushes(1).ok());
  ASSERT_TRUE(sparse.Lookup(0, std::vector<int64_t>{7}, 2, &rows).ok());
  EXPECT_EQ(rows[0], 100.0f);
}

// With version checks a WRITE leaves a row's version as it was, so the
// shard finds the old copy fresh; the reply's resets drop it all the same,
// and the lookup pulls the row written.
TEST_F(SparseSyncTest, RowCacheWithVersionChecksDropsRowsItsShardReset) {
  auto c = StartCachedPs();
  ASSERT_NE(c, nullptr);
  StepMetrics metrics;
  std::unique_ptr<SparseSync> owned = VersionCheckedSync(c.get(), /*staleness=*/1, &timeline_, &metrics);
  SparseSync& sparse = *owned;
  std::vector<float> rows;
  ASSERT_TRUE(sparse.Lookup(0, std::vector<int64_t>{7}, 0, &rows).ok());
  const float before = rows[0];
  ASSERT_TRUE(sparse.Lookup(0, std::vector<int64_t>{7}, 2, &rows).ok());  // checked: fresh
  EXPECT_EQ(rows[0], before);
  auto t = c->writer->Write(0, std::vector<int64_t>{7}, std::vector<float>{100, 100});
  ASSERT_TRUE(t.ok() && c->writer->Wait(*t, ps::DeadlineIn(10'000)).ok());
  ASSERT_TRUE(sparse.Lookup(0, std::vector<int64_t>{7}, 3, &rows).ok());
  EXPECT_EQ(rows[0], 100.0f);
  ASSERT_TRUE(sparse.Lookup(0, std::vector<int64_t>{7}, 4, &rows).ok());  // held again
  EXPECT_EQ(rows[0], 100.0f);
}

// Sync steps bypass the cache, and the step before one empties it: the
// sync warm-up pulls every step, async steps are served from the cache,
// and before a switch back to sync the gradients the cache held are pushed.
TEST_F(SparseSyncTest, RowCacheServesOnlyAsyncStepsAndFlushesBeforeSync) {
  plan::JobPlan plan;
  plan.ps.consistency = Consistency::kAsync;
  plan.ps.sync_warmup_steps = 2;
  AddToPs(Table(0, "emb", 50, 2, VariablePath::kPs, 1.0f), 1, &plan);
  PsServer ps = StartPs(plan);
  ASSERT_NE(ps.conn.client, nullptr);
  SparseSync::Options o;
  o.cache_staleness = 4;
  o.cache_accumulate = true;
  StepMetrics metrics;
  SparseSync sparse(o, &plan, nullptr, nullptr, std::move(ps.conn), &timeline_, &metrics);
  sparse.AddPs(plan.variables[0]);
  std::vector<float> initial(2);
  ps::InitializeRow(plan.variables[0].init, 0, 7, 2, initial.data());
  ASSERT_TRUE(sparse.SetConsistency(5, {Consistency::kSync, 0}, 0).ok());
  std::vector<bool> pulled;
  std::vector<float> rows;
  for (int64_t step = 0; step < 6; ++step) {
    const int64_t before = sparse.ps()->transport_bytes().pull_sent;
    ASSERT_TRUE(sparse.Lookup(0, std::vector<int64_t>{7}, step, &rows).ok()) << step;
    pulled.push_back(sparse.ps()->transport_bytes().pull_sent > before);
    // Gradients of 1: SGD lr 1 takes 1 off per step once pushed.
    sparse.AddRows(0, std::vector<int64_t>{7}, std::vector<float>{1, 1});
    ASSERT_TRUE(sparse.StartPushes(step).ok()) << step;
    ASSERT_TRUE(sparse.FinishPushes(step).ok()) << step;
    ASSERT_TRUE(sparse.AdvancePrefetches().ok());
    if (step == 1) {
      EXPECT_FLOAT_EQ(rows[0], initial[0] - 1);  // sync: step 0 applied
    }
    if (step == 3) {
      EXPECT_FLOAT_EQ(rows[0], initial[0] - 2);  // cached since step 2's pull
    }
  }
  // Sync steps 0, 1 and 5 pull; async step 2 pulls, 3 and 4 are served.
  EXPECT_EQ(pulled, (std::vector<bool>{true, true, true, false, false, true}));
  // Step 5 read every gradient before it: steps 2-4's waited in the cache
  // until step 4, the last before sync.
  EXPECT_FLOAT_EQ(rows[0], initial[0] - 5);
}

}  // namespace
}  // namespace parallax::trainer
