// The web site's two pages, rendered from plain data (no store, no
// sockets): the jobs list with the agents, and one job's page. Both work
// without JavaScript: tables, inline SVG curves (coordinator/web/http_chart.h),
// <details> for the logs, a <meta> refresh.
#ifndef PARALLAX_COORDINATOR_HTTP_PAGES_H_
#define PARALLAX_COORDINATOR_HTTP_PAGES_H_

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "coordinator/store/state_store.h"
#include "coordinator/web/job_figures.h"
#include "core/plan/plan_view.h"
#include "schemas/coordinator_types.h"

namespace parallax::coordinator {

struct JobsPageData {
  int64_t now = 0;
  std::map<JobState, int64_t> jobs_by_state;
  std::vector<JobRecord> jobs;             // newest first
  std::map<int64_t, int64_t> total_steps;  // job id -> [trainer] steps (absent: unknown)
  bool more_jobs = false;                  // jobs is the newest `limit` of more
  std::vector<rpc::AgentInfo> agents;
};

struct TaskRow {
  TaskRecord task;
  std::string host;  // the agent's hostname ("" if unknown)
};

struct LogTail {
  std::string task;  // "trainer/0"
  std::string host;
  std::string text;   // the last bytes of the log
  std::string error;  // why there is no text
};

struct JobPageData {
  int64_t now = 0;
  JobRecord job;
  std::optional<int64_t> total_steps;
  std::string waiting_for;  // why a PENDING job waits ("" if unknown)
  JobFigures figures;       // of the current attempt
  std::map<int, MetricRecord> newest_per_rank;
  std::vector<CurvePoint> loss, throughput;
  int64_t curves_from_step = 0;  // > 0: the curves start there (a long job)
  plan::PlanTable plan;       // `parallax status`'s table of the stored plan
  std::string plan_note;       // why there is no plan table
  std::vector<TaskRow> tasks;  // of the current attempt
  std::vector<rpc::ShardStatsReport> shards;
  std::vector<EventRecord> events;  // newest last
  std::vector<LogTail> logs;
};

std::string RenderJobsPage(const JobsPageData& data);
std::string RenderJobPage(const JobPageData& data);
// A page saying what went wrong ("no job 42"), for 4xx and 5xx answers.
std::string RenderErrorPage(int status, const std::string& message);

// "trainer/3", "ps/0".
std::string TaskName(const TaskRecord& task);

}  // namespace parallax::coordinator

#endif  // PARALLAX_COORDINATOR_HTTP_PAGES_H_
