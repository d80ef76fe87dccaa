// StatsReporter: sends a PS shard's counters to the coordinator
// (ReportShardStats) every interval_ms on its own thread, so that the
// coordinator's /metrics shows rows, requests and push staleness per shard.
// Reporting is best effort: a coordinator that cannot be reached is tried
// again at the next interval; one that refuses the report (the attempt is
// over, or it is older and does not know the call) ends the reporting, with
// one log line.
#ifndef PARALLAX_PS_STATS_REPORTER_H_
#define PARALLAX_PS_STATS_REPORTER_H_

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>

#include "core/rpc/coordinator_client.h"
#include "parallax/status.h"
#include "ps/shard_server.h"

namespace parallax::ps {

struct StatsReporterOptions {
  int64_t job_id = 0;
  int32_t attempt = 0;
  int32_t shard = 0;
  int interval_ms = 2'000;
};

// The report of `snapshot` (staleness buckets as ShardStats counts them).
rpc::ShardStatsReport ToShardStatsReport(const StatsReporterOptions& options,
                                         const ShardSnapshot& snapshot);

// Whether a report that failed with `status` is worth sending again later:
// true when the coordinator could not be reached or was busy; false when it
// refused (the attempt is over, the call is unknown to an older
// coordinator, the secret is wrong).
bool KeepsReportingAfter(const Status& status);

class StatsReporter {
 public:
  // `source` gives the counters (ShardServer::Snapshot); `coordinator` is
  // used by this reporter only, from Start() until Stop(), and must outlive
  // it.
  StatsReporter(StatsReporterOptions options, std::function<ShardSnapshot()> source,
                CoordinatorClient* coordinator);
  ~StatsReporter();
  StatsReporter(const StatsReporter&) = delete;
  StatsReporter& operator=(const StatsReporter&) = delete;

  // Starts the thread; the first report goes out at once.
  void Start();
  // Wakes and joins the thread. Idempotent.
  void Stop();
  // Sends one report now, on the caller's thread (the thread's body).
  Status ReportOnce();

 private:
  void Loop();

  const StatsReporterOptions options_;
  const std::function<ShardSnapshot()> source_;
  CoordinatorClient* const coordinator_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stopping_ = false;  // GUARDED_BY(mu_)
  std::thread thread_;
};

}  // namespace parallax::ps

#endif  // PARALLAX_PS_STATS_REPORTER_H_
