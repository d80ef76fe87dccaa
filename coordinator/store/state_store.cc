#include "coordinator/store/state_store.h"

#include "core/config/job_config.h"

namespace parallax::coordinator {

StatusOr<std::shared_ptr<const JobConfig>> StateStore::ParsedConfig(const JobRecord& job) {
  {
    std::lock_guard<std::mutex> lock(parsed_mu_);
    auto found = parsed_.find(job.id);
    if (found != parsed_.end() && found->second.job_text == job.job_text &&
        found->second.job_path == job.job_path) {
      return found->second.config;
    }
  }
  // Parsed outside the lock: two readers of a new job may both parse it,
  // and either result is the same.
  JobLoadOptions load;
  load.check_paths = false;
  StatusOr<JobConfig> parsed =
      ParseJobConfig(job.job_text, job.job_path.empty() ? "<submitted>" : job.job_path, load);
  if (!parsed.ok()) return parsed.status();
  auto config = std::make_shared<const JobConfig>(std::move(parsed).value());
  std::lock_guard<std::mutex> lock(parsed_mu_);
  // The oldest job ids go first: they are the finished ones.
  if (parsed_.size() >= kMaxParsedConfigs && parsed_.find(job.id) == parsed_.end()) {
    parsed_.erase(parsed_.begin());
  }
  parsed_[job.id] = ParsedEntry{job.job_text, job.job_path, config};
  return config;
}

}  // namespace parallax::coordinator
