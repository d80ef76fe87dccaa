// ShardStatsBoard: the newest counters each PS shard reported
// (ReportShardStats), kept in memory for /metrics. Counters restart with
// their shard, so a coordinator restart loses nothing the next report does
// not bring back.
//
// Thread-safe.
#ifndef PARALLAX_COORDINATOR_SHARD_STATS_H_
#define PARALLAX_COORDINATOR_SHARD_STATS_H_

#include <cstdint>
#include <map>
#include <mutex>
#include <set>
#include <utility>
#include <vector>

#include "parallax/status.h"
#include "schemas/coordinator_types.h"

namespace parallax::coordinator {

class ShardStatsBoard {
 public:
  // INVALID_ARGUMENT (naming the field) for a report no shard would send:
  // negative ids or counters, more than 64 staleness buckets.
  static Status Validate(const rpc::ShardStatsReport& report);

  // Keeps `report` as the newest of its (job, shard), replacing one of the
  // same or an older attempt; a report of an older attempt than the one kept
  // is ignored.
  void Record(const rpc::ShardStatsReport& report);

  // The newest report of every shard of the jobs in `live_jobs`, by (job,
  // shard); reports of other jobs (they ended) are dropped, so the board
  // holds live jobs only.
  std::vector<rpc::ShardStatsReport> TakeLive(const std::set<int64_t>& live_jobs);
  // The newest report of every shard of `job_id`, by shard.
  std::vector<rpc::ShardStatsReport> OfJob(int64_t job_id) const;

 private:
  mutable std::mutex mu_;
  std::map<std::pair<int64_t, int32_t>, rpc::ShardStatsReport> reports_;  // GUARDED_BY(mu_)
};

}  // namespace parallax::coordinator

#endif  // PARALLAX_COORDINATOR_SHARD_STATS_H_
