// CoordinatorService's consistency calls: `parallax set JOB consistency=...`
// and the trainer ranks' leases (coordinator/service/consistency_switches.h).
#include "coordinator/service/service.h"
#include "core/plan/job_plan.h"
#include "core/ps/consistency_schedule.h"
#include "core/rpc/request_header.h"

namespace parallax::coordinator {
namespace {

template <typename T>
T ValueOrThrow(StatusOr<T> result) {
  if (!result.ok()) throw ToCoordinatorError(result.status());
  return std::move(result).value();
}

rpc::ConsistencySwitch ToRpc(const ConsistencySwitchRecord& r) {
  rpc::ConsistencySwitch s;
  s.from_step = r.from_step;
  s.consistency = r.consistency;
  return s;
}

}  // namespace

void CoordinatorService::SetConsistency(rpc::ConsistencySwitch& out,
                                        const rpc::RequestHeader& header, int64_t job_id,
                                        const std::string& consistency) {
  CheckHeader(header);
  if (job_id <= 0) {
    throw ToCoordinatorError(
        InvalidArgument("job id must be a positive integer, got " + std::to_string(job_id)));
  }
  const JobRecord job = ValueOrThrow(store_->GetJob(job_id));
  // Consistency is what PS variables do: refuse it for a plan without any.
  if (std::optional<std::string> json = ValueOrThrow(store_->GetPlan(job_id, job.attempt))) {
    StatusOr<plan::JobPlan> plan = plan::ParseJobPlan(*json);
    if (plan.ok() && !plan->has_ps()) {
      throw ToCoordinatorError(FailedPrecondition(
          "the plan of job " + std::to_string(job_id) + " attempt " + std::to_string(job.attempt) +
          " puts no variable on the PS; consistency applies to PS variables only (the dense "
          "paths are synchronous in every mode)"));
    }
    // Hot rows ([ps] hot_rows) are all-reduced every step, the sync rule:
    // under another mode a table's hot and other rows would learn by
    // different rules (a mean over the ranks once a step against every
    // worker's push applied as it comes).
    StatusOr<ps::ConsistencyMode> mode = ps::ParseConsistencyMode(consistency);
    if (plan.ok() && mode.ok() && mode->consistency != Consistency::kSync) {
      for (const plan::PlannedVariable& v : plan->variables) {
        if (v.hot_rows.empty()) continue;
        throw ToCoordinatorError(FailedPrecondition(
            "the plan of job " + std::to_string(job_id) + " attempt " +
            std::to_string(job.attempt) + " keeps " + std::to_string(v.hot_rows.size()) +
            " hot rows of \"" + v.name + "\" on every rank ([ps] hot_rows), all-reduced every "
            "step under the sync rule; consistency \"" + consistency + "\" would train them and "
            "the table's other rows by different rules. Resubmit the job without hot_rows to "
            "run it " + consistency));
      }
    }
  }
  const int64_t now = clock_->NowMillis();
  const ConsistencySwitchRecord placed = ValueOrThrow(consistency_.Add(job, consistency, now));
  const std::string who = header.__isset.client && !header.client.empty() ? header.client
                                                                          : "unknown client";
  (void)ValueOrThrow(store_->AppendEvent(job_id, "consistency",
                                   "consistency " + placed.consistency + " from step " +
                                       std::to_string(placed.from_step) + " (set by " + who +
                                       "; every rank and PS shard switches at that step)",
                                   now));
  out = ToRpc(placed);
}

void CoordinatorService::LeaseConsistency(std::vector<rpc::ConsistencySwitch>& out,
                                          const rpc::RequestHeader& header,
                                          const rpc::ConsistencyLeaseRequest& request) {
  CheckHeader(header);
  if (request.job_id <= 0 || request.attempt < 0 || request.rank < 0 || request.lease_until < 0) {
    throw ToCoordinatorError(
        InvalidArgument("a consistency lease needs job_id > 0 and attempt, rank, until >= 0"));
  }
  CheckAttempt(request.job_id, request.attempt);
  out.clear();
  for (const ConsistencySwitchRecord& r : ValueOrThrow(
           consistency_.Lease(request.job_id, request.attempt, request.rank, request.lease_until))) {
    out.push_back(ToRpc(r));
  }
}

}  // namespace parallax::coordinator
