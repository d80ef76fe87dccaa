// HttpSite: what the coordinator's HTTP server (coordinator/web/http_server.h)
// answers. Read-only; every page is built from the store and the service at
// request time.
//
//   GET /                                   jobs (newest first) and agents; ?limit=N (1..1000)
//   GET /jobs/ID                            one job: figures, curves, plan, tasks, PS shards,
//                                           recent events, each task's log tail
//   GET /jobs/ID/logs/ROLE/INDEX            a task's log tail as text; ?attempt=N
//   GET /metrics                            Prometheus text format (coordinator/web/http_metrics.h)
//
// Bad requests are answered 4xx and change nothing: 400 for a malformed id
// or parameter, 404 for an unknown job, task or path. Logs are read from the
// agents within a time budget per page, so an agent that does not answer
// costs a page a few seconds, never a hang.
#ifndef PARALLAX_COORDINATOR_HTTP_SITE_H_
#define PARALLAX_COORDINATOR_HTTP_SITE_H_

#include <cstdint>
#include <string>

#include "coordinator/service/rpc_stats.h"
#include "coordinator/service/service.h"
#include "coordinator/store/state_store.h"
#include "coordinator/web/http_pages.h"
#include "coordinator/web/http_server.h"
#include "coordinator/web/task_logs.h"
#include "core/base/clock.h"

namespace parallax::coordinator {

struct HttpSiteOptions {
  int default_jobs = 100;  // jobs on the list page without ?limit
  int max_jobs = 1'000;    // the largest ?limit
  int events = 50;         // recent events on a job page
  // About how many metric points (all ranks together) a job page's curves
  // are drawn from; a longer job's curves show its newest steps and say so.
  int max_curve_points_read = 100'000;
  size_t curve_points = 400;  // drawn per curve
  // /metrics reads about this many of the newest metric points of each rank
  // of a running job (the points of the last this × metrics_every steps).
  int64_t metrics_window_points = 20;
  int32_t log_tail_bytes = 4'096;      // per task, on the job page
  int32_t log_page_bytes = 256 << 10;  // on a task's log page
  int max_log_tails = 16;              // tasks whose tail the job page shows
  int log_timeout_ms = 2'000;          // one agent
  int logs_budget_ms = 5'000;          // every agent of one page together
};

class HttpSite {
 public:
  // Everything must outlive the site.
  HttpSite(StateStore* store, CoordinatorService* service, RpcStats* rpc_stats, TaskLogReader* logs,
           Clock* clock, HttpSiteOptions options = {});

  // Thread-safe.
  HttpResponse Handle(const HttpRequest& request);

 private:
  HttpResponse JobsList(const HttpRequest& request);
  HttpResponse JobPage(int64_t job_id);
  // The parts of a job page; d->job is set.
  Status ReadCurvesAndPlan(JobPageData* d);
  Status ReadTasksAndEvents(const std::vector<rpc::AgentInfo>& agents, JobPageData* d);
  void ReadLogTails(const std::vector<rpc::AgentInfo>& agents, JobPageData* d);
  HttpResponse TaskLog(int64_t job_id, const std::string& role, const std::string& index,
                       const HttpRequest& request);
  HttpResponse Metrics(const HttpRequest& request);

  StateStore* const store_;
  CoordinatorService* const service_;
  RpcStats* const rpc_stats_;
  TaskLogReader* const logs_;
  Clock* const clock_;
  const HttpSiteOptions options_;
};

}  // namespace parallax::coordinator

#endif  // PARALLAX_COORDINATOR_HTTP_SITE_H_
