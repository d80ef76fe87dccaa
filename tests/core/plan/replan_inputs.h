// What the re-planning tests plan (core/plan/plan_correction.h,
// coordinator/orchestration/replan_monitor.h): two variables on 2 workers, 2 shards, and a
// job file whose PS round trips are cheap enough that everything goes to
// the PS — the prediction the tests then prove wrong.
#ifndef PARALLAX_TESTS_CORE_PLAN_REPLAN_INPUTS_H_
#define PARALLAX_TESTS_CORE_PLAN_REPLAN_INPUTS_H_

#include <numeric>
#include <vector>

#include "core/plan/plan_builder.h"

namespace parallax::plan::testing {

// "emb": 100 x 4, one sampled batch touching 25 rows; "w": 4 dense
// elements. 2 workers on one host, 2 shards, Gloo's ring.
inline PlanInputs ReplanInputs() {
  PlanInputs in;
  in.cluster = {.workers = 2, .hosts = 1, .shards = 2};
  in.shm_allreduce = false;
  in.variables.resize(2);
  PlannedVariable& emb = in.variables[0].var;
  emb.id = 0;
  emb.name = "emb";
  emb.sparse = true;
  emb.rows = 100;
  emb.dim = 4;
  std::vector<int64_t> ids(25);
  std::iota(ids.begin(), ids.end(), 0);
  in.variables[0].sampled_batches = {ids};
  PlannedVariable& w = in.variables[1].var;
  w.id = 1;
  w.name = "w";
  w.size = 4;
  w.rows = 1;
  w.dim = 4;
  return in;
}

// The [plan] figures of the tests' job: a 1 GB/s link, 1 ms a collective
// call, 10 us a PS round trip (the [plan] text of kReplanPlanTable).
inline JobConfig ReplanJob() {
  JobConfig job;
  job.plan.link_bytes_per_s = 1e9;
  job.plan.collective_latency_us = 1000;
  job.plan.ps_rtt_us = 10;
  return job;
}
inline constexpr char kReplanPlanTable[] =
    "[plan]\nlink_bytes_per_s = 1e9\ncollective_latency_us = 1000\nps_rtt_us = 10\n";

}  // namespace parallax::plan::testing

#endif  // PARALLAX_TESTS_CORE_PLAN_REPLAN_INPUTS_H_
