// ReplanMonitor over a real SQLite store: metric points of every rank make
// intervals, a sustained disagreement makes one event, with [plan] replan a
// correction and a request (once in the job's life), and the plan of the
// next attempt an event saying what changed.
#include "coordinator/orchestration/replan_monitor.h"

#include <gtest/gtest.h>

#include "core/plan/plan_builder.h"
#include "core/plan/plan_correction.h"
#include "core/plan/straggler.h"
#include "tests/coordinator/sqlite_service.h"
#include "tests/core/plan/replan_inputs.h"
#include "schemas/kv_keys.h"

namespace parallax::coordinator {
namespace {

class ReplanMonitorTest : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_TRUE(db_.Open().ok()); }

  // A job of 2 workers whose [plan] says PS round trips cost 10 us.
  int64_t CreateJob(bool replan) {
    NewJob job;
    job.name = "t";
    job.workers = 2;
    job.job_text = std::string("[job]\nname = \"t\"\nworkers = 2\n[trainer]\nmodel = \"lm\"\n") +
                   plan::testing::kReplanPlanTable +
                   "replan_after_steps = 10\nreplan_window_steps = 20\n" +
                   (replan ? "replan = true\n" : "");
    StatusOr<JobRecord> created = db_.store->CreateJob(job, 0);
    EXPECT_TRUE(created.ok()) << created.status().ToString();
    return created.ok() ? created->id : 0;
  }
  // Stores the plan of `attempt`: "emb" (100 x 4, a quarter of its rows a
  // batch) and "w" (4 dense elements) on 2 workers, 2 shards, built as rank
  // 0 builds it (with `correction` when given).
  plan::JobPlan PutPlan(int64_t job_id, int attempt,
                        std::optional<plan::PlanCorrection> correction = std::nullopt) {
    plan::PlanInputs in = plan::testing::ReplanInputs();
    in.correction = correction;
    StatusOr<plan::JobPlan> plan = plan::BuildPlan(plan::testing::ReplanJob(), in);
    EXPECT_TRUE(plan.ok()) << plan.status().ToString();
    EXPECT_TRUE(db_.store->PutPlan(job_id, attempt, plan::JobPlanToJson(*plan), 0).ok());
    return *plan;
  }
  // Every rank's point at `step` covering `steps` steps, waiting `sparse_ms`
  // on the PS per step.
  static std::vector<MetricRecord> Points(int64_t job_id, int attempt, int64_t step,
                                          double sparse_ms, int ranks = 2, int64_t steps = 10) {
    std::vector<MetricRecord> out;
    for (int r = 0; r < ranks; ++r) {
      MetricRecord p;
      p.job_id = job_id;
      p.attempt = attempt;
      p.rank = r;
      p.step = step;
      p.values = {{"dense_wait_ms", 0.0}, {"sparse_wait_ms", sparse_ms},
                  {"steps", static_cast<double>(steps)}};
      out.push_back(p);
    }
    return out;
  }
  // The messages of the job's "replan" events.
  std::vector<std::string> ReplanEvents(int64_t job_id) {
    std::vector<std::string> out;
    StatusOr<std::vector<EventRecord>> events = db_.store->ListEvents(job_id, 0, 1000);
    EXPECT_TRUE(events.ok());
    for (const EventRecord& e : *events) {
      if (e.kind == "replan") out.push_back(e.message);
    }
    return out;
  }
  // Feeds steps 9, 19, ..., `last` (10 steps each) of `attempt`; the
  // requests made.
  std::vector<ReplanRequest> Run(ReplanMonitor* monitor, int64_t job_id, int attempt,
                                 int64_t last, double sparse_ms) {
    std::vector<ReplanRequest> all;
    for (int64_t step = 9; step <= last; step += 10) {
      StatusOr<std::vector<ReplanRequest>> got =
          monitor->Observe(Points(job_id, attempt, step, sparse_ms), 0);
      EXPECT_TRUE(got.ok()) << got.status().ToString();
      if (got.ok()) all.insert(all.end(), got->begin(), got->end());
    }
    return all;
  }

  testing::SqliteService db_;
};

