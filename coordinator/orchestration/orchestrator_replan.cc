// The orchestrator's part of re-planning on evidence
// (coordinator/orchestration/replan_monitor.h): an attempt asked to re-plan stops at its
// next committed checkpoint and the job is requeued, like an elastic job
// that grows (coordinator/orchestration/orchestrator_pass.cc), without counting a restart.
#include "coordinator/orchestration/orchestrator.h"

namespace parallax::coordinator {

void Orchestrator::ReplanAtCheckpoint(int64_t job_id, int attempt, const std::string& reason) {
  std::lock_guard<std::mutex> lock(mu_);
  LiveJob* job = view_.FindLive(job_id);
  if (job == nullptr || job->record.attempt != attempt) return;
  job->replan = reason;
  dirty_.insert(job_id);
}

StatusOr<bool> Orchestrator::MaybeReplan(LiveJob& live, int64_t now) {
  if (live.replan.empty()) return false;
  const int64_t step = live.checkpointed_step;
  const int64_t id = live.record.id;
  const std::string reason = "re-plans at the checkpoint of step " + std::to_string(step) +
                             ": the next attempt resumes from it with a plan " + live.replan;
  live.replan.clear();
  live.checkpointed_step = -1;
  // Written at once, like an elastic job's growth: rare, and not a restart.
  PX_RETURN_IF_ERROR(store_->AppendEvent(id, "replan", reason, now).status());
  PX_ASSIGN_OR_RETURN(JobRecord requeued, store_->RequeueJob(id, reason, now));
  ApplyJob(requeued, live.config);
  return true;
}

}  // namespace parallax::coordinator
