#include "coordinator/web/http_site.h"

#include <chrono>
#include <map>
#include <set>

#include "coordinator/web/http_metrics.h"
#include "core/base/logging.h"
#include "core/config/job_config.h"
#include "core/plan/job_plan.h"

namespace parallax::coordinator {
namespace {

using SteadyClock = std::chrono::steady_clock;

HttpResponse Html(int status, std::string body) {
  return HttpResponse{status, "text/html; charset=utf-8", std::move(body), {}};
}

HttpResponse Error(int status, const std::string& message) {
  return Html(status, RenderErrorPage(status, message));
}

// 503 for a busy database (retrying helps), 500 otherwise.
HttpResponse StoreError(const Status& s) {
  PX_LOG(WARNING) << "http: " << s.ToString();
  bool busy = s.code() == StatusCode::kUnavailable || s.code() == StatusCode::kAborted;
  return Error(busy ? 503 : 500,
               (busy ? "the coordinator is busy, try again: " : "") + s.message());
}

// A positive decimal integer of at most 18 digits, else nullopt.
std::optional<int64_t> ParseId(const std::string& text) {
  if (text.empty() || text.size() > 18 ||
      text.find_first_not_of("0123456789") != std::string::npos) {
    return std::nullopt;
  }
  int64_t v = std::stoll(text);
  return v > 0 ? std::optional<int64_t>(v) : std::nullopt;
}

// A task index: 0..999999.
std::optional<int64_t> ParseIndex(const std::string& text) {
  if (text.empty() || text.size() > 6 ||
      text.find_first_not_of("0123456789") != std::string::npos) {
    return std::nullopt;
  }
  return std::stoll(text);
}

rpc::TaskKey KeyOf(const TaskRecord& t) {
  rpc::TaskKey key;
  key.job_id = t.job_id;
  key.attempt = t.attempt;
  key.role = t.role == TaskRole::kPs ? rpc::TaskRole::PS : rpc::TaskRole::TRAINER;
  key.index = t.index;
  return key;
}

std::vector<std::string> Segments(const std::string& path) {
  std::vector<std::string> out;
  size_t i = 0;
  while (i < path.size()) {
    size_t j = path.find('/', i);
    if (j == std::string::npos) j = path.size();
    if (j > i) out.push_back(path.substr(i, j - i));
    i = j + 1;
  }
  return out;
}

// The job's [trainer] section; nullopt if the stored text no longer parses
// (a key renamed since it was submitted).
std::optional<JobConfig::Trainer> TrainerOf(StateStore* store, const JobRecord& job) {
  StatusOr<std::shared_ptr<const JobConfig>> config = store->ParsedConfig(job);
  if (!config.ok()) return std::nullopt;
  return (*config)->trainer;
}

std::optional<int64_t> TotalSteps(StateStore* store, const JobRecord& job) {
  std::optional<JobConfig::Trainer> trainer = TrainerOf(store, job);
  return trainer ? std::optional<int64_t>(trainer->steps) : std::nullopt;
}

int64_t MetricsEvery(StateStore* store, const JobRecord& job) {
  std::optional<JobConfig::Trainer> trainer = TrainerOf(store, job);
  return trainer ? trainer->metrics_every : JobConfig::Trainer{}.metrics_every;
}

}  // namespace

HttpSite::HttpSite(StateStore* store, CoordinatorService* service, RpcStats* rpc_stats,
                   TaskLogReader* logs, Clock* clock, HttpSiteOptions options)
    : store_(store),
      service_(service),
      rpc_stats_(rpc_stats),
      logs_(logs),
      clock_(clock),
      options_(options) {}

HttpResponse HttpSite::Handle(const HttpRequest& request) {
  const std::vector<std::string> seg = Segments(request.path);
  if (seg.empty() || (seg.size() == 1 && seg[0] == "jobs")) return JobsList(request);
  if (seg.size() == 1 && seg[0] == "metrics") return Metrics(request);
  if (seg[0] == "jobs" && (seg.size() == 2 || seg.size() == 5)) {
    std::optional<int64_t> id = ParseId(seg[1]);
    if (!id) {
      return Error(400, "a job id is a positive integer, as `parallax submit` prints it (got '" +
                            seg[1].substr(0, 40) + "')");
    }
    if (seg.size() == 2) return JobPage(*id);
    if (seg[2] == "logs") return TaskLog(*id, seg[3], seg[4], request);
  }
  return Error(404, "no page at this address; the jobs are at /");
}

HttpResponse HttpSite::JobsList(const HttpRequest& request) {
  int limit = options_.default_jobs;
  auto it = request.params.find("limit");
  if (it != request.params.end()) {
    std::optional<int64_t> n = ParseId(it->second);
    if (!n || *n > options_.max_jobs) {
      return Error(400, "limit must be an integer from 1 to " + std::to_string(options_.max_jobs));
    }
    limit = static_cast<int>(*n);
  }
  JobsPageData d;
  d.now = clock_->NowMillis();
  StatusOr<std::map<JobState, int64_t>> counts = store_->CountJobs();
  if (!counts.ok()) return StoreError(counts.status());
  d.jobs_by_state = std::move(counts).value();
  JobFilter filter;
  filter.limit = limit + 1;
  StatusOr<std::vector<JobRecord>> jobs = store_->ListJobs(filter);
  if (!jobs.ok()) return StoreError(jobs.status());
  d.jobs = std::move(jobs).value();
  if (d.jobs.size() > static_cast<size_t>(limit)) {
    d.jobs.resize(static_cast<size_t>(limit));
    d.more_jobs = true;
  }
  for (const JobRecord& j : d.jobs) {
    if (std::optional<int64_t> steps = TotalSteps(store_, j)) d.total_steps[j.id] = *steps;
  }
  StatusOr<std::vector<rpc::AgentInfo>> agents = service_->Agents();
  if (!agents.ok()) return StoreError(agents.status());
  d.agents = std::move(agents).value();
  return Html(200, RenderJobsPage(d));
}

HttpResponse HttpSite::JobPage(int64_t job_id) {
  StatusOr<JobRecord> job = store_->GetJob(job_id);
  if (job.status().code() == StatusCode::kNotFound) {
    return Error(404, "no job " + std::to_string(job_id) + "; the jobs are at /");
  }
  if (!job.ok()) return StoreError(job.status());
  JobPageData d;
  d.now = clock_->NowMillis();
  d.job = std::move(job).value();
  d.total_steps = TotalSteps(store_, d.job);
  StatusOr<std::vector<rpc::AgentInfo>> agents = service_->Agents();
  if (!agents.ok()) return StoreError(agents.status());
  for (const Status& s : {ReadCurvesAndPlan(&d), ReadTasksAndEvents(*agents, &d)}) {
    if (!s.ok()) return StoreError(s);
  }
  d.shards = service_->shard_stats().OfJob(job_id);
  ReadLogTails(*agents, &d);
  return Html(200, RenderJobPage(d));
}

Status HttpSite::ReadCurvesAndPlan(JobPageData* d) {
  const int64_t job_id = d->job.id;
  // The newest steps whose points (every rank's, one per metrics_every
  // steps) are about max_curve_points_read: all of a job of usual length.
  const int64_t window = static_cast<int64_t>(options_.max_curve_points_read) /
                         std::max(1, d->job.workers) * MetricsEvery(store_, d->job);
  const int64_t after = std::max<int64_t>(-1, d->job.step - window);
  d->curves_from_step = after + 1;
  PX_ASSIGN_OR_RETURN(std::vector<MetricRecord> points,
                      store_->ListMetrics(job_id, after, 2 * options_.max_curve_points_read));
  d->figures = SummarizeJob(points, d->job.attempt);
  d->newest_per_rank = NewestPerRank(points, d->job.attempt);
  d->loss = LossCurve(points, options_.curve_points);
  d->throughput = ThroughputCurve(points, d->job.workers, options_.curve_points);

  PX_ASSIGN_OR_RETURN(std::optional<std::string> plan, store_->GetPlan(job_id, d->job.attempt));
  if (!plan) {
    d->plan_note = "no plan yet: trainer rank 0 stores it once the attempt starts";
  } else if (StatusOr<plan::JobPlan> parsed = plan::ParseJobPlan(*plan); parsed.ok()) {
    d->plan = plan::PlanTableOf(*parsed);
  } else {
    d->plan_note = "the stored plan is not a valid plan: " + parsed.status().message();
  }
  return Status::Ok();
}

Status HttpSite::ReadTasksAndEvents(const std::vector<rpc::AgentInfo>& agents, JobPageData* d) {
  std::map<std::string, std::string> hosts;
  for (const rpc::AgentInfo& a : agents) hosts[a.name] = a.hostname;
  PX_ASSIGN_OR_RETURN(std::vector<TaskRecord> tasks, store_->ListTasks(d->job.id));
  for (const TaskRecord& t : tasks) {
    if (t.attempt == d->job.attempt) d->tasks.push_back({t, hosts[t.agent_name]});
  }
  PX_ASSIGN_OR_RETURN(std::vector<EventRecord> events, store_->ListEvents(d->job.id, 0, 0));
  const size_t keep = std::min(events.size(), static_cast<size_t>(options_.events));
  d->events.assign(events.end() - static_cast<std::ptrdiff_t>(keep), events.end());
  return Status::Ok();
}

void HttpSite::ReadLogTails(const std::vector<rpc::AgentInfo>& agents, JobPageData* d) {
  std::map<std::string, std::string> addresses;
  for (const rpc::AgentInfo& a : agents) addresses[a.name] = a.address;
  // One time budget for the whole page: an agent that does not answer
  // delays it at most that long.
  const auto deadline = SteadyClock::now() + std::chrono::milliseconds(options_.logs_budget_ms);
  for (const TaskRow& row : d->tasks) {
    if (static_cast<int>(d->logs.size()) >= options_.max_log_tails) break;
    LogTail tail{TaskName(row.task), row.host, "", ""};
    const int left_ms = static_cast<int>(
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - SteadyClock::now())
            .count());
    auto address = addresses.find(row.task.agent_name);
    if (address == addresses.end()) {
      tail.error = "agent \"" + row.task.agent_name + "\" is not registered";
    } else if (left_ms <= 0) {
      tail.error = "not read: this page's time for reading logs is spent";
    } else {
      StatusOr<std::string> text =
          logs_->Tail(address->second, KeyOf(row.task), options_.log_tail_bytes,
                      std::min(left_ms, options_.log_timeout_ms));
      if (text.ok()) {
        tail.text = std::move(text).value();
      } else {
        tail.error = text.status().message();
      }
    }
    d->logs.push_back(std::move(tail));
  }
}

