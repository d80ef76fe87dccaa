#include "coordinator/service/lost_updates.h"

#include "schemas/kv_keys.h"

#include <string>

namespace parallax::coordinator {

std::string LostUpdatesEvent(const rpc::ShardStatsReport& r) {
  const std::string who = "attempt " + std::to_string(r.attempt) + ": shard " +
                          std::to_string(r.shard) + " generation " + std::to_string(r.generation);
  if (r.lost_updates >= 0) {
    return who + ": " + std::to_string(r.lost_updates) +
           " update(s) its lost process applied after the checkpoint it loaded are lost";
  }
  return who + ": the updates its lost process applied after the checkpoint it loaded are lost; "
               "how many is unknown (its predecessor's count was not readable on its host)";
}

Status RecordLostUpdates(StateStore* store, const rpc::ShardStatsReport& r, int64_t now) {
  if (!r.__isset.lost_updates) return Status::Ok();
  PX_ASSIGN_OR_RETURN(JobRecord job, store->GetJob(r.job_id));
  const bool live = job.state == JobState::kPlacing || job.state == JobState::kRunning;
  if (!live || job.attempt != r.attempt) return Status::Ok();
  const std::string mark = kv_keys::ShardLostUpdates(r.job_id, r.attempt,
                                                     static_cast<uint32_t>(r.shard), r.generation);
  // A read first: most reports repeat one already recorded.
  PX_ASSIGN_OR_RETURN(std::optional<std::string> marked, store->KvGet(mark));
  if (marked) return Status::Ok();
  PX_ASSIGN_OR_RETURN(int64_t seen, store->KvAdd(mark, 1, now));
  if (seen != 1) return Status::Ok();
  return store->AddLostUpdates(r.job_id, r.lost_updates, LostUpdatesEvent(r), now);
}

}  // namespace parallax::coordinator
