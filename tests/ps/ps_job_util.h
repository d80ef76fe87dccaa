// For PS tests against a real parallax-coordinator: a submitted job whose
// plan holds a given PS plan, stored the way trainer rank 0 stores it.
#ifndef PARALLAX_TESTS_PS_PS_JOB_UTIL_H_
#define PARALLAX_TESTS_PS_PS_JOB_UTIL_H_

#include <algorithm>
#include <cstdint>
#include <string>

#include "core/plan/job_plan.h"
#include "core/ps/plan.h"
#include "core/rpc/coordinator_client.h"
#include "parallax/status.h"

namespace parallax::ps {

struct SubmittedPsJob {
  int64_t job_id = 0;
  int32_t attempt = 0;
};

// Submits `job_text` (as if from `job_path`) and stores `plan` as the PS
// part of its plan for the job's attempt.
inline StatusOr<SubmittedPsJob> SubmitJobWithPsPlan(CoordinatorClient* coord,
                                                    const std::string& job_text,
                                                    const std::string& job_path,
                                                    const PsPlan& plan) {
  StatusOr<rpc::JobInfo> job = coord->SubmitJob(job_text, job_path);
  if (!job.ok()) return job.status();
  SubmittedPsJob out{job->id, std::max(1, job->attempt)};
  PX_RETURN_IF_ERROR(
      coord->PutPlan(out.job_id, out.attempt, plan::JobPlanToJson(plan::JobPlanOfPs(plan))));
  return out;
}

// One async variable "emb" of 100 rows of `dim` zeros on shard 0 of 1.
inline PsPlan OneShardAsyncPlan(uint32_t dim) {
  PsPlan plan;
  plan.consistency = Consistency::kAsync;
  plan.num_shards = 1;
  VariableSpec v;
  v.name = "emb";
  v.rows = 100;
  v.dim = dim;
  v.partition_shards = {0};
  v.init.type = Initializer::Type::kZeros;
  plan.variables.push_back(v);
  return plan;
}

}  // namespace parallax::ps

#endif  // PARALLAX_TESTS_PS_PS_JOB_UTIL_H_
