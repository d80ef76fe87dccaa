// ShardCore's consistency modes by step: which steps a pull may see, where
// a partition's sync steps start after a switch, and the SET "consistency"
// that switches (schemas/ps_wire.md, "Consistency" and "Settings").
#include <algorithm>

#include "core/base/logging.h"
#include "ps/shard_core.h"

namespace parallax::ps {

int64_t ShardCore::SyncApplied(const PartitionState& ps, int64_t step) const {
  const int64_t start = schedule_.PeriodStart(step);
  if (start == 0 || ps.applied >= start) return ps.applied;
  if (schedule_.At(start - 1).consistency == Consistency::kSync) return ps.applied;
  // After async or ssp steps: they are all applied once every worker
  // finished the step before the period.
  const int64_t slowest = *std::min_element(worker_clock_.begin(), worker_clock_.end());
  return slowest >= start ? start : ps.applied;
}

bool ShardCore::PullReady(const Header& h) const {
  const ConsistencyMode& mode = schedule_.At(h.clock);
  const int64_t start = schedule_.PeriodStart(h.clock);
  const int64_t applied = vars_.at(h.variable).parts[h.partition].applied;
  const auto slowest = [&] { return *std::min_element(worker_clock_.begin(), worker_clock_.end()); };
  // After a switch, the first period's steps see every step before it: the
  // sync ones applied (a period after sync), the async or ssp ones finished
  // by every worker (a sync period after them).
  if (start > 0) {
    const bool after_sync = schedule_.At(start - 1).consistency == Consistency::kSync;
    if (after_sync && applied < start) return false;
    if (!after_sync && mode.consistency == Consistency::kSync && slowest() < start) return false;
  }
  switch (mode.consistency) {
    case Consistency::kAsync:
      return true;
    case Consistency::kSync:
      return std::max(applied, start) >= h.clock;
    case Consistency::kSsp:
      return slowest() >= h.clock - mode.staleness;
  }
  return true;
}

void ShardCore::SetConsistency(const std::string& identity, const Header& h, std::string_view value,
                               std::vector<OutMessage>* out) {
  StatusOr<ConsistencyMode> mode = ParseConsistencyMode(value);
  if (!mode.ok()) {
    return Error(identity, h, ErrorCode::kBadSetting, mode.status().message() + "; nothing was changed",
                 out);
  }
  if (h.variable != ps_wire::kAllVariables) {
    return Error(identity, h, ErrorCode::kBadSetting,
                 "consistency is the whole job's: send it for every variable (0xFFFFFFFF)", out);
  }
  auto it = schedule_.switches().find(h.clock);
  if (it != schedule_.switches().end() && it->second == *mode) {
    out->push_back(Reply(identity, h, Op::kSet));  // another worker's copy of the same switch
    return;
  }
  if (h.clock <= max_clock_seen_) {
    return Error(identity, h, ErrorCode::kBadSetting,
                 "consistency " + FormatConsistencyMode(*mode) + " from step " +
                     std::to_string(h.clock) + " comes after this shard served step " +
                     std::to_string(max_clock_seen_) +
                     " in the old mode; a switch must reach every shard before its step",
                 out);
  }
  schedule_.Set(h.clock, *mode);
  PX_LOG(INFO) << "PS shard " << options_.shard << ": consistency " << FormatConsistencyMode(*mode)
               << " from step " << h.clock << " (set by worker " << h.worker << ")";
  out->push_back(Reply(identity, h, Op::kSet));
}

void ShardCore::CountPeriodPush(const Header& h, bool sync) {
  const int64_t start = schedule_.PeriodStart(h.clock);
  PeriodStats& p = periods_[start];
  if (p.sync_pushes + p.async_pushes == 0 && start > 0) {
    PX_LOG(INFO) << "PS shard " << options_.shard << ": consistency "
                 << FormatConsistencyMode(schedule_.At(h.clock)) << " from step " << start
                 << ": first push there is of step " << h.clock << " (worker " << h.worker << ")";
  }
  ++(sync ? p.sync_pushes : p.async_pushes);
}

}  // namespace parallax::ps
