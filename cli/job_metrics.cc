#include "cli/job_metrics.h"

#include <cctype>
#include <cstdio>
#include <map>
#include <nlohmann/json.hpp>

#include "core/metrics/rank_table.h"
#include "core/rpc/coordinator_client.h"

namespace parallax::cli {
namespace {

// How far back from the job's newest step each rank's newest point is looked
// for: the last kRecentSteps steps first, and the last kOldestSteps only when
// fewer than `ranks` ranks have a point among those. A rank with any point
// among the last few steps has its newest there, so the answer is the same,
// and `parallax status` of a long job with a point every step (which scripts
// poll) reads a few points per rank instead of a thousand.
constexpr int64_t kRecentSteps = 32;
constexpr int64_t kOldestSteps = 1000;

StatusOr<std::map<int, rpc::MetricPoint>> Latest(CoordinatorClient* coord, int64_t job_id,
                                                 int attempt, int64_t newest_step, int ranks) {
  std::map<int, rpc::MetricPoint> latest;
  for (int64_t back : {kRecentSteps, kOldestSteps}) {
    rpc::GetMetricsRequest req;
    req.job_id = job_id;
    req.__set_after_step(std::max<int64_t>(-1, newest_step - back));
    std::vector<rpc::MetricPoint> points;
    PX_RETURN_IF_ERROR(coord->Call(
        [&](rpc::CoordinatorClient& c) { c.GetMetrics(points, coord->Header(), req); }));
    latest.clear();  // points come ordered by step
    for (const auto& p : points) {
      if (p.attempt == attempt) latest[p.rank] = p;
    }
    if (static_cast<int>(latest.size()) >= ranks || newest_step - back < 0) break;
  }
  return latest;
}

nlohmann::json PointJson(const rpc::MetricPoint& p) {
  nlohmann::json values = nlohmann::json::object();
  if (p.__isset.values) {
    for (const auto& [k, v] : p.values) values[k] = v;
  }
  return {{"rank", p.rank},
          {"step", p.step},
          {"loss", p.loss},
          {"throughput", p.throughput},
          {"values", values}};
}

}  // namespace

StatusOr<std::vector<std::vector<std::string>>> LatestMetricsTable(CoordinatorClient* coord,
                                                                   int64_t job_id, int attempt,
                                                                   int64_t newest_step, int ranks) {
  PX_ASSIGN_OR_RETURN(auto latest, Latest(coord, job_id, attempt, newest_step, ranks));
  std::vector<std::vector<std::string>> rows;
  if (latest.empty()) return rows;
  std::vector<RankPoint> points;
  for (const auto& [rank, p] : latest) {
    points.push_back({rank, p.step, p.loss, p.throughput, &p.values});
  }
  RankTable table = BuildRankTable(points, RankTableStyle::kTerminal);
  for (std::string& c : table.columns) {
    for (char& ch : c) ch = static_cast<char>(std::toupper(static_cast<unsigned char>(ch)));
  }
  rows.push_back(std::move(table.columns));
  for (auto& row : table.rows) rows.push_back(std::move(row));
  return rows;
}

StatusOr<std::string> LatestMetricsJson(CoordinatorClient* coord, int64_t job_id, int attempt,
                                        int64_t newest_step, int ranks) {
  PX_ASSIGN_OR_RETURN(auto latest, Latest(coord, job_id, attempt, newest_step, ranks));
  nlohmann::json arr = nlohmann::json::array();
  for (const auto& [rank, p] : latest) arr.push_back(PointJson(p));
  return arr.dump();
}

std::string AttemptPointsJson(const std::vector<rpc::MetricPoint>& points, int attempt) {
  nlohmann::json arr = nlohmann::json::array();
  for (const auto& p : points) {
    if (p.attempt == attempt) arr.push_back(PointJson(p));
  }
  return arr.dump();
}

StatusOr<std::string> AttemptPointsJson(CoordinatorClient* coord, int64_t job_id, int attempt) {
  rpc::GetMetricsRequest req;
  req.job_id = job_id;
  std::vector<rpc::MetricPoint> points;
  PX_RETURN_IF_ERROR(
      coord->Call([&](rpc::CoordinatorClient& c) { c.GetMetrics(points, coord->Header(), req); }));
  return AttemptPointsJson(points, attempt);
}

namespace {

// A dynamic table's counters as status shows them, in this order.
struct DynamicCounter {
  const char* key;
  int64_t rpc::DynamicTableReport::*field;
};
constexpr DynamicCounter kDynamicCounters[] = {
    {"rows", &rpc::DynamicTableReport::rows},
    {"admitted", &rpc::DynamicTableReport::admitted},
    {"not_admitted_reads", &rpc::DynamicTableReport::not_admitted_reads},
    {"dropped_gradients", &rpc::DynamicTableReport::dropped_gradients},
    {"evicted_ttl", &rpc::DynamicTableReport::evicted_ttl},
    {"evicted_budget", &rpc::DynamicTableReport::evicted_budget},
    {"bytes", &rpc::DynamicTableReport::bytes},
};

nlohmann::json CountersJson(const rpc::DynamicTableReport& t) {
  nlohmann::json j = nlohmann::json::object();
  for (const DynamicCounter& c : kDynamicCounters) j[c.key] = t.*c.field;
  return j;
}

// Per table: the counters summed over `shards`, and "shards", each one's.
nlohmann::json DynamicTables(const std::vector<rpc::ShardStatsReport>& shards) {
  nlohmann::json out = nlohmann::json::object();
  for (const rpc::ShardStatsReport& s : shards) {
    for (const rpc::DynamicTableReport& t : s.dynamic_tables) {
      nlohmann::json& table = out[t.name];
      if (table.is_null()) {
        table = CountersJson(rpc::DynamicTableReport());
        table["shards"] = nlohmann::json::array();
      }
      for (const DynamicCounter& c : kDynamicCounters) {
        table[c.key] = table[c.key].get<int64_t>() + t.*c.field;
      }
      nlohmann::json one = CountersJson(t);
      one["shard"] = s.shard;
      table["shards"].push_back(one);
    }
  }
  return out;
}

}  // namespace

StatusOr<std::string> DynamicTablesJson(CoordinatorClient* coord, int64_t job_id) {
  PX_ASSIGN_OR_RETURN(std::vector<rpc::ShardStatsReport> shards, coord->GetShardStats(job_id));
  return DynamicTablesJson(shards);
}

std::string DynamicTablesJson(const std::vector<rpc::ShardStatsReport>& shards) {
  return DynamicTables(shards).dump();
}

StatusOr<std::vector<std::vector<std::string>>> DynamicTablesTable(CoordinatorClient* coord,
                                                                   int64_t job_id) {
  PX_ASSIGN_OR_RETURN(std::vector<rpc::ShardStatsReport> shards, coord->GetShardStats(job_id));
  const nlohmann::json tables = DynamicTables(shards);
  std::vector<std::vector<std::string>> rows;
  if (tables.empty()) return rows;
  rows.push_back({"TABLE", "SHARDS", "ROWS", "ADMITTED", "NOT-ADMITTED READS",
                  "DROPPED GRADIENTS", "EVICTED TTL", "EVICTED BUDGET", "MIB"});
  for (const auto& [name, t] : tables.items()) {
    char mib[32];
    std::snprintf(mib, sizeof mib, "%.1f", static_cast<double>(t["bytes"].get<int64_t>()) / (1 << 20));
    rows.push_back({name, std::to_string(t["shards"].size()),
                    std::to_string(t["rows"].get<int64_t>()),
                    std::to_string(t["admitted"].get<int64_t>()),
                    std::to_string(t["not_admitted_reads"].get<int64_t>()),
                    std::to_string(t["dropped_gradients"].get<int64_t>()),
                    std::to_string(t["evicted_ttl"].get<int64_t>()),
                    std::to_string(t["evicted_budget"].get<int64_t>()), mib});
  }
  return rows;
}

}  // namespace parallax::cli