HttpResponse HttpSite::TaskLog(int64_t job_id, const std::string& role, const std::string& index,
                               const HttpRequest& request) {
  std::optional<int64_t> n = ParseIndex(index);
  if ((role != "trainer" && role != "ps") || !n) {
    return Error(400, "a task is trainer/N or ps/N");
  }
  StatusOr<JobRecord> job = store_->GetJob(job_id);
  if (job.status().code() == StatusCode::kNotFound) {
    return Error(404, "no job " + std::to_string(job_id));
  }
  if (!job.ok()) return StoreError(job.status());
  int attempt = job->attempt;
  if (auto it = request.params.find("attempt"); it != request.params.end()) {
    std::optional<int64_t> a = ParseId(it->second);
    if (!a || *a > job->attempt) {
      return Error(400, "attempt must be from 1 to " + std::to_string(job->attempt));
    }
    attempt = static_cast<int>(*a);
  }
  StatusOr<std::vector<TaskRecord>> tasks = store_->ListTasks(job_id);
  StatusOr<std::vector<rpc::AgentInfo>> agents = service_->Agents();
  if (!tasks.ok()) return StoreError(tasks.status());
  if (!agents.ok()) return StoreError(agents.status());
  const TaskRole want = role == "ps" ? TaskRole::kPs : TaskRole::kTrainer;
  for (const TaskRecord& t : *tasks) {
    if (t.attempt != attempt || t.role != want || t.index != *n) continue;
    for (const rpc::AgentInfo& a : *agents) {
      if (a.name != t.agent_name) continue;
      StatusOr<std::string> text =
          logs_->Tail(a.address, KeyOf(t), options_.log_page_bytes, options_.logs_budget_ms);
      if (!text.ok())
        return Error(502, "reading the log from its agent: " + text.status().message());
      return HttpResponse{200, "text/plain; charset=utf-8", std::move(text).value(), {}};
    }
    return Error(404, "agent \"" + t.agent_name + "\" that ran " + role + "/" + index +
                          " is not registered");
  }
  return Error(404, "job " + std::to_string(job_id) + " has no task " + role + "/" + index +
                        " in attempt " + std::to_string(attempt));
}

