// The rule-based plan, its JSON (which parallax-ps reads through
// ps::ParsePsPlan), and the cross-rank registration check.
#include "trainer/job_plan.h"

#include <gtest/gtest.h>

#include <algorithm>

#include <tuple>

namespace parallax::trainer {
namespace {

class JobPlanTest : public ::testing::Test {
 protected:
  static std::vector<Registration> Regs() {
    std::vector<Registration> regs(2);
    regs[0].var.id = 0;
    regs[0].var.name = "emb";
    regs[0].var.sparse = true;
    regs[0].var.rows = 100;
    regs[0].var.dim = 4;
    regs[0].var.density = 0.25;
    regs[0].var.optimizer.type = optim::OptimizerType::kAdagrad;
    regs[1].var.id = 1;
    regs[1].var.name = "w";
    regs[1].var.size = 4;
    regs[1].var.rows = 1;
    regs[1].var.dim = 4;
    return regs;
  }
  static SessionOptions Options(const std::string& arch, int shards) {
    SessionOptions o;
    o.arch = arch;
    o.num_shards = shards;
    o.world_size = 2;
    return o;
  }
  // `o` with the job file's [plan] figures.
  static SessionOptions WithFigures(SessionOptions o, double collective_us, double ps_rtt_us) {
    o.job.emplace();
    o.job->plan.link_bytes_per_s = 1e9;
    o.job->plan.collective_latency_us = collective_us;
    o.job->plan.ps_rtt_us = ps_rtt_us;
    return o;
  }
};

TEST_F(JobPlanTest, RulesPerArch) {
  struct Case {
    std::string arch;
    int shards;
    VariablePath emb, w;
  } cases[] = {// Two workers, the default figures (a collective call costs
               // 9 ms, a PS round trip 1.44 ms; the table moves a few
               // hundred bytes): PS's 2 round trips beat all-gather's 3
               // calls (see HybridAsksTheCostModel). Dense: all-reduce.
               {"hybrid", 2, VariablePath::kPs, VariablePath::kAllReduce},
               // No shards: all-reduce's one call (1.5 · 9 ms) beats
               // all-gather's three.
               {"hybrid", 0, VariablePath::kAllReduce, VariablePath::kAllReduce},
               {"allreduce", 2, VariablePath::kAllReduce, VariablePath::kAllReduce},
               {"allgather", 2, VariablePath::kAllGather, VariablePath::kAllReduce},
               {"ps", 2, VariablePath::kPs, VariablePath::kPs}};
  for (const Case& c : cases) {
    auto plan = BuildRulePlan(Options(c.arch, c.shards), Regs());
    ASSERT_TRUE(plan.ok()) << c.arch << ": " << plan.status().ToString();
    EXPECT_EQ(plan->variables[0].path, c.emb) << c.arch;
    EXPECT_EQ(plan->variables[1].path, c.w) << c.arch;
    size_t on_ps = (c.emb == VariablePath::kPs) + (c.w == VariablePath::kPs);
    EXPECT_EQ(plan->ps.variables.size(), on_ps) << c.arch;
  }
  EXPECT_EQ(BuildRulePlan(Options("ps", 0), Regs()).status().code(),
            StatusCode::kFailedPrecondition);
  EXPECT_EQ(BuildRulePlan(Options("mesh", 1), Regs()).status().code(),
            StatusCode::kInvalidArgument);
  auto explicit_values = Regs();
  explicit_values[1].explicit_values = true;
  EXPECT_EQ(BuildRulePlan(Options("ps", 2), explicit_values).status().code(),
            StatusCode::kFailedPrecondition);
}

TEST_F(JobPlanTest, HybridAsksTheCostModel) {
  // 100 × 4 on 4 workers of one host, 2 shards, α = 0.25 (25 rows of 24
  // bytes). By bytes ([plan] figures with no per-operation cost): PS puts
  // 4 · 2 · (600 + 256) = 6,848 bytes a step on the host's link, all-gather
  // 4 · 3 · (600 + 1516) = 25,392, all-reduce 4 · 1.5 · 1,600 = 9,600.
  SessionOptions four = WithFigures(Options("hybrid", 2), 0, 0);
  four.world_size = 4;
  auto sparse = BuildRulePlan(four, Regs());
  ASSERT_TRUE(sparse.ok()) << sparse.status().ToString();
  EXPECT_EQ(sparse->variables[0].path, VariablePath::kPs);
  EXPECT_NE(sparse->variables[0].reason.find("ps 0.00685 ms/step (6.85 KB"), std::string::npos)
      << sparse->variables[0].reason;
  // Two workers, by bytes: this small table (1,600 bytes) is cheapest
  // all-reduced whole, 2 · 1,600 = 3,200 bytes on the link, against PS
  // (2 · 2 · 856 = 3,424) and all-gather (2 · (600 + 1,516) = 4,232: its rows
  // weigh less than Gloo's framing of its 3 calls).
  auto two = BuildRulePlan(WithFigures(Options("hybrid", 2), 0, 0), Regs());
  ASSERT_TRUE(two.ok());
  EXPECT_EQ(two->variables[0].path, VariablePath::kAllReduce);
  // 10,000 rows, 2,500 touched (60,000 bytes): all-gather, 2 · 61,516 =
  // 123,032 bytes, against PS's 2 · 2 · 60,256 = 241,024 and all-reduce's
  // 2 · 160,000 = 320,000.
  auto big = Regs();
  big[0].var.rows = 10'000;
  auto by_bytes = BuildRulePlan(WithFigures(Options("hybrid", 2), 0, 0), big);
  ASSERT_TRUE(by_bytes.ok());
  EXPECT_EQ(by_bytes->variables[0].path, VariablePath::kAllGather);
  // The same with the job's [plan] saying a collective call takes 3 ms and a
  // PS round trip 1 ms (as measured here, a call costs several round trips):
  // all-gather 0.12 + 3 · 3 ms, all-reduce 0.32 + 1.5 · 3 ms, PS
  // 0.24 + 2 · 1 ms: PS.
  auto by_time = BuildRulePlan(WithFigures(Options("hybrid", 2), 3000, 1000), big);
  ASSERT_TRUE(by_time.ok());
  EXPECT_EQ(by_time->variables[0].path, VariablePath::kPs);
  EXPECT_NE(by_time->variables[0].reason.find("ps 2.24 ms/step"), std::string::npos)
      << by_time->variables[0].reason;
  EXPECT_EQ(by_time->variables[1].path, VariablePath::kAllReduce);  // dense
  EXPECT_EQ(by_time->ps.variables.size(), 1u);
  // α = 0.9: PS and all-gather move more than all-reduce.
  auto regs = Regs();
  regs[0].var.density = 0.9;
  auto dense = BuildRulePlan(four, regs);
  ASSERT_TRUE(dense.ok());
  EXPECT_EQ(dense->variables[0].path, VariablePath::kAllReduce);
  EXPECT_TRUE(dense->ps.variables.empty());
  // Not measured: the rule (PS when there are shards), and it says so.
  regs[0].var.density = -1;
  auto unmeasured = BuildRulePlan(four, regs);
  ASSERT_TRUE(unmeasured.ok());
  EXPECT_EQ(unmeasured->variables[0].path, VariablePath::kPs);
  EXPECT_NE(unmeasured->variables[0].reason.find("not measured"), std::string::npos);
  // The reason travels with the plan.
  auto back = ParseJobPlan(JobPlanToJson(*sparse));
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(back->variables[0].reason, sparse->variables[0].reason);
}

// [ps] shared_memory reaches the cost model: on one host the 10,000-row
// table's values leave the sockets (PS: 2 · 2 · (2,500 · 8 + 256 + 2 · 16)
// = 81,152 bytes on the link by bytes), and PS beats all-gather's 123,032.
TEST_F(JobPlanTest, SharedMemoryMakesSameMachinePsCheaper) {
  auto big = Regs();
  big[0].var.rows = 10'000;
  SessionOptions o = WithFigures(Options("hybrid", 2), 0, 0);
  auto without = BuildRulePlan(o, big);
  ASSERT_TRUE(without.ok());
  EXPECT_EQ(without->variables[0].path, VariablePath::kAllGather);
  o.ps_shared_memory = true;
  auto with = BuildRulePlan(o, big);
  ASSERT_TRUE(with.ok()) << with.status().ToString();
  EXPECT_EQ(with->variables[0].path, VariablePath::kPs) << with->variables[0].reason;
  EXPECT_NE(with->variables[0].reason.find("ps 0.0812 ms/step"), std::string::npos)
      << with->variables[0].reason;
}

TEST_F(JobPlanTest, ConsistencyReachesTheShards) {
  SessionOptions o = Options("hybrid", 2);
  o.consistency = "ssp";
  o.staleness = 3;
  o.ps_fp16_values = true;
  auto plan = BuildRulePlan(o, Regs());
  ASSERT_TRUE(plan.ok());
  auto ps = ps::ParsePsPlan(JobPlanToJson(*plan));
  ASSERT_TRUE(ps.ok()) << ps.status().ToString();
  EXPECT_EQ(ps->consistency, ps::Consistency::kSsp);
  EXPECT_EQ(ps->staleness, 3);
  EXPECT_TRUE(ps->fp16_values);
  o.consistency = "eventual";
  EXPECT_EQ(BuildRulePlan(o, Regs()).status().code(), StatusCode::kInvalidArgument);
}

TEST_F(JobPlanTest, VariableTablesWinOverTheRule) {
  SessionOptions o = Options("hybrid", 2);
  o.job = JobConfig();
  VariableOverride emb;
  emb.name = "emb";
  emb.path = "allgather";
  VariableOverride w;
  w.name = "w";
  w.path = "ps";
  w.optimizer = OptimizerConfig();
  w.optimizer->type = "adam";
  o.job->variables = {emb, w};
  auto plan = BuildRulePlan(o, Regs());
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  EXPECT_EQ(plan->variables[0].path, VariablePath::kAllGather);
  EXPECT_EQ(plan->variables[1].path, VariablePath::kPs);
  EXPECT_EQ(plan->variables[1].optimizer.type, optim::OptimizerType::kAdam);
  ASSERT_EQ(plan->ps.variables.size(), 1u);
  EXPECT_EQ(plan->ps.variables[0].optimizer.type, ps::OptimizerType::kAdam);
  o.job->variables[0].name = "embedding";
  Status st = BuildRulePlan(o, Regs()).status();
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("\"embedding\""), std::string::npos) << st.message();
}

TEST_F(JobPlanTest, JsonRoundTripAndShardsReadThePsPart) {
  auto plan = BuildRulePlan(Options("ps", 2), Regs());
  ASSERT_TRUE(plan.ok());
  const std::string json = JobPlanToJson(*plan);
  auto back = ParseJobPlan(json);
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  ASSERT_EQ(back->variables.size(), 2u);
  EXPECT_EQ(back->variables[0].name, "emb");
  EXPECT_EQ(back->variables[0].path, VariablePath::kPs);
  EXPECT_DOUBLE_EQ(back->variables[0].density, 0.25);
  EXPECT_EQ(back->variables[0].optimizer.type, optim::OptimizerType::kAdagrad);
  EXPECT_EQ(back->variables[1].size, 4u);
  auto ps = ps::ParsePsPlan(json);  // what parallax-ps does with the whole plan
  ASSERT_TRUE(ps.ok()) << ps.status().ToString();
  ASSERT_EQ(ps->variables.size(), 2u);
  EXPECT_EQ(ps->variables[0].partitions, 2u);
  EXPECT_EQ(ps->num_workers, 2u);
  EXPECT_EQ(ps->variables[0].optimizer.type, ps::OptimizerType::kAdagrad);
  EXPECT_FALSE(ParseJobPlan("{").ok());
}

TEST_F(JobPlanTest, RegistrationMismatchNamesTheVariable) {
  auto plan = BuildRulePlan(Options("hybrid", 2), Regs());
  ASSERT_TRUE(plan.ok());
  EXPECT_TRUE(CheckRegistrationsMatch(*plan, Regs(), 1).ok());
  auto other = Regs();
  other[0].var.dim = 8;
  Status st = CheckRegistrationsMatch(*plan, other, 1);
  EXPECT_EQ(st.code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(st.message().find("\"emb\""), std::string::npos) << st.message();
  EXPECT_NE(st.message().find("rank 1"), std::string::npos) << st.message();
  other = Regs();
  other.pop_back();
  EXPECT_EQ(CheckRegistrationsMatch(*plan, other, 1).code(), StatusCode::kFailedPrecondition);
}

// Local aggregation: sync mode, several hosts, more ranks than hosts, and
// only sparse variables on the PS path; the shards then expect one
// contribution per host.
TEST_F(JobPlanTest, LocalAggregationOnlyWhereItSavesLinkBytes) {
  auto options = [](int workers, int hosts, const std::string& consistency, bool enabled) {
    SessionOptions o = Options("hybrid", 2);
    o.world_size = workers;
    o.num_hosts = hosts;
    o.consistency = consistency;
    o.ps_local_aggregation = enabled;
    o.job = JobConfig();
    VariableOverride emb;
    emb.name = "emb";
    emb.path = "ps";
    o.job->variables = {emb};
    return o;
  };
  auto on = BuildRulePlan(options(4, 2, "sync", true), Regs());
  ASSERT_TRUE(on.ok()) << on.status().ToString();
  EXPECT_TRUE(on->local_aggregation);
  EXPECT_EQ(on->ps.contributors(), 2u);
  EXPECT_EQ(on->ps.num_workers, 4u);  // the shard's mean still divides by the workers
  auto round_trip = ParseJobPlan(JobPlanToJson(*on));
  ASSERT_TRUE(round_trip.ok()) << round_trip.status().ToString();
  EXPECT_TRUE(round_trip->local_aggregation);
  EXPECT_EQ(round_trip->ps.contributors(), 2u);

  for (auto [workers, hosts, consistency, enabled] :
       {std::tuple{4, 1, "sync", true},     // one host: every byte is local anyway
        std::tuple{2, 2, "sync", true},     // one rank per host: nothing to combine
        std::tuple{4, 2, "async", true},    // every rank keeps its own clock
        std::tuple{4, 2, "sync", false}}) {  // [ps] local_aggregation = false
    auto off = BuildRulePlan(options(workers, hosts, consistency, enabled), Regs());
    ASSERT_TRUE(off.ok()) << off.status().ToString();
    EXPECT_FALSE(off->local_aggregation) << workers << " workers on " << hosts << " hosts, "
                                         << consistency << ", enabled " << enabled;
    EXPECT_EQ(off->ps.contributors(), static_cast<uint32_t>(workers));
  }
  // A dense variable on the PS path needs its values back on every rank.
  SessionOptions all_ps = options(4, 2, "sync", true);
  all_ps.arch = "ps";
  auto dense = BuildRulePlan(all_ps, Regs());
  ASSERT_TRUE(dense.ok()) << dense.status().ToString();
  EXPECT_FALSE(dense->local_aggregation);
}

TEST_F(JobPlanTest, StalenessLrReachesTheShardsPlanOutsideSync) {
  SessionOptions o = Options("ps", 2);
  o.ps_staleness_lr = true;
  o.consistency = "async";
  auto plan = BuildRulePlan(o, Regs());
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  EXPECT_TRUE(plan->ps.staleness_lr);
  auto parsed = ParseJobPlan(JobPlanToJson(*plan));
  ASSERT_TRUE(parsed.ok()) << parsed.status().ToString();
  EXPECT_TRUE(parsed->ps.staleness_lr);
  o.consistency = "sync";
  EXPECT_FALSE(BuildRulePlan(o, Regs())->ps.staleness_lr);
}

// More partitions than shards: placed by the sampled rows' load (a Zipf
// head), within 10% of a perfect balance, and the reason says so.
TEST_F(JobPlanTest, PartitionsArePlacedOnShardsBySampledLoad) {
  std::vector<Registration> regs = Regs();
  regs[0].var.rows = 1000;
  for (int64_t id = 0; id < 1000; ++id) {
    regs[0].row_samples[id] = static_cast<uint32_t>(10'000 / (id + 1)) + 1;
  }
  SessionOptions o = Options("ps", 4);
  o.ps_partitions = 16;
  auto plan = BuildRulePlan(o, regs);
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  const ps::VariableSpec& emb = plan->ps.variables[0];
  ASSERT_EQ(emb.partitions, 16u);
  ASSERT_EQ(emb.partition_shards.size(), 16u);
  std::vector<double> shard_load(4, 0.0);
  double total = 0;
  for (const auto& [id, count] : regs[0].row_samples) {
    shard_load[emb.partition_shards[ps::PartitionOf(emb, id)]] += count;
    total += count;
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

}  // namespace
}  // namespace parallax::trainer