TEST_F(ReplanMonitorTest, WithoutReplanOnlyTheEvent) {
  ReplanMonitor monitor(db_.store.get());
  const int64_t id = CreateJob(false);
  PutPlan(id, 1);
  // Steps 0-9 are warm-up; 10-29 two intervals at 20 ms/step of PS wait.
  EXPECT_TRUE(Run(&monitor, id, 1, 29, 20.0).empty());
  const std::vector<std::string> events = ReplanEvents(id);
  ASSERT_EQ(events.size(), 1u);
  EXPECT_NE(events[0].find("measured communication 20 ms/step, predicted "), std::string::npos)
      << events[0];
  EXPECT_NE(events[0].find("over steps 10-29 on attempt 1; [plan] replan = true would re-plan"),
            std::string::npos)
      << events[0];
  EXPECT_FALSE(db_.store->KvGet(kv_keys::PlanCorrection(id))->has_value());
  // Later intervals of the same attempt: nothing more.
  EXPECT_TRUE(Run(&monitor, id, 1, 99, 20.0).empty());
  EXPECT_EQ(ReplanEvents(id).size(), 1u);
}

TEST_F(ReplanMonitorTest, AStepNotEveryRankReportedIsNotCompared) {
  ReplanMonitor monitor(db_.store.get());
  const int64_t id = CreateJob(false);
  PutPlan(id, 1);
  for (int64_t step = 9; step <= 99; step += 10) {
    ASSERT_TRUE(monitor.Observe(Points(id, 1, step, 20.0, /*ranks=*/1), 0).ok());
  }
  EXPECT_TRUE(ReplanEvents(id).empty());
}

TEST_F(ReplanMonitorTest, ReplanOnceStoresTheCorrectionAndNamesWhatChanged) {
  ReplanMonitor monitor(db_.store.get());
  const int64_t id = CreateJob(true);
  const plan::JobPlan first = PutPlan(id, 1);
  ASSERT_EQ(first.variables[0].path, VariablePath::kPs);
  const std::vector<ReplanRequest> requests = Run(&monitor, id, 1, 29, 20.0);
  ASSERT_EQ(requests.size(), 1u);
  EXPECT_EQ(requests[0].job_id, id);
  EXPECT_EQ(requests[0].attempt, 1);
  StatusOr<std::optional<std::string>> stored = db_.store->KvGet(kv_keys::PlanCorrection(id));
  ASSERT_TRUE(stored.ok() && stored->has_value());
  StatusOr<plan::PlanCorrection> c = plan::ParsePlanCorrection(**stored);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->from_attempt, 1);
  EXPECT_GT(c->ps_time_scale, 100);
  EXPECT_EQ(c->collective_time_scale, 1);
  std::vector<std::string> events = ReplanEvents(id);
  ASSERT_EQ(events.size(), 1u);
  EXPECT_NE(events[0].find("; the job re-plans at its next checkpoint (" + c->source + ")"),
            std::string::npos)
      << events[0];

  // Attempt 2's rank 0 planned with it: the event says what moved.
  const plan::JobPlan second = PutPlan(id, 2, *c);
  EXPECT_NE(second.variables[0].path, VariablePath::kPs);
  ASSERT_TRUE(monitor.PlanStored(id, 2, 0).ok());
  events = ReplanEvents(id);
  ASSERT_EQ(events.size(), 2u);
  EXPECT_EQ(events[1].rfind("attempt 2 " + c->source + ": emb: ps (P=2) -> ", 0), 0u)
      << events[1];

  // Attempt 2 disagrees too: the event, and no second re-plan.
  EXPECT_TRUE(Run(&monitor, id, 2, 49, 500.0).empty());
  events = ReplanEvents(id);
  ASSERT_EQ(events.size(), 3u);
  EXPECT_NE(events[2].find("on attempt 2; the job re-planned once already and does not again"),
            std::string::npos)
      << events[2];
  // A plan of a later attempt (a restart) is no first re-planned attempt.
  PutPlan(id, 3, *c);
  ASSERT_TRUE(monitor.PlanStored(id, 3, 0).ok());
  EXPECT_EQ(ReplanEvents(id).size(), 3u);
}

