#include "cli/job_metrics.h"

#include <cstdio>
#include <map>
#include <nlohmann/json.hpp>

#include "core/base/format_bytes.h"
#include "core/rpc/coordinator_client.h"

namespace parallax::cli {
namespace {

StatusOr<std::map<int, rpc::MetricPoint>> Latest(CoordinatorClient* coord, int64_t job_id,
                                                 int attempt, int64_t newest_step) {
  rpc::GetMetricsRequest req;
  req.job_id = job_id;
  req.__set_after_step(std::max<int64_t>(-1, newest_step - 1000));
  std::vector<rpc::MetricPoint> points;
  PX_RETURN_IF_ERROR(
      coord->Call([&](rpc::CoordinatorClient& c) { c.GetMetrics(points, coord->Header(), req); }));
  std::map<int, rpc::MetricPoint> latest;  // points come ordered by step
  for (const auto& p : points) {
    if (p.attempt == attempt) latest[p.rank] = p;
  }
  return latest;
}

std::string Fixed(double x, int digits) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", digits, x);
  return buf;
}

double Value(const rpc::MetricPoint& p, const std::string& name) {
  if (!p.__isset.values) return 0;
  auto it = p.values.find(name);
  return it == p.values.end() ? 0 : it->second;
}

}  // namespace

StatusOr<std::vector<std::vector<std::string>>> LatestMetricsTable(CoordinatorClient* coord,
                                                                   int64_t job_id, int attempt,
                                                                   int64_t newest_step) {
  PX_ASSIGN_OR_RETURN(auto latest, Latest(coord, job_id, attempt, newest_step));
  std::vector<std::vector<std::string>> rows;
  if (latest.empty()) return rows;
  rows.push_back({"RANK", "STEP", "LOSS", "SAMPLES/S", "COMPUTE", "DENSE WAIT", "SPARSE WAIT",
                  "ALLREDUCE S/R", "ALLGATHER S/R", "PS PUSH S/R", "PS PULL S/R",
                  "LOCAL AGG S/R"});
  for (const auto& [rank, p] : latest) {
    auto pair = [&](const std::string& path) {
      return FormatBytes(Value(p, path + "_sent_bytes"), "") + "/" +
             FormatBytes(Value(p, path + "_recv_bytes"), "");
    };
    rows.push_back({std::to_string(rank), std::to_string(p.step), Fixed(p.loss, 4),
                    Fixed(p.throughput, 1), Fixed(Value(p, "compute_ms"), 2) + "ms",
                    Fixed(Value(p, "dense_wait_ms"), 2) + "ms",
                    Fixed(Value(p, "sparse_wait_ms"), 2) + "ms", pair("allreduce"),
                    pair("allgather"), pair("ps_push"), pair("ps_pull"), pair("local_agg")});
  }
  return rows;
}

StatusOr<std::string> LatestMetricsJson(CoordinatorClient* coord, int64_t job_id, int attempt,
                                        int64_t newest_step) {
  PX_ASSIGN_OR_RETURN(auto latest, Latest(coord, job_id, attempt, newest_step));
  nlohmann::json arr = nlohmann::json::array();
  for (const auto& [rank, p] : latest) {
    nlohmann::json values = nlohmann::json::object();
    if (p.__isset.values) {
      for (const auto& [k, v] : p.values) values[k] = v;
    }
    arr.push_back({{"rank", rank},
                   {"step", p.step},
                   {"loss", p.loss},
                   {"throughput", p.throughput},
                   {"values", values}});
  }
  return arr.dump();
}

}  // namespace parallax::cli
