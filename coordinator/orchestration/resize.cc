#include "coordinator/orchestration/resize.h"

#include <algorithm>

#include "core/config/job_edit.h"

namespace parallax::coordinator {
namespace {

bool HasShards(const JobConfig& c) {
  return c.job.arch != Arch::kAllReduce && c.job.arch != Arch::kAllGather;
}

std::string ShardsName(int shards) { return shards == 0 ? "auto" : std::to_string(shards); }

}  // namespace

StatusOr<ResumeEdit> EditForResume(const JobRecord& job, const ResumeChange& change) {
  const std::string where = "resuming job " + std::to_string(job.id);
  JobLoadOptions load;
  load.check_paths = false;
  const std::string old_source = job.job_path.empty() ? "<submitted>" : job.job_path;
  PX_ASSIGN_OR_RETURN(JobConfig before, ParseJobConfig(job.job_text, old_source, load));
  ResumeEdit edit;
  edit.job_text = change.job_text ? *change.job_text : job.job_text;
  edit.job_path = change.job_text ? change.job_path : job.job_path;
  const std::string source = edit.job_path.empty() ? "<submitted>" : edit.job_path;
  if (change.workers) {
    if (*change.workers < 1) {
      return InvalidArgument(where + ": --workers " + std::to_string(*change.workers) +
                             " must be at least 1");
    }
    PX_ASSIGN_OR_RETURN(edit.job_text,
                        SetInteger(edit.job_text, source, "job", "workers", *change.workers));
  }
  if (change.shards) {
    if (*change.shards < 0) {
      return InvalidArgument(where + ": --shards " + std::to_string(*change.shards) +
                             " must be 0 (one per host) or more");
    }
    PX_ASSIGN_OR_RETURN(edit.job_text,
                        SetInteger(edit.job_text, source, "ps", "shards", *change.shards));
  }
  StatusOr<JobConfig> after = ParseJobConfig(edit.job_text, source, load);
  if (!after.ok()) return after.status().WithContext(where);
  if (change.shards && !HasShards(*after)) {
    return InvalidArgument(where + ": --shards needs a job with PS shards; its arch is \"" +
                           std::string(ArchName(after->job.arch)) + "\"");
  }
  edit.workers = after->job.workers;
  edit.what = "resumed with";
  std::string changes;
  if (change.job_text) changes += " a new job file" + (edit.job_path.empty() ? "" : " (" + edit.job_path + ")");
  auto add = [&](const std::string& s) { changes += (changes.empty() ? " " : ", ") + s; };
  if (after->job.workers != before.job.workers) {
    add("workers " + std::to_string(before.job.workers) + " -> " +
        std::to_string(after->job.workers));
  }
  if (HasShards(*after) && after->ps.shards != before.ps.shards) {
    add("PS shards " + ShardsName(before.ps.shards) + " -> " + ShardsName(after->ps.shards));
  }
  if (changes.empty()) changes = " the same job file";
  edit.what += changes + "; the new attempt resumes from the newest committed checkpoint";
  return edit;
}

ElasticChoice ChooseElasticWorkers(const PendingJob& job, int free_slots, int64_t now) {
  ElasticChoice c;
  if (job.attempt == 0 || job.min_workers <= 0 || job.min_workers >= job.workers) return c;
  const int64_t deadline = job.since + job.replace_timeout_ms;
  const std::string min = "min_workers = " + std::to_string(job.min_workers);
  if (now < deadline) {
    c.recheck_at = deadline;
    c.reason = "waiting up to " + std::to_string((deadline - now + 999) / 1000) +
               " s for slots for all " + std::to_string(job.workers) +
               " workers; then it goes on with the free ones (" + min + ")";
    return c;
  }
  if (free_slots < job.min_workers) {
    c.reason = "elastic: " + std::to_string(free_slots) + " free slot(s), fewer than " + min;
    return c;
  }
  c.workers = std::min(job.workers, free_slots);
  c.reason = "elastic: shrinks to " + std::to_string(c.workers) + " of " +
             std::to_string(job.workers) + " workers (" + min + "): no slot for the others within " +
             std::to_string(job.replace_timeout_ms / 1000) +
             " s of the restart; the attempt resumes from the newest checkpoint";
  return c;
}

int GrowTo(const JobConfig& config, int current, int free_slots) {
  if (config.job.min_workers >= config.job.workers || current >= config.job.workers ||
      free_slots <= 0) {
    return 0;
  }
  return std::min(config.job.workers, current + free_slots);
}

}  // namespace parallax::coordinator