// Every attempt plans again, so a restart (planned with the hosts' figures
// the first attempt measured) or a resize may put variables elsewhere
// without a re-plan: an event says which moved.
TEST_F(ReplanMonitorTest, ARestartWhosePlanMovedVariablesSaysSo) {
  ReplanMonitor monitor(db_.store.get());
  const int64_t id = CreateJob(false);
  const plan::JobPlan first = PutPlan(id, 1);
  ASSERT_EQ(first.variables[0].path, VariablePath::kPs);
  // The same plan again: nothing to say.
  PutPlan(id, 2);
  ASSERT_TRUE(monitor.PlanStored(id, 2, 0).ok());
  EXPECT_TRUE(ReplanEvents(id).empty());
  // Figures that make the PS slow (no correction stored: not a re-plan).
  const plan::JobPlan third =
      PutPlan(id, 3, plan::PlanCorrection{.from_attempt = 2, .collective_time_scale = 1, .ps_time_scale = 1e4});
  ASSERT_NE(third.variables[0].path, VariablePath::kPs);
  ASSERT_TRUE(monitor.PlanStored(id, 3, 0).ok());
  const std::vector<std::string> events = ReplanEvents(id);
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].rfind("attempt 3 planned variables elsewhere than attempt 2: emb: ps (P=2) -> ", 0), 0u)
      << events[0];
  EXPECT_NE(events[0].find("w: ps (P=1) -> allreduce; each resumes with its state from the checkpoint"),
            std::string::npos)
      << events[0];
}

// Hot rows that serve far fewer of a step's rows than the plan expected
// (the data moved on since the batches they were chosen from): one event,
// and with [plan] replan a re-plan at the next checkpoint, whose plan takes
// its hot rows from what rank 0 re-measured. The model's time scales stay.
TEST_F(ReplanMonitorTest, HotRowsServingFarFewerRowsThanPlannedReplanOnce) {
  for (const double hits : {2.0, 4.0}) {
    ReplanMonitor monitor(db_.store.get());
    const int64_t id = CreateJob(true);
    StatusOr<plan::JobPlan> plan = plan::BuildPlan(plan::testing::ReplanJob(), plan::testing::ReplanInputs());
    ASSERT_TRUE(plan.ok()) << plan.status().ToString();
    ASSERT_EQ(plan->variables[0].path, VariablePath::kPs);
    plan->variables[0].hot_rows = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9};
    plan->variables[0].hot_share = 0.6;
    ASSERT_TRUE(db_.store->PutPlan(id, 1, plan::JobPlanToJson(*plan), 0).ok());
    // The communication as predicted, so only the hot rows can speak; of a
    // step's 10 distinct rows of the table the hot rows served `hits`.
    const plan::PredictedComm predicted = plan::PredictedCommOf(*plan);
    std::vector<ReplanRequest> requests;
    for (int64_t step = 9; step <= 49; step += 10) {
      std::vector<MetricRecord> points = Points(id, 1, step, predicted.sparse_s * 1e3);
      for (MetricRecord& p : points) {
        p.values["dense_wait_ms"] = predicted.dense_s * 1e3;
        p.values["hot_row_hits"] = hits;
        p.values["hot_row_misses"] = 10 - hits;
      }
      StatusOr<std::vector<ReplanRequest>> got = monitor.Observe(points, 0);
      ASSERT_TRUE(got.ok()) << got.status().ToString();
      requests.insert(requests.end(), got->begin(), got->end());
    }
    const std::vector<std::string> events = ReplanEvents(id);
    if (hits == 4.0) {  // 40% against 60%: within [plan] replan_factor 2
      EXPECT_TRUE(requests.empty());
      EXPECT_TRUE(events.empty()) << events[0];
      continue;
    }
    ASSERT_EQ(requests.size(), 1u);
    ASSERT_EQ(events.size(), 1u);
    EXPECT_EQ(events[0].rfind("hot rows served 20% of their tables' distinct rows a step over steps "
                              "10-29, the plan expected 60% on attempt 1; the job re-plans at its "
                              "next checkpoint (",
                              0),
              0u)
        << events[0];
    StatusOr<std::optional<std::string>> stored = db_.store->KvGet(kv_keys::PlanCorrection(id));
    ASSERT_TRUE(stored.ok() && stored->has_value());
    StatusOr<plan::PlanCorrection> c = plan::ParsePlanCorrection(**stored);
    ASSERT_TRUE(c.ok()) << c.status().ToString();
    EXPECT_EQ(c->collective_time_scale, 1);
    EXPECT_EQ(c->ps_time_scale, 1);
    EXPECT_NE(c->source.find("hot rows re-measured"), std::string::npos) << c->source;
    EXPECT_EQ(requests[0].reason, c->source);
  }
}

TEST_F(ReplanMonitorTest, AnAttemptWithoutAPlanIsNotWatched) {
  ReplanMonitor monitor(db_.store.get());
  const int64_t id = CreateJob(true);
  EXPECT_TRUE(Run(&monitor, id, 1, 99, 20.0).empty());
  EXPECT_TRUE(ReplanEvents(id).empty());
}

