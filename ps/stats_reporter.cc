#include "ps/stats_reporter.h"

#include <chrono>

#include "core/base/logging.h"

namespace parallax::ps {

rpc::ShardStatsReport ToShardStatsReport(const StatsReporterOptions& options,
                                         const ShardSnapshot& snapshot) {
  const ShardStats& s = snapshot.stats;
  rpc::ShardStatsReport r;
  r.job_id = options.job_id;
  r.attempt = options.attempt;
  r.shard = options.shard;
  r.pulls = s.pulls;
  r.pushes = s.pushes;
  r.push_pulls = s.push_pulls;
  r.clocks = s.clocks;
  r.rows_pulled = s.rows_pulled;
  r.rows_pushed = s.rows_pushed;
  r.errors = s.errors;
  r.rows_held = snapshot.rows_held;
  r.staleness_buckets.assign(s.staleness.begin(), s.staleness.end());
  r.staleness_sum = s.staleness_sum;
  if (snapshot.generation > 0) r.__set_generation(static_cast<int32_t>(snapshot.generation));
  if (snapshot.lost_updates) r.__set_lost_updates(*snapshot.lost_updates);
  if (!snapshot.dynamic_tables.empty()) {
    std::vector<rpc::DynamicTableReport> tables;
    for (const auto& [name, d] : snapshot.dynamic_tables) {
      rpc::DynamicTableReport t;
      t.name = name;
      t.rows = d.rows;
      t.admitted = d.admitted;
      t.not_admitted_reads = d.not_admitted_reads;
      t.dropped_gradients = d.dropped_gradients;
      t.evicted_ttl = d.evicted_ttl;
      t.evicted_budget = d.evicted_budget;
      t.bytes = d.bytes;
      tables.push_back(std::move(t));
    }
    r.__set_dynamic_tables(std::move(tables));
  }
  return r;
}

bool KeepsReportingAfter(const Status& status) {
  return status.ok() || status.code() == StatusCode::kUnavailable ||
         status.code() == StatusCode::kAborted || status.code() == StatusCode::kDeadlineExceeded;
}

StatsReporter::StatsReporter(StatsReporterOptions options, std::function<ShardSnapshot()> source,
                             CoordinatorClient* coordinator)
    : options_(options), source_(std::move(source)), coordinator_(coordinator) {}

StatsReporter::~StatsReporter() { Stop(); }

void StatsReporter::Start() {
  thread_ = std::thread([this] { Loop(); });
}

void StatsReporter::Stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

Status StatsReporter::ReportOnce() {
  const rpc::ShardStatsReport report = ToShardStatsReport(options_, source_());
  return coordinator_->Call(
      [&](rpc::CoordinatorClient& c) { c.ReportShardStats(coordinator_->Header(), report); });
}

void StatsReporter::Loop() {
  bool warned_unreachable = false;
  while (true) {
    Status s = ReportOnce();
    if (!KeepsReportingAfter(s)) {
      PX_LOG(WARNING) << "PS shard \"" << options_.shard
                      << "\": stops reporting its counters: " << s.ToString();
      return;
    }
    if (!s.ok() && !warned_unreachable) {
      PX_LOG(WARNING) << "PS shard \"" << options_.shard
                      << "\": cannot report its counters now (trying every " << options_.interval_ms
                      << " ms, said once): " << s.ToString();
    }
    warned_unreachable = warned_unreachable || !s.ok();
    std::unique_lock<std::mutex> lock(mu_);
    if (cv_.wait_for(lock, std::chrono::milliseconds(options_.interval_ms),
                     [&] { return stopping_; })) {
      return;
    }
  }
}

}  // namespace parallax::ps