HttpResponse HttpSite::Metrics(const HttpRequest& request) {
  ClusterFigures f;
  if (request.server != nullptr) f.http = request.server->stats();
  StatusOr<std::map<JobState, int64_t>> counts = store_->CountJobs();
  if (!counts.ok()) return StoreError(counts.status());
  f.jobs_by_state = std::move(counts).value();
  StatusOr<std::vector<rpc::AgentInfo>> agents = service_->Agents();
  if (!agents.ok()) return StoreError(agents.status());
  f.agents = std::move(agents).value();
  f.rpc = rpc_stats_->Snapshot();
  JobFilter running;
  running.states = {JobState::kPlacing, JobState::kRunning};
  StatusOr<std::vector<JobRecord>> jobs = store_->ListJobs(running);
  if (!jobs.ok()) return StoreError(jobs.status());
  std::set<int64_t> live;
  for (const JobRecord& j : *jobs) {
    JobSeries job{j.id, j.name, j.state, j.step, j.attempt, j.restarts, {}};
    StatusOr<std::vector<MetricRecord>> points = store_->ListMetrics(
        j.id, std::max<int64_t>(-1, j.step - options_.metrics_window_points * MetricsEvery(store_, j)), 0);
    if (!points.ok()) return StoreError(points.status());
    job.figures = SummarizeJob(*points, j.attempt);
    f.live_jobs.push_back(std::move(job));
    live.insert(j.id);
  }
  f.shards = service_->shard_stats().TakeLive(live);
  return HttpResponse{200, "text/plain; version=0.0.4; charset=utf-8", RenderPrometheusText(f), {}};
}

}  // namespace parallax::coordinator
