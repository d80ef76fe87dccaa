#include "coordinator/service/shard_stats.h"

#include <string>

namespace parallax::coordinator {

Status ShardStatsBoard::Validate(const rpc::ShardStatsReport& r) {
  if (r.job_id <= 0 || r.attempt < 0 || r.shard < 0) {
    return InvalidArgument("shard stats need job_id > 0 and attempt, shard >= 0");
  }
  const std::pair<const char*, int64_t> counters[] = {
      {"pulls", r.pulls},   {"pushes", r.pushes},           {"push_pulls", r.push_pulls},
      {"clocks", r.clocks}, {"rows_pulled", r.rows_pulled}, {"rows_pushed", r.rows_pushed},
      {"errors", r.errors}, {"rows_held", r.rows_held},     {"staleness_sum", r.staleness_sum}};
  for (const auto& [name, value] : counters) {
    if (value < 0) return InvalidArgument(std::string("shard stats: ") + name + " is negative");
  }
  if (r.staleness_buckets.size() > 64) {
    return InvalidArgument("shard stats: at most 64 staleness buckets");
  }
  for (int64_t b : r.staleness_buckets) {
    if (b < 0) return InvalidArgument("shard stats: a staleness bucket is negative");
  }
  if (r.dynamic_tables.size() > 4096) {
    return InvalidArgument("shard stats: at most 4096 dynamic tables");
  }
  for (const rpc::DynamicTableReport& t : r.dynamic_tables) {
    const std::pair<const char*, int64_t> table_counters[] = {
        {"rows", t.rows},
        {"admitted", t.admitted},
        {"not_admitted_reads", t.not_admitted_reads},
        {"dropped_gradients", t.dropped_gradients},
        {"evicted_ttl", t.evicted_ttl},
        {"evicted_budget", t.evicted_budget},
        {"bytes", t.bytes}};
    for (const auto& [name, value] : table_counters) {
      if (value < 0) {
        return InvalidArgument("shard stats: dynamic table \"" + t.name + "\": " + name +
                               " is negative");
      }
    }
  }
  if (r.__isset.generation && r.generation < 0) {
    return InvalidArgument("shard stats: generation is negative");
  }
  if (r.__isset.lost_updates &&
      (r.lost_updates < -1 || !r.__isset.generation || r.generation < 2)) {
    return InvalidArgument(
        "shard stats: lost_updates needs generation >= 2 and is >= 0, or -1 for unknown");
  }
  return Status::Ok();
}

void ShardStatsBoard::Record(const rpc::ShardStatsReport& report) {
  std::lock_guard<std::mutex> lock(mu_);
  auto [it, inserted] = reports_.try_emplace({report.job_id, report.shard}, report);
  if (!inserted && it->second.attempt <= report.attempt) it->second = report;
}

std::vector<rpc::ShardStatsReport> ShardStatsBoard::TakeLive(const std::set<int64_t>& live_jobs) {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<rpc::ShardStatsReport> out;
  for (auto it = reports_.begin(); it != reports_.end();) {
    if (live_jobs.count(it->first.first) == 0) {
      it = reports_.erase(it);
    } else {
      out.push_back(it->second);
      ++it;
    }
  }
  return out;
}

std::vector<rpc::ShardStatsReport> ShardStatsBoard::OfJob(int64_t job_id) const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<rpc::ShardStatsReport> out;
  for (auto it = reports_.lower_bound({job_id, 0});
       it != reports_.end() && it->first.first == job_id; ++it) {
    out.push_back(it->second);
  }
  return out;
}

}  // namespace parallax::coordinator