// A sync job's ranks' compute spread is kept for the next sync plan of as
// many workers: the mean over the measured steps of the slowest rank's
// compute less the mean, past the attempt's first 5 steps.
// The fast rank of a sync job waits for the slow one's compute as well; the
// plan predicts communication only, which the rank the others waited for
// measures.
TEST_F(ReplanMonitorTest, ASyncJobComparesTheWaitOfTheRankThatWaitedLeast) {
  ReplanMonitor monitor(db_.store.get());
  const int64_t id = CreateJob(false);
  const plan::PredictedComm predicted = plan::PredictedCommOf(PutPlan(id, 1));
  for (int64_t step = 9; step <= 99; step += 10) {
    std::vector<MetricRecord> points = Points(id, 1, step, 0.0);
    points[0].values["dense_wait_ms"] = predicted.dense_s * 1e3 + 20.0;
    points[0].values["sparse_wait_ms"] = predicted.sparse_s * 1e3 + 20.0;
    points[0].values["compute_ms"] = 10.0;
    points[1].values["dense_wait_ms"] = predicted.dense_s * 1e3;
    points[1].values["sparse_wait_ms"] = predicted.sparse_s * 1e3;
    points[1].values["compute_ms"] = 50.0;
    ASSERT_TRUE(monitor.Observe(points, 0).ok());
  }
  // The mean over the ranks, 20 ms a part more than predicted, would have
  // been a disagreement.
  EXPECT_TRUE(ReplanEvents(id).empty());
}

TEST_F(ReplanMonitorTest, ASyncJobStoresItsWaitForTheSlowestRank) {
  ReplanMonitor monitor(db_.store.get());
  const int64_t id = CreateJob(false);
  PutPlan(id, 1);
  auto feed = [&](int64_t step, double rank1_compute_ms) {
    std::vector<MetricRecord> points = Points(id, 1, step, 0.0);
    points[0].values["compute_ms"] = 10.0;
    points[1].values["compute_ms"] = rank1_compute_ms;
    ASSERT_TRUE(monitor.Observe(points, (100 + step) * 1000).ok());
  };
  // Steps 0-9 begin within the warm-up: not measured, whatever they show.
  feed(9, 500.0);
  EXPECT_FALSE(db_.store->KvGet(kv_keys::Straggler(2))->has_value());
  feed(19, 30.0);  // slowest 30, mean 20: 10 ms over 10 steps
  feed(29, 50.0);  // slowest 50, mean 30: 20 ms over 10 steps
  StatusOr<std::optional<std::string>> stored = db_.store->KvGet(kv_keys::Straggler(2));
  ASSERT_TRUE(stored.ok() && stored->has_value());
  StatusOr<plan::MeasuredStraggler> s = plan::ParseStraggler(**stored);
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_NEAR(s->straggler_s, 0.015, 1e-12);
  EXPECT_EQ(s->steps, 20);
  EXPECT_EQ(s->workers, 2);
  EXPECT_EQ(s->hosts, 1);
  EXPECT_EQ(s->job_id, id);
  EXPECT_EQ(s->measured_unix_s, 129);
  EXPECT_EQ(s->steps_per_point, 10);  // the job's metrics_every (default)
}

TEST_F(ReplanMonitorTest, AnAsyncJobStoresNoStraggler) {
  ReplanMonitor monitor(db_.store.get());
  NewJob job;
  job.name = "a";
  job.workers = 2;
  job.job_text = std::string("[job]\nname = \"a\"\nworkers = 2\nconsistency = \"async\"\n") +
                 "[trainer]\nmodel = \"lm\"\n" + plan::testing::kReplanPlanTable;
  StatusOr<JobRecord> created = db_.store->CreateJob(job, 0);
  ASSERT_TRUE(created.ok()) << created.status().ToString();
  PutPlan(created->id, 1);
  for (int64_t step = 9; step <= 99; step += 10) {
    std::vector<MetricRecord> points = Points(created->id, 1, step, 0.0);
    points[1].values["compute_ms"] = 40.0;
    ASSERT_TRUE(monitor.Observe(points, 0).ok());
  }
  EXPECT_FALSE(db_.store->KvGet(kv_keys::Straggler(2))->has_value());
}

}  // namespace
}  // namespace parallax::coordinator
