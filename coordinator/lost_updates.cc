#include "coordinator/lost_updates.h"

#include <string>

namespace parallax::coordinator {
namespace {

std::string TotalKey(int64_t job_id) { return "job/" + std::to_string(job_id) + "/lost_updates"; }
std::string UnknownKey(int64_t job_id) { return TotalKey(job_id) + "_unknown"; }

StatusOr<int64_t> ReadCount(StateStore* store, const std::string& key) {
  PX_ASSIGN_OR_RETURN(std::optional<std::string> value, store->KvGet(key));
  if (!value) return int64_t{0};
  try {
    return static_cast<int64_t>(std::stoll(*value));
  } catch (const std::exception&) {
    return Internal("key \"" + key + "\" does not hold a count");
  }
}

}  // namespace

Status RecordLostUpdates(StateStore* store, const rpc::ShardStatsReport& r, int64_t now) {
  if (!r.__isset.lost_updates) return Status::Ok();
  const std::string mark = TotalKey(r.job_id) + "/" + std::to_string(r.attempt) + "/" +
                           std::to_string(r.shard) + "/" + std::to_string(r.generation);
  // A read first: the shard repeats its report every few seconds.
  PX_ASSIGN_OR_RETURN(std::optional<std::string> marked, store->KvGet(mark));
  if (marked) return Status::Ok();
  PX_ASSIGN_OR_RETURN(int64_t seen, store->KvAdd(mark, 1, now));
  if (seen != 1) return Status::Ok();
  const std::string who = "attempt " + std::to_string(r.attempt) + ": shard " +
                          std::to_string(r.shard) + " generation " + std::to_string(r.generation);
  std::string message;
  if (r.lost_updates >= 0) {
    message = who + ": " + std::to_string(r.lost_updates) +
              " update(s) its lost process applied after the checkpoint it loaded are lost";
    PX_RETURN_IF_ERROR(store->KvAdd(TotalKey(r.job_id), r.lost_updates, now).status());
  } else {
    message = who + ": the updates its lost process applied after the checkpoint it loaded are "
                    "lost; how many is unknown (its predecessor's count was not readable on its "
                    "host)";
    PX_RETURN_IF_ERROR(store->KvAdd(UnknownKey(r.job_id), 1, now).status());
  }
  return store->AppendEvent(r.job_id, "shard", message, now).status();
}

StatusOr<LostUpdatesTotal> ReadLostUpdates(StateStore* store, int64_t job_id) {
  LostUpdatesTotal total;
  PX_ASSIGN_OR_RETURN(total.lost, ReadCount(store, TotalKey(job_id)));
  PX_ASSIGN_OR_RETURN(int64_t unknown, ReadCount(store, UnknownKey(job_id)));
  total.unknown = static_cast<int>(unknown);
  return total;
}

}  // namespace parallax::coordinator
