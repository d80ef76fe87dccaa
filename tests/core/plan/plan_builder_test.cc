// The plan's one builder (core/plan/plan_builder.h), its JSON (which
// parallax-ps keeps the PS part of), and the cross-rank
// registration check.
#include "core/plan/plan_builder.h"
#include "core/plan/plan_view.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <numeric>
#include <map>
#include <tuple>
#include <nlohmann/json.hpp>

#include "core/plan/report.h"
#include "core/ps/dynamic_table.h"

namespace parallax::plan {
namespace {

class JobPlanTest : public ::testing::Test {
 protected:
  // One sampled batch touching `k` distinct rows: α = k / rows.
  static std::vector<std::vector<int64_t>> Touching(int64_t k) {
    std::vector<int64_t> ids(static_cast<size_t>(k));
    std::iota(ids.begin(), ids.end(), 0);
    return {ids};
  }
  // "emb": 100 x 4, Adagrad, one sampled batch of 25 rows (α = 0.25); "w":
  // 4 dense elements.
  static std::vector<VariableInput> Regs(int64_t emb_rows = 100) {
    std::vector<VariableInput> regs(2);
    regs[0].var.id = 0;
    regs[0].var.name = "emb";
    regs[0].var.sparse = true;
    regs[0].var.rows = emb_rows;
    regs[0].var.dim = 4;
    regs[0].var.optimizer.type = OptimizerType::kAdagrad;
    regs[0].sampled_batches = Touching(emb_rows / 4);
    regs[1].var.id = 1;
    regs[1].var.name = "w";
    regs[1].var.size = 4;
    regs[1].var.rows = 1;
    regs[1].var.dim = 4;
    return regs;
  }
  static JobConfig Job(Arch arch) {
    JobConfig job;
    job.job.arch = arch;
    return job;
  }
  // `job` with [[variables]] tables pinning "emb" and "w" to these paths.
  static JobConfig Pinned(JobConfig job, VariablePath emb_path, VariablePath w_path) {
    VariableOverride emb;
    emb.name = "emb";
    emb.path = emb_path;
    VariableOverride w;
    w.name = "w";
    w.path = w_path;
    job.variables = {emb, w};
    return job;
  }
  // `job` with [plan] figures.
  static JobConfig WithFigures(JobConfig job, double collective_us, double ps_rtt_us) {
    job.plan.link_bytes_per_s = 1e9;
    job.plan.collective_latency_us = collective_us;
    job.plan.ps_rtt_us = ps_rtt_us;
    return job;
  }
  // The plan of `regs` on `workers` ranks of `hosts` hosts. The all-reduce
  // is Gloo's ring over every rank unless `shm_allreduce` (the trainer's
  // default, see SharedMemoryAllReduceOnAHost): the figures worked out in
  // these tests are the ring's.
  static StatusOr<JobPlan> Build(const JobConfig& job, int shards,
                                 std::vector<VariableInput> regs = Regs(), int workers = 2,
                                 int hosts = 1, bool shm_allreduce = false) {
    PlanInputs inputs;
    inputs.cluster = {.workers = workers, .hosts = hosts, .shards = shards};
    inputs.shm_allreduce = shm_allreduce;
    inputs.variables = std::move(regs);
    return BuildPlan(job, inputs);
  }
};

TEST_F(JobPlanTest, RulesPerArch) {
  struct Case {
    Arch arch;
    int shards;
    VariablePath emb, w;
  } cases[] = {// Two workers, the default figures (a collective call costs
               // 9 ms, a PS round trip 1.44 ms; the table moves a few
               // hundred bytes): PS's 2 round trips beat all-gather's 3
               // calls (see HybridAsksTheCostModel). Dense: the PS too, its
               // one push-pull (1.44 ms) against an all-reduce call
               // (1.5 · 9 ms): the plan is the cheapest, not a rule per kind.
               {Arch::kHybrid, 2, VariablePath::kPs, VariablePath::kPs},
               // No shards: all-reduce's one call (1.5 · 9 ms) beats
               // all-gather's three.
               {Arch::kHybrid, 0, VariablePath::kAllReduce, VariablePath::kAllReduce},
               {Arch::kAllReduce, 2, VariablePath::kAllReduce, VariablePath::kAllReduce},
               {Arch::kAllGather, 2, VariablePath::kAllGather, VariablePath::kAllReduce},
               {Arch::kPs, 2, VariablePath::kPs, VariablePath::kPs}};
  for (const Case& c : cases) {
    auto plan = Build(Job(c.arch), c.shards);
    ASSERT_TRUE(plan.ok()) << ArchName(c.arch) << ": " << plan.status().ToString();
    EXPECT_EQ(plan->variables[0].path, c.emb) << ArchName(c.arch);
    EXPECT_EQ(plan->variables[1].path, c.w) << ArchName(c.arch);
    size_t on_ps = (c.emb == VariablePath::kPs) + (c.w == VariablePath::kPs);
    EXPECT_EQ(plan->ps.variables.size(), on_ps) << ArchName(c.arch);
    if (c.arch != Arch::kHybrid) {
      EXPECT_EQ(plan->variables[0].reason, "arch = \"" + std::string(ArchName(c.arch)) + "\"");
    }
  }
  EXPECT_EQ(Build(Job(Arch::kPs), 0).status().code(), StatusCode::kFailedPrecondition);
}

TEST_F(JobPlanTest, HybridAsksTheCostModel) {
  // 100 × 4 on 4 workers of one host, 2 shards, α = 0.25 (25 rows of 24
  // bytes). By bytes ([plan] figures with no per-operation cost): PS puts
  // 4 · 2 · (600 + 256) = 6,848 bytes a step on the host's link, all-gather
  // 4 · 3 · (600 + 436) = 12,432 (436: Gloo's framing of its 2 calls at 2
  // ranks), all-reduce 4 · 1.5 · 1,600 = 9,600.
  const JobConfig by_bytes_job = WithFigures(Job(Arch::kHybrid), 0, 0);
  auto sparse = Build(by_bytes_job, 2, Regs(), /*workers=*/4);
  ASSERT_TRUE(sparse.ok()) << sparse.status().ToString();
  EXPECT_EQ(sparse->variables[0].path, VariablePath::kPs);
  EXPECT_NE(sparse->variables[0].reason.find("ps 0.00685 ms/step (6.85 KB"), std::string::npos)
      << sparse->variables[0].reason;
  // Two workers, by bytes: all-gather, 2 · (600 + 436) = 2,072 bytes on the
  // link, against all-reduce's 2 · 1,600 = 3,200 and PS's 2 · 2 · 856 =
  // 3,424. With half the rows touched this small table (1,600 bytes) is
  // cheapest all-reduced whole: 3,200 against all-gather's 2 · (1,200 +
  // 436) = 3,272 and PS's 2 · 2 · (1,200 + 256) = 5,824.
  auto two = Build(by_bytes_job, 2);
  ASSERT_TRUE(two.ok());
  EXPECT_EQ(two->variables[0].path, VariablePath::kAllGather) << two->variables[0].reason;
  auto half_regs = Regs();
  half_regs[0].sampled_batches = Touching(50);
  auto half = Build(by_bytes_job, 2, half_regs);
  ASSERT_TRUE(half.ok());
  EXPECT_EQ(half->variables[0].path, VariablePath::kAllReduce) << half->variables[0].reason;
  // 10,000 rows, 2,500 touched (60,000 bytes): all-gather, 2 · 60,436 =
  // 120,872 bytes, against PS's 2 · 2 · 60,256 = 241,024 and all-reduce's
  // 2 · 160,000 = 320,000.
  auto by_bytes = Build(by_bytes_job, 2, Regs(10'000));
  ASSERT_TRUE(by_bytes.ok());
  EXPECT_EQ(by_bytes->variables[0].path, VariablePath::kAllGather);
  // The same with the job's [plan] saying a collective call takes 3 ms and a
  // PS round trip 1 ms (as measured here, a call costs several round trips):
  // all-gather 0.12 + 2 · 3 ms, all-reduce 0.32 + 1.5 · 3 ms, PS
  // 0.24 + 2 · 1 ms: PS.
  auto by_time = Build(WithFigures(Job(Arch::kHybrid), 3000, 1000), 2, Regs(10'000));
  ASSERT_TRUE(by_time.ok());
  EXPECT_EQ(by_time->variables[0].path, VariablePath::kPs);
  EXPECT_NE(by_time->variables[0].reason.find("ps 2.24 ms/step"), std::string::npos)
      << by_time->variables[0].reason;
  // The dense variable too: one push-pull (1 ms) against an all-reduce
  // call (1.5 · 3 ms).
  EXPECT_EQ(by_time->variables[1].path, VariablePath::kPs) << by_time->variables[1].reason;
  EXPECT_EQ(by_time->ps.variables.size(), 2u);
  // With a cheap collective call (0.1 ms against a 1 ms round trip) the
  // dense variable is all-reduced.
  auto cheap_calls = Build(WithFigures(Job(Arch::kHybrid), 100, 1000), 2, Regs(10'000));
  ASSERT_TRUE(cheap_calls.ok());
  EXPECT_EQ(cheap_calls->variables[1].path, VariablePath::kAllReduce)
      << cheap_calls->variables[1].reason;
  // α = 0.9: PS and all-gather move more than all-reduce.
  auto regs = Regs();
  regs[0].sampled_batches = Touching(90);
  auto dense = Build(by_bytes_job, 2, regs, /*workers=*/4);
  ASSERT_TRUE(dense.ok());
  EXPECT_EQ(dense->variables[0].path, VariablePath::kAllReduce);
  EXPECT_TRUE(dense->ps.variables.empty());
  // Not measured: the rule (PS when there are shards), and it says so.
  regs[0].sampled_batches.clear();
  auto unmeasured = Build(by_bytes_job, 2, regs, /*workers=*/4);
  ASSERT_TRUE(unmeasured.ok());
  EXPECT_EQ(unmeasured->variables[0].path, VariablePath::kPs);
  EXPECT_NE(unmeasured->variables[0].reason.find("not measured"), std::string::npos);
  // The reason travels with the plan.
  auto back = ParseJobPlan(JobPlanToJson(*sparse));
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(back->variables[0].reason, sparse->variables[0].reason);
}

// The trainer's all-reduce through shared memory (PlanInputs::shm_allreduce)
// reaches the cost model. With the default figures (a collective call over
// the network 9 ms, a PS round trip 1.44 ms) the 100 × 4 table on 2 workers
// goes to the PS when the all-reduce is Gloo's ring (1.5 calls: 13.5 ms),
// and is all-reduced whole when the 2 workers share a host and reduce
// through shared memory (one call of about 20 us and 3 passes over its 1,600
// bytes, nothing on the link); on
// 2 hosts of one worker each there is nothing to share: the ring, the PS.
TEST_F(JobPlanTest, SharedMemoryAllReduceOnAHost) {
  const JobConfig job = Job(Arch::kHybrid);
  auto ring = Build(job, 2, Regs(), 2, /*hosts=*/1, /*shm_allreduce=*/false);
  auto shm = Build(job, 2, Regs(), 2, /*hosts=*/1, /*shm_allreduce=*/true);
  auto spread = Build(job, 2, Regs(), 2, /*hosts=*/2, /*shm_allreduce=*/true);
  ASSERT_TRUE(ring.ok() && shm.ok() && spread.ok());
  EXPECT_EQ(ring->variables[0].path, VariablePath::kPs) << ring->variables[0].reason;
  EXPECT_EQ(shm->variables[0].path, VariablePath::kAllReduce) << shm->variables[0].reason;
  EXPECT_NE(shm->variables[0].reason.find("allreduce 0.0234 ms/step (0 B"), std::string::npos)
      << shm->variables[0].reason;
  EXPECT_EQ(spread->variables[0].path, VariablePath::kPs) << spread->variables[0].reason;
  // The plan records how it counted, for the report and `parallax plan`.
  EXPECT_FALSE(ring->cost.shm_allreduce);
  EXPECT_TRUE(shm->cost.shm_allreduce);
  auto back = ParseJobPlan(JobPlanToJson(*shm));
  ASSERT_TRUE(back.ok());
  EXPECT_TRUE(back->cost.shm_allreduce);
  EXPECT_DOUBLE_EQ(back->cost.shm_call_s, shm->cost.shm_call_s);
  EXPECT_DOUBLE_EQ(back->cost.shm_bytes_per_s, shm->cost.shm_bytes_per_s);
}

// [ps] shared_memory reaches the cost model: on one host the 10,000-row
// table's values leave the sockets (PS: 2 · 2 · (2,500 · 8 + 256 + 2 · 16)
// = 81,152 bytes on the link by bytes), and PS beats all-gather's 123,032.
TEST_F(JobPlanTest, SharedMemoryMakesSameMachinePsCheaper) {
  JobConfig job = WithFigures(Job(Arch::kHybrid), 0, 0);
  auto without = Build(job, 2, Regs(10'000));
  ASSERT_TRUE(without.ok());
  EXPECT_EQ(without->variables[0].path, VariablePath::kAllGather);
  job.ps.shared_memory = true;
  auto with = Build(job, 2, Regs(10'000));
  ASSERT_TRUE(with.ok()) << with.status().ToString();
  EXPECT_EQ(with->variables[0].path, VariablePath::kPs) << with->variables[0].reason;
  EXPECT_NE(with->variables[0].reason.find("ps 0.0812 ms/step"), std::string::npos)
      << with->variables[0].reason;
}

TEST_F(JobPlanTest, ConsistencyReachesTheShards) {
  JobConfig job = Job(Arch::kHybrid);
  job.job.consistency = Consistency::kSsp;
  job.job.staleness = 3;
  job.ps.value_encoding = ValueEncoding::kFp16;
  auto plan = Build(job, 2);
  ASSERT_TRUE(plan.ok());
  auto back = ParseJobPlan(JobPlanToJson(*plan));
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  const ps::PsPlan* ps = &back->ps;
  EXPECT_EQ(ps->consistency, Consistency::kSsp);
  EXPECT_EQ(ps->staleness, 3);
  EXPECT_EQ(ps->value_encoding, ValueEncoding::kFp16);
  EXPECT_EQ(plan->cost.value_bytes, 2);
}

// A dynamic table (no row count) is always on the PS: under hybrid the
// cost model is not asked, its [[variable]] settings reach the plan and its
// JSON; allreduce, allgather, no shards or another [[variable]] path are
// refused naming it; the dynamic settings on a fixed table are refused too.
TEST_F(JobPlanTest, ADynamicTableLivesOnlyOnThePs) {
  std::vector<VariableInput> regs = Regs();
  regs[0].var.rows = 0;
  regs[0].var.dynamic = DynamicTableSettings{};
  // Two sampled batches of 3 and 5 distinct 64-bit ids (repeats counted once).
  regs[0].sampled_batches = {{-9, 5, 5, 1LL << 62}, {1, 2, 3, 4, -4, 2}};
  JobConfig job = Job(Arch::kHybrid);
  VariableOverride tuned;
  tuned.name = "emb";
  tuned.admit_after = 3;
  tuned.max_rows = 1000;
  tuned.eviction = EvictionPolicy::kLfu;
  job.variables = {tuned};
  auto plan = Build(job, 2, regs);
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  EXPECT_EQ(plan->variables[0].path, VariablePath::kPs);
  EXPECT_NE(plan->variables[0].reason.find("dynamic table"), std::string::npos);
  // What the budget costs a shard: 500 rows of 4 floats (SGD), their
  // bookkeeping and index entries, on each of the 2 shards.
  ps::DynamicTableOptions sized;
  sized.var.dim = 4;
  sized.var.optimizer = plan->variables[0].optimizer;
  const int64_t row_bytes = ps::DynamicTable::BytesPerRow(sized);
  EXPECT_GT(row_bytes, 16);
  char expected[96];
  std::snprintf(expected, sizeof(expected), "max_rows 1000: about %.3g MB a shard at the budget",
                500.0 * static_cast<double>(row_bytes) / 1e6);
  EXPECT_NE(plan->variables[0].reason.find(expected), std::string::npos)
      << plan->variables[0].reason;
  // Without a budget, a warning.
  job.variables[0].max_rows.reset();
  auto unbounded = Build(job, 2, regs);
  ASSERT_TRUE(unbounded.ok());
  EXPECT_NE(unbounded->variables[0].reason.find("no max_rows: its rows grow with every new id"),
            std::string::npos)
      << unbounded->variables[0].reason;
  job.variables[0].max_rows = 1000;
  ASSERT_EQ(plan->ps.variables.size(), 2u);
  ASSERT_TRUE(plan->ps.variables[0].dynamic.has_value());
  EXPECT_EQ(plan->ps.variables[0].dynamic->admit_after, 3);
  EXPECT_EQ(plan->ps.variables[0].dynamic->max_rows, 1000);
  EXPECT_EQ(plan->ps.variables[0].dynamic->eviction, EvictionPolicy::kLfu);
  auto back = ParseJobPlan(JobPlanToJson(*plan));
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  ASSERT_TRUE(back->ps.variables[0].dynamic.has_value());
  EXPECT_EQ(back->ps.variables[0].dynamic->max_rows, 1000);
  EXPECT_EQ(back->ps.variables[0].rows, 0);
  // No row count, so no density: the plan shows the ids a step touches.
  EXPECT_DOUBLE_EQ(plan->variables[0].density, -1);
  EXPECT_DOUBLE_EQ(back->variables[0].ids_per_step, 4.0);
  EXPECT_EQ(PlanTableOf(*back).rows[0][2], "ids/step 4");

  for (Arch arch : {Arch::kAllReduce, Arch::kAllGather}) {
    Status st = Build(Job(arch), 2, regs).status();
    EXPECT_EQ(st.code(), StatusCode::kFailedPrecondition) << ArchName(arch);
    EXPECT_NE(st.message().find("variable \"emb\" is a dynamic table"), std::string::npos)
        << st.message();
    EXPECT_NE(st.message().find(std::string("arch = \"") + ArchName(arch) + "\""),
              std::string::npos)
        << st.message();
  }
  EXPECT_NE(Build(Job(Arch::kHybrid), 0, regs).status().message().find("no PS shards"),
            std::string::npos);
  Status pinned =
      Build(Pinned(Job(Arch::kHybrid), VariablePath::kAllGather, VariablePath::kPs), 2, regs)
          .status();
  EXPECT_NE(pinned.message().find("[[variable]] in the job file asks for path \"allgather\""),
            std::string::npos)
      << pinned.message();
  // The dynamic settings on the table of fixed rows.
  Status fixed = Build(job, 2).status();
  EXPECT_EQ(fixed.code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(fixed.message().find("which only a dynamic table has"), std::string::npos)
      << fixed.message();
}

TEST_F(JobPlanTest, VariableTablesWinOverTheRule) {
  JobConfig job = Pinned(Job(Arch::kHybrid), VariablePath::kAllGather, VariablePath::kPs);
  job.variables[1].optimizer = OptimizerSettings();
  job.variables[1].optimizer->type = OptimizerType::kAdam;
  auto plan = Build(job, 2);
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  EXPECT_EQ(plan->variables[0].path, VariablePath::kAllGather);
  EXPECT_EQ(plan->variables[1].path, VariablePath::kPs);
  EXPECT_EQ(plan->variables[1].optimizer.type, OptimizerType::kAdam);
  ASSERT_EQ(plan->ps.variables.size(), 1u);
  EXPECT_EQ(plan->ps.variables[0].optimizer.type, OptimizerType::kAdam);
  EXPECT_EQ(plan->variables[0].reason, "[[variable]] in the job file");
  job.variables[0].name = "embedding";
  Status st = Build(job, 2).status();
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("\"embedding\""), std::string::npos) << st.message();
}

TEST_F(JobPlanTest, JsonRoundTripAndShardsReadThePsPart) {
  auto plan = Build(Job(Arch::kPs), 2);
  ASSERT_TRUE(plan.ok());
  const std::string json = JobPlanToJson(*plan);
  auto back = ParseJobPlan(json);
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  ASSERT_EQ(back->variables.size(), 2u);
  EXPECT_EQ(back->variables[0].name, "emb");
  EXPECT_EQ(back->variables[0].path, VariablePath::kPs);
  EXPECT_DOUBLE_EQ(back->variables[0].density, 0.25);
  EXPECT_EQ(back->variables[0].optimizer.type, OptimizerType::kAdagrad);
  EXPECT_EQ(back->variables[1].size, 4u);
  EXPECT_EQ(back->cluster.workers, 2);
  EXPECT_EQ(back->cluster.shards, 2);
  EXPECT_EQ(back->cost.bandwidth_bytes_per_s, plan->cost.bandwidth_bytes_per_s);
  EXPECT_EQ(back->PartitionsOf(0), 2u);
  // The predicted communication time per step is the report's total of the
  // plan (what `parallax plan` prints), kept with the plan.
  EXPECT_GT(plan->predicted_comm_s, 0);
  EXPECT_DOUBLE_EQ(plan->predicted_comm_s, BuildPlanReport(*plan).totals.hybrid.seconds);
  EXPECT_DOUBLE_EQ(back->predicted_comm_s, plan->predicted_comm_s);
  EXPECT_EQ(JobPlanToJson(*back), json);  // nothing lost either way
  const ps::PsPlan* ps = &back->ps;  // what parallax-ps keeps of the plan
  ASSERT_EQ(ps->variables.size(), 2u);
  EXPECT_EQ(ps->variables[0].partitions, 2u);
  EXPECT_EQ(ps->num_workers, 2u);
  EXPECT_EQ(ps->variables[0].optimizer.type, OptimizerType::kAdagrad);
  EXPECT_FALSE(ParseJobPlan("{").ok());
}

TEST_F(JobPlanTest, RegistrationMismatchNamesTheVariable) {
  auto plan = Build(Job(Arch::kHybrid), 2);
  ASSERT_TRUE(plan.ok());
  auto registered = [](std::vector<VariableInput> regs) {
    std::vector<PlannedVariable> out;
    for (const VariableInput& r : regs) out.push_back(r.var);
    return out;
  };
  EXPECT_TRUE(CheckRegistrationsMatch(*plan, registered(Regs()), 1).ok());
  auto other = registered(Regs());
  other[0].dim = 8;
  Status st = CheckRegistrationsMatch(*plan, other, 1);
  EXPECT_EQ(st.code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(st.message().find("\"emb\""), std::string::npos) << st.message();
  EXPECT_NE(st.message().find("rank 1"), std::string::npos) << st.message();
  other = registered(Regs());
  other.pop_back();
  EXPECT_EQ(CheckRegistrationsMatch(*plan, other, 1).code(), StatusCode::kFailedPrecondition);
}

// Local aggregation: sync mode, several hosts, more ranks than hosts, and
// only sparse variables on the PS path; the shards then expect one
// contribution per host.
TEST_F(JobPlanTest, LocalAggregationOnlyWhereItSavesLinkBytes) {
  auto job = [](Consistency consistency, bool enabled) {
    JobConfig j = Job(Arch::kHybrid);
    j.job.consistency = consistency;
    j.ps.local_aggregation = enabled;
    // The dense variable pinned to all-reduce: on the PS (cheaper at the
    // default figures) it would turn local aggregation off (below).
    return Pinned(j, VariablePath::kPs, VariablePath::kAllReduce);
  };
  auto on = Build(job(Consistency::kSync, true), 2, Regs(), 4, 2);
  ASSERT_TRUE(on.ok()) << on.status().ToString();
  EXPECT_TRUE(on->local_aggregation);
  EXPECT_EQ(on->ps.contributors(), 2u);
  EXPECT_EQ(on->ps.num_workers, 4u);  // the shard's mean still divides by the workers
  auto round_trip = ParseJobPlan(JobPlanToJson(*on));
  ASSERT_TRUE(round_trip.ok()) << round_trip.status().ToString();
  EXPECT_TRUE(round_trip->local_aggregation);
  EXPECT_EQ(round_trip->ps.contributors(), 2u);
  // Left to the cost model, the dense variable goes to the PS (one 1.44 ms
  // round trip against 1.5 · 3 · 9 ms of ring calls); a dense variable is
  // pushed whole by every rank, so local aggregation is off for the plan.
  JobConfig free = job(Consistency::kSync, true);
  free.variables.pop_back();
  auto dense_on_ps = Build(free, 2, Regs(), 4, 2);
  ASSERT_TRUE(dense_on_ps.ok()) << dense_on_ps.status().ToString();
  EXPECT_EQ(dense_on_ps->variables[1].path, VariablePath::kPs) << dense_on_ps->variables[1].reason;
  EXPECT_FALSE(dense_on_ps->local_aggregation);
  EXPECT_EQ(dense_on_ps->ps.contributors(), 4u);

  for (auto [workers, hosts, consistency, enabled] :
       {std::tuple{4, 1, Consistency::kSync, true},     // one host: every byte is local anyway
        std::tuple{2, 2, Consistency::kSync, true},     // one rank per host: nothing to combine
        std::tuple{4, 2, Consistency::kAsync, true},    // every rank keeps its own clock
        std::tuple{4, 2, Consistency::kSync, false}}) {  // [ps] local_aggregation = false
    auto off = Build(job(consistency, enabled), 2, Regs(), workers, hosts);
    ASSERT_TRUE(off.ok()) << off.status().ToString();
    EXPECT_FALSE(off->local_aggregation) << workers << " workers on " << hosts << " hosts, "
                                         << ConsistencyName(consistency) << ", enabled "
                                         << enabled;
    EXPECT_EQ(off->ps.contributors(), static_cast<uint32_t>(workers));
  }
  // A dense variable on the PS path needs its values back on every rank.
  JobConfig all_ps = job(Consistency::kSync, true);
  all_ps.job.arch = Arch::kPs;
  all_ps.variables.pop_back();  // "w" follows the arch
  auto dense = Build(all_ps, 2, Regs(), 4, 2);
  ASSERT_TRUE(dense.ok()) << dense.status().ToString();
  EXPECT_FALSE(dense->local_aggregation);
}

// Shards on PS hosts: the ranks of one worker host talk to them over a link
// (not loopback, as on one host), and aggregating the host's pushes saves
// link bytes even on one worker host.
TEST_F(JobPlanTest, OnPsHostsOneWorkerHostStillHasALink) {
  const JobConfig job = Pinned(Job(Arch::kHybrid), VariablePath::kPs, VariablePath::kAllReduce);
  PlanInputs inputs;
  inputs.cluster = {.workers = 4, .hosts = 1, .shards = 2, .ps_hosts = 2};
  inputs.variables = Regs();
  HostFigures here;
  here.host = "h0";
  here.loopback_bytes_per_s = 4e9;
  inputs.host_figures = {here};
  StatusOr<JobPlan> plan = BuildPlan(job, inputs);
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  EXPECT_EQ(plan->figures.link.find("loopback"), std::string::npos) << plan->figures.link;
  EXPECT_TRUE(plan->local_aggregation);
  EXPECT_EQ(plan->ps.contributors(), 1u);
  EXPECT_EQ(plan->cluster.ps_hosts, 2);
  // Without PS hosts the same shape is one host: loopback is its link.
  inputs.cluster.ps_hosts = 0;
  plan = BuildPlan(job, inputs);
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  EXPECT_NE(plan->figures.link.find("loopback"), std::string::npos) << plan->figures.link;
  EXPECT_FALSE(plan->local_aggregation);
}

TEST_F(JobPlanTest, StalenessLrReachesTheShardsPlanOutsideSync) {
  JobConfig job = Job(Arch::kPs);
  job.ps.staleness_lr = true;
  job.job.consistency = Consistency::kAsync;
  auto plan = Build(job, 2);
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  EXPECT_TRUE(plan->ps.staleness_lr);
  auto parsed = ParseJobPlan(JobPlanToJson(*plan));
  ASSERT_TRUE(parsed.ok()) << parsed.status().ToString();
  EXPECT_TRUE(parsed->ps.staleness_lr);
  job.job.consistency = Consistency::kSync;
  EXPECT_FALSE(Build(job, 2)->ps.staleness_lr);
}

// More partitions than shards: placed by the sampled rows' load (a Zipf
// head), within 10% of a perfect balance, and the reason says so.
TEST_F(JobPlanTest, PartitionsArePlacedOnShardsBySampledLoad) {
  std::vector<VariableInput> regs = Regs(1000);
  // A Zipf-like profile: row id appears 10,000 / (id + 1) + 1 times.
  std::map<int64_t, double> count;
  regs[0].sampled_batches.assign(1, {});
  for (int64_t id = 0; id < 1000; ++id) {
    count[id] = 10'000 / (id + 1) + 1;
    regs[0].sampled_batches[0].insert(regs[0].sampled_batches[0].end(),
                                      static_cast<size_t>(count[id]), id);
  }
  JobConfig job = Job(Arch::kPs);
  job.ps.partitions = 16;
  auto plan = Build(job, 4, regs);
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  const ps::VariableSpec& emb = plan->ps.variables[0];
  ASSERT_EQ(emb.partitions, 16u);
  ASSERT_EQ(emb.partition_shards.size(), 16u);
  std::vector<double> shard_load(4, 0.0);
  double total = 0;
  for (const auto& [id, n] : count) {
    shard_load[emb.partition_shards[ps::PartitionOf(emb, id)]] += n;
    total += n;
  }
  const double worst = *std::max_element(shard_load.begin(), shard_load.end());
  EXPECT_LT(worst / (total / 4) - 1, 0.10) << plan->variables[0].reason;
  EXPECT_NE(plan->variables[0].reason.find("16 partitions on 4 shards by sampled load"),
            std::string::npos)
      << plan->variables[0].reason;
  // Without samples (the dense "w"): round robin.
  const ps::VariableSpec& w = plan->ps.variables[1];
  for (uint32_t i = 0; i < w.partitions; ++i) EXPECT_EQ(w.partition_shards[i], i % 4);
}

// Hot rows ([ps] hot_rows): "emb" of 20,000 rows × 64 on the PS, 8 sampled
// batches that each hold rows 0..49 and 400 rows of their own.
class HotRowsPlanTest : public JobPlanTest {
 protected:
  static std::vector<VariableInput> Skewed() {
    std::vector<VariableInput> regs = Regs(20'000);
    regs[0].var.dim = 64;
    regs[0].sampled_batches.assign(8, {});
    for (int64_t b = 0; b < 8; ++b) {
      auto& batch = regs[0].sampled_batches[static_cast<size_t>(b)];
      for (int64_t id = 0; id < 50; ++id) batch.insert(batch.end(), 3, id);  // repeats count once
      for (int64_t k = 0; k < 400; ++k) batch.push_back(1000 + b * 400 + k);
    }
    return regs;
  }
  static StatusOr<JobPlan> BuildHot(int64_t hot_rows, std::vector<VariableInput> regs, int workers,
                                    int hosts) {
    JobConfig job = Pinned(Job(Arch::kHybrid), VariablePath::kPs, VariablePath::kAllReduce);
    job.ps.hot_rows = hot_rows;
    return Build(job, hosts, std::move(regs), workers, hosts, /*shm_allreduce=*/true);
  }
};

TEST_F(HotRowsPlanTest, TheCostModelTakesTheRowsEveryBatchHoldsWhereTheyPay) {
  // 8 hosts of one worker, 1 Gbit/s-like default links: a row every batch
  // pulls and pushes costs a worker 2 × (8 + 256) B a step on the PS, and
  // about 2 × 7/8 × 65 × 4 B in the ring; a row one batch in 8 holds costs
  // the ring as much and saves an eighth.
  auto plan = BuildHot(JobConfig::Ps::kHotRowsAuto, Skewed(), 8, 8);
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  const PlannedVariable& emb = plan->variables[0];
  RecordProperty("reason", emb.reason);
  ASSERT_FALSE(emb.hot_rows.empty()) << emb.reason;
  EXPECT_EQ(emb.hot_rows.size(), 50u) << emb.reason;
  for (int64_t id : emb.hot_rows) EXPECT_LT(id, 50) << "a row only one batch holds";
  EXPECT_TRUE(std::is_sorted(emb.hot_rows.begin(), emb.hot_rows.end()));
  EXPECT_NE(emb.reason.find("the cost model's choice of the most frequent sampled"), std::string::npos)
      << emb.reason;
  // 50 of a batch's 450 distinct rows, in every batch.
  EXPECT_NEAR(emb.hot_share, 50.0 / 450, 1e-9);
  // The plan's JSON carries them; the dense "w" has none.
  auto again = ParseJobPlan(JobPlanToJson(*plan));
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_EQ(again->variables[0].hot_rows, emb.hot_rows);
  EXPECT_EQ(again->variables[0].hot_share, emb.hot_share);
  EXPECT_TRUE(again->variables[1].hot_rows.empty());
  // The plan's predicted cost counts them: the PS moves the other rows, and
  // the block (50 × 65 floats) joins the all-reduce.
  JobPlan cold = *plan;
  cold.variables[0].hot_rows.clear();
  const PlanReport with = BuildPlanReport(*plan), without = BuildPlanReport(cold);
  const int ps = static_cast<int>(VariablePath::kPs);
  const int ar = static_cast<int>(VariablePath::kAllReduce);
  EXPECT_LT(with.totals.hybrid_by_path[ps].worker, 0.95 * without.totals.hybrid_by_path[ps].worker);
  EXPECT_GT(with.totals.hybrid_by_path[ar].worker - without.totals.hybrid_by_path[ar].worker,
            50.0 * 65 * 4);
  EXPECT_DOUBLE_EQ(plan->predicted_comm_s, with.totals.hybrid.seconds);
  // `parallax plan --json` gives the count and the share.
  const nlohmann::json doc = nlohmann::json::parse(PlanReportJson(with));
  EXPECT_EQ(doc["variables"][0]["hot_rows"], 50);
  EXPECT_NEAR(doc["variables"][0]["hot_rows_share"].get<double>(), 50.0 / 450, 1e-9);
  EXPECT_FALSE(doc["variables"][1].contains("hot_rows"));
  EXPECT_NE(FormatPlanReport(with).find("(this plan counts its 50 hot rows"), std::string::npos);
  EXPECT_EQ(FormatPlanReport(without).find("(this plan counts its"), std::string::npos);
  EXPECT_NE(plan->predicted_comm_s, without.totals.hybrid.seconds);
}

// A dynamic table's rows stay on its shards: asked for hot rows ("auto"
// or a count), its reason says it gets none and why, instead of nothing.
TEST_F(HotRowsPlanTest, ADynamicTableSaysItHasNone) {
  for (int64_t requested : {JobConfig::Ps::kHotRowsAuto, int64_t{10}}) {
    std::vector<VariableInput> regs = Skewed();
    regs[0].var.rows = 0;
    regs[0].var.dynamic = DynamicTableSettings{};
    JobConfig job = Job(Arch::kHybrid);
    job.ps.hot_rows = requested;
    auto plan = Build(job, 2, std::move(regs));
    ASSERT_TRUE(plan.ok()) << plan.status().ToString();
    const PlannedVariable& emb = plan->variables[0];
    EXPECT_TRUE(emb.hot_rows.empty()) << emb.reason;
    EXPECT_NE(emb.reason.find("hot rows: none (a dynamic table"), std::string::npos) << emb.reason;
  }
}

// A table every rank holds whole (all-reduced or all-gathered) has no hot
// rows to keep: asked for them, its reason says so.
TEST_F(HotRowsPlanTest, ATableEveryRankHoldsSaysItHasNone) {
  JobConfig job = Pinned(Job(Arch::kHybrid), VariablePath::kAllGather, VariablePath::kAllReduce);
  job.ps.hot_rows = 10;
  auto plan = Build(job, 2, Skewed(), 2, 2, /*shm_allreduce=*/true);
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  const PlannedVariable& emb = plan->variables[0];
  EXPECT_TRUE(emb.hot_rows.empty()) << emb.reason;
  EXPECT_NE(emb.reason.find("hot rows: none (on allgather every rank holds the whole table)"),
            std::string::npos)
      << emb.reason;
  EXPECT_EQ(plan->variables[1].reason.find("hot rows"), std::string::npos)
      << "a dense variable has no rows to speak of: " << plan->variables[1].reason;
}

TEST_F(HotRowsPlanTest, NoneWhereEveryRowIsRare) {
  std::vector<VariableInput> regs = Skewed();
  for (auto& batch : regs[0].sampled_batches) batch.erase(batch.begin(), batch.begin() + 150);
  auto plan = BuildHot(JobConfig::Ps::kHotRowsAuto, regs, 8, 8);
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  RecordProperty("reason", plan->variables[0].reason);
  EXPECT_TRUE(plan->variables[0].hot_rows.empty()) << plan->variables[0].reason;
  EXPECT_NE(plan->variables[0].reason.find("hot rows: none pay"), std::string::npos)
      << plan->variables[0].reason;
}

TEST_F(HotRowsPlanTest, ARowOnlyOneSampledBatchHoldsIsNotCountedOnToRecur) {
  // One host, its all-reduce through shared memory: a hot row costs next to
  // nothing, so any row expected in the next batches pays. Each batch's own
  // 400 rows appear in no other sampled batch: their expected share of the
  // batches to come is 0 (leave-one-out), not the 1/8 they have in the
  // samples, so they are left on the PS and the 50 that recur are taken.
  auto plan = BuildHot(JobConfig::Ps::kHotRowsAuto, Skewed(), 2, 1);
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  const PlannedVariable& emb = plan->variables[0];
  RecordProperty("reason", emb.reason);
  EXPECT_EQ(emb.hot_rows.size(), 50u) << emb.reason;
  for (int64_t id : emb.hot_rows) EXPECT_LT(id, 50) << "a row only one batch holds";
  // 50 of a batch's 450 distinct rows.
  EXPECT_NE(emb.reason.find("11% of a batch's distinct rows"), std::string::npos) << emb.reason;
}

TEST_F(HotRowsPlanTest, RowsSeenOnceAreExpectedAsOftenAsRowsSeenTwiceSay) {
  // 8 batches of 500 distinct rows: the 50 in every batch, 50 of 200 "warm"
  // rows each in exactly 2 batches, and 400 of their own (3,200 seen once).
  std::vector<VariableInput> regs = Skewed();
  for (int64_t w = 0; w < 200; ++w) {
    for (int64_t b : {w % 8, (w + 1) % 8}) {
      regs[0].sampled_batches[static_cast<size_t>(b)].push_back(10'000 + w);
    }
  }
  // The 350 most present: the 50 (expected in every batch to come), the 200
  // warm ones (leave-one-out: 1 of the 7 other batches; no row is seen 3
  // times to say more), and 100 seen once, which as a class come back as
  // often as the 200 seen twice say (Good–Turing: 2·200 / (7·3,200) each),
  // not never (leave-one-out alone: 78.571 / 500).
  auto plan = BuildHot(350, regs, 2, 1);
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  EXPECT_EQ(plan->variables[0].hot_rows.size(), 350u);
  EXPECT_NEAR(plan->variables[0].hot_share, (50 + 200.0 / 7 + 100 * 400.0 / 22'400) / 500, 1e-9)
      << plan->variables[0].reason;
}

// What an earlier attempt's rank 0 measured while training replaces the
// sampled batches' counts of the tables it names: here rows 100-109 were
// in every one of 40 steps, and the sampled batches' 50 hot rows in none.
TEST_F(HotRowsPlanTest, RowsMeasuredWhileTrainingReplaceTheSampledOnes) {
  JobConfig job = Pinned(Job(Arch::kHybrid), VariablePath::kPs, VariablePath::kAllReduce);
  job.ps.hot_rows = 10;
  PlanInputs inputs;
  inputs.cluster = {.workers = 2, .hosts = 1, .shards = 2};
  inputs.shm_allreduce = true;
  inputs.variables = Skewed();
  MeasuredPresence m;
  m.attempt = 1;
  m.first_step = 60;
  m.step = 100;
  TablePresence& t = m.tables["emb"];
  t.steps = 40;
  for (int64_t id = 100; id < 110; ++id) t.row_steps[id] = 40;
  for (int64_t id = 0; id < 50; ++id) t.row_steps[id] = 3;
  t.row_steps[5'000'000] = 40;  // not a row of the table: ignored
  inputs.presence = m;
  auto plan = BuildPlan(job, inputs);
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  const PlannedVariable& emb = plan->variables[0];
  std::vector<int64_t> want(10);
  std::iota(want.begin(), want.end(), 100);
  EXPECT_EQ(emb.hot_rows, want) << emb.reason;
  EXPECT_NE(emb.reason.find("re-measured over steps 60-99 of attempt 1"), std::string::npos) << emb.reason;
  // A table measured over fewer than 2 steps, or whose counts kept fewer
  // rows than the count asked for, keeps its samples' rows.
  for (int64_t steps : {1, 40}) {
    inputs.presence->tables["emb"].steps = steps;
    inputs.presence->tables["emb"].row_steps = {{100, 1}, {101, 1}};
    auto sampled = BuildPlan(job, inputs);
    ASSERT_TRUE(sampled.ok()) << sampled.status().ToString();
    EXPECT_EQ(sampled->variables[0].hot_rows.size(), 10u);
    for (int64_t id : sampled->variables[0].hot_rows) EXPECT_LT(id, 50);
    EXPECT_EQ(sampled->variables[0].reason.find("re-measured"), std::string::npos);
  }
}

TEST_F(HotRowsPlanTest, ACountTakesThatManyOfTheMostFrequentRowsAndOffTakesNone) {
  std::vector<VariableInput> regs = Skewed();
  // Row 30 is in no batch: the 10 are among the 49 others every batch holds.
  for (auto& batch : regs[0].sampled_batches) {
    batch.erase(std::remove(batch.begin(), batch.end(), 30), batch.end());
  }
  auto plan = BuildHot(10, regs, 2, 1);
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  const std::vector<int64_t>& hot = plan->variables[0].hot_rows;
  ASSERT_EQ(hot.size(), 10u) << plan->variables[0].reason;
  for (int64_t id : hot) EXPECT_TRUE(id < 50 && id != 30) << id;
  EXPECT_NE(plan->variables[0].reason.find("hot rows: 10 of 20000 ([ps] hot_rows"), std::string::npos)
      << plan->variables[0].reason;
  auto off = BuildHot(0, regs, 2, 1);
  ASSERT_TRUE(off.ok());
  EXPECT_TRUE(off->variables[0].hot_rows.empty());
  EXPECT_EQ(off->variables[0].reason.find("hot rows"), std::string::npos);
}

TEST_F(HotRowsPlanTest, APlanWithBadHotRowsIsRefusedByName) {
  auto plan = BuildHot(10, Skewed(), 2, 1);
  ASSERT_TRUE(plan.ok());
  JobPlan bad = *plan;
  bad.variables[0].hot_rows = {3, 3};
  EXPECT_NE(ParseJobPlan(JobPlanToJson(bad)).status().message().find(
                "variables[0]: \"hot_rows\"[1] = 3: hot rows must be distinct rows of [0, 20000)"),
            std::string::npos);
  bad = *plan;
  bad.variables[1].hot_rows = {0};
  EXPECT_NE(ParseJobPlan(JobPlanToJson(bad)).status().message().find(
                "\"hot_rows\" only for a sparse table of fixed rows on the PS"),
            std::string::npos);
  bad = *plan;
  bad.variables[0].hot_share = 1.5;
  EXPECT_NE(ParseJobPlan(JobPlanToJson(bad)).status().message().find(
                "variables[0]: \"hot_rows_share\" = 1.500000: a share of the rows a step touches"),
            std::string::npos)
      << ParseJobPlan(JobPlanToJson(bad)).status().message();
}

}  // namespace
}  // namespace parallax::plan
