// Lost updates: what a PS shard's next generation reports (ReportShardStats'
// lost_updates: the updates its predecessor applied after the checkpoint it
// loaded, or -1 when unknown) becomes, once per generation, an event of the
// job and part of the job's totals (JobRecord::lost_updates and
// lost_updates_unknown), which `parallax status` shows (docs/RELIABILITY.md,
// "A lost PS shard").
#ifndef PARALLAX_COORDINATOR_LOST_UPDATES_H_
#define PARALLAX_COORDINATOR_LOST_UPDATES_H_

#include <cstdint>

#include "coordinator/store/state_store.h"
#include "parallax/status.h"
#include "schemas/coordinator_types.h"

namespace parallax::coordinator {

// Records `report`'s lost_updates, if it has any and its attempt is the
// job's current one and still live, unless an earlier report of the same
// attempt, shard and generation did (the shard repeats its report every few
// seconds): a mark in the attempt's keys (job/<id>/<attempt>/ps/<shard>/
// <generation>/lost_updates), written first, so a coordinator that dies
// before the count is added loses it rather than counting it twice.
// REQUIRES: the report passed ShardStatsBoard::Validate.
Status RecordLostUpdates(StateStore* store, const rpc::ShardStatsReport& report, int64_t now);

// The event of a count: "attempt 1: shard 0 generation 2: 57 update(s) its
// lost process applied after the checkpoint it loaded are lost" (-1: "...
// how many is unknown ...").
std::string LostUpdatesEvent(const rpc::ShardStatsReport& report);

}  // namespace parallax::coordinator

#endif  // PARALLAX_COORDINATOR_LOST_UPDATES_H_
