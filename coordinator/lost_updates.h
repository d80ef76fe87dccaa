// Lost updates: what a PS shard's next generation reports (ReportShardStats'
// lost_updates: the updates its predecessor applied after the checkpoint it
// loaded, or -1 when unknown) becomes, once per generation, an event of the
// job and part of the job's totals, kept in the key-value store
// (job/<id>/lost_updates and job/<id>/lost_updates_unknown), which
// `parallax status` shows (docs/RELIABILITY.md, "A lost PS shard").
#ifndef PARALLAX_COORDINATOR_LOST_UPDATES_H_
#define PARALLAX_COORDINATOR_LOST_UPDATES_H_

#include <cstdint>

#include "coordinator/state_store.h"
#include "parallax/status.h"
#include "schemas/coordinator_types.h"

namespace parallax::coordinator {

// Records `report`'s lost_updates, if it has any, unless an earlier report
// of the same job, attempt, shard and generation did (the shard repeats its
// report every interval). The generation's mark is written first, so a
// coordinator that dies halfway loses the count rather than counting it
// twice. REQUIRES: the report passed ShardStatsBoard::Validate.
Status RecordLostUpdates(StateStore* store, const rpc::ShardStatsReport& report, int64_t now);

struct LostUpdatesTotal {
  int64_t lost = 0;  // over the generations whose count is known
  int unknown = 0;   // generations whose count is unknown
};

// The job's totals so far.
StatusOr<LostUpdatesTotal> ReadLostUpdates(StateStore* store, int64_t job_id);

}  // namespace parallax::coordinator

#endif  // PARALLAX_COORDINATOR_LOST_UPDATES_H_
