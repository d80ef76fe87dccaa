#include "coordinator/service/consistency_switches.h"

#include <algorithm>

#include <nlohmann/json.hpp>

#include "coordinator/store/job_state.h"
#include "core/ps/consistency_schedule.h"
#include "schemas/kv_keys.h"

namespace parallax::coordinator {

StatusOr<const std::vector<ConsistencySwitchRecord>*> ConsistencySwitches::Read(int64_t job_id) {
  if (auto it = switches_.find(job_id); it != switches_.end()) return &it->second;
  PX_ASSIGN_OR_RETURN(std::optional<std::string> text, store_->KvGet(kv_keys::Consistency(job_id)));
  std::vector<ConsistencySwitchRecord> out;
  if (!text) return &(switches_[job_id] = std::move(out));
  nlohmann::json doc = nlohmann::json::parse(*text, nullptr, /*allow_exceptions=*/false);
  if (!doc.is_array()) {
    return Internal("the stored consistency switches of job " + std::to_string(job_id) +
                    " are not a JSON array");
  }
  for (const auto& s : doc) {
    if (!s.is_object() || !s.contains("from_step") || !s["from_step"].is_number_integer() ||
        !s.contains("consistency") || !s["consistency"].is_string()) {
      return Internal("a stored consistency switch of job " + std::to_string(job_id) +
                      " is malformed: " + s.dump());
    }
    out.push_back({s["from_step"].get<int64_t>(), s["consistency"].get<std::string>()});
  }
  return &(switches_[job_id] = std::move(out));
}

StatusOr<std::vector<ConsistencySwitchRecord>> ConsistencySwitches::Lease(int64_t job_id,
                                                                          int attempt, int rank,
                                                                          int64_t until) {
  std::lock_guard<std::mutex> lock(mu_);
  JobLeases& l = leases_[job_id];
  if (attempt > l.attempt) l = JobLeases{attempt, {}};
  if (attempt == l.attempt) l.until[rank] = std::max(l.until[rank], until);
  PX_ASSIGN_OR_RETURN(const std::vector<ConsistencySwitchRecord>* switches, Read(job_id));
  return *switches;
}

StatusOr<ConsistencySwitchRecord> ConsistencySwitches::Add(const JobRecord& job,
                                                           const std::string& consistency,
                                                           int64_t now) {
  StatusOr<ps::ConsistencyMode> mode = ps::ParseConsistencyMode(consistency);
  if (!mode.ok()) return mode.status();
  if (IsTerminal(job.state)) {
    return FailedPrecondition("job " + std::to_string(job.id) + " is " +
                              std::string(JobStateName(job.state)) +
                              "; consistency switches only a live job");
  }
  std::lock_guard<std::mutex> lock(mu_);
  PX_ASSIGN_OR_RETURN(const std::vector<ConsistencySwitchRecord>* stored, Read(job.id));
  std::vector<ConsistencySwitchRecord> switches = *stored;
  int64_t from = switches.empty() ? 0 : switches.back().from_step + 1;
  auto it = leases_.find(job.id);
  const bool current = it != leases_.end() && it->second.attempt == job.attempt;
  const size_t leased = current ? it->second.until.size() : 0;
  if (job.state == JobState::kRunning && leased < static_cast<size_t>(job.workers)) {
    return Unavailable("only " + std::to_string(leased) + " of the " + std::to_string(job.workers) +
                       " ranks of job " + std::to_string(job.id) + " attempt " +
                       std::to_string(job.attempt) +
                       " have checked in with this coordinator (a rank checks in once it started "
                       "and every few steps, when the plan puts a variable on the PS); try again "
                       "in a moment");
  }
  if (current) {
    for (const auto& [rank, until] : it->second.until) from = std::max(from, until + 1);
  }
  ConsistencySwitchRecord record{from, ps::FormatConsistencyMode(*mode)};
  switches.push_back(record);
  nlohmann::json doc = nlohmann::json::array();
  for (const auto& s : switches) doc.push_back({{"from_step", s.from_step}, {"consistency", s.consistency}});
  PX_RETURN_IF_ERROR(store_->KvSet(kv_keys::Consistency(job.id), doc.dump(), now));
  switches_[job.id] = std::move(switches);  // only once stored
  return record;
}

}  // namespace parallax::coordinator
