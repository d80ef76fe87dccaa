// The orchestrator's events: what submits, cancels, registrations, polls
// and reports change. The passes that act on them (lost agents, job moves,
// placement) are in orchestrator_pass.cc.
#include "coordinator/orchestration/orchestrator.h"

#include <algorithm>
#include <chrono>
#include <cstring>

#include "coordinator/orchestration/agent_liveness.h"
#include "coordinator/orchestration/orchestrator_internal.h"
#include "coordinator/orchestration/shard_recovery.h"
#include "core/base/logging.h"
#include "core/plan/job_plan.h"

namespace parallax::coordinator {

using namespace orchestrator_internal;

namespace orchestrator_internal {

std::string Quote(const std::string& s) { return "\"" + s + "\""; }

TaskId IdOfKey(const rpc::TaskKey& k) {
  return {k.job_id, k.attempt, static_cast<TaskRole>(k.role), k.index};
}

rpc::TaskKey KeyOf(const TaskRecord& t) {
  rpc::TaskKey k;
  k.job_id = t.job_id;
  k.attempt = t.attempt;
  k.role = static_cast<rpc::TaskRole::type>(t.role);
  k.index = t.index;
  if (t.generation > 1) k.__set_generation(t.generation);
  return k;
}

}  // namespace orchestrator_internal

std::string TaskName(TaskRole role, int index) {
  return (role == TaskRole::kTrainer ? "trainer/" : "ps/") + std::to_string(index);
}

int RequestedShards(const JobConfig& config) {
  return (config.job.arch == Arch::kAllReduce || config.job.arch == Arch::kAllGather) ? -1 : config.ps.shards;
}

Orchestrator::Orchestrator(StateStore* store, Clock* clock, OrchestratorOptions options)
    : store_(store), clock_(clock), options_(options), liveness_(options.agent_timeout_ms) {}

Status Orchestrator::Init() {
  std::lock_guard<std::mutex> lock(mu_);
  return Load();
}

Status Orchestrator::Load() {
  view_ = ClusterView();
  dirty_.clear();
  placement_dirty_ = true;
  PX_ASSIGN_OR_RETURN(std::vector<AgentRecord> agents, store_->ListAgents());
  for (const AgentRecord& a : agents) view_.PutAgent(a);
  PX_ASSIGN_OR_RETURN(std::vector<JobRecord> live,
                      store_->ListJobs({{JobState::kPlacing, JobState::kRunning}, 0}));
  for (const JobRecord& job : live) {
    LiveJob j;
    j.record = job;
    StatusOr<std::shared_ptr<const JobConfig>> config = store_->ParsedConfig(job);
    if (config.ok()) {
      j.config = std::move(config).value();
    } else {
      PX_LOG(WARNING) << "job \"" << job.id << "\": the stored job file is not valid: "
                      << config.status().message();
    }
    view_.PutLive(std::move(j));
    dirty_.insert(job.id);
  }
  PX_ASSIGN_OR_RETURN(std::vector<TaskRecord> tasks, store_->ListLiveTasks());
  for (const TaskRecord& t : tasks) view_.PutTask(t);
  for (const JobRecord& job : live) {
    // The ended tasks of the current attempt count for the job's state.
    PX_ASSIGN_OR_RETURN(std::vector<TaskRecord> all, store_->ListTasks(job.id));
    for (const TaskRecord& t : all) {
      if (t.attempt == job.attempt && !IsLive(t.state)) view_.PutTask(t);
    }
  }
  PX_ASSIGN_OR_RETURN(std::vector<JobRecord> pending, store_->ListJobs({{JobState::kPending}, 0}));
  for (const JobRecord& job : pending) ApplyJob(job, nullptr);
  active_ = static_cast<int64_t>(view_.active_jobs());
  return Status::Ok();
}

// ---- Jobs ----

void Orchestrator::Enqueue(const JobRecord& job, const JobConfig& config) {
  PendingJob p;
  p.id = job.id;
  p.attempt = job.attempt;
  p.workers = config.job.workers;
  p.shards = RequestedShards(config);
  p.ps_hosts = config.ps.hosts;
  p.min_workers = config.job.min_workers;
  p.replace_timeout_ms = int64_t{config.job.replace_timeout_s} * 1000;
  p.since = job.updated;
  ++inbox_size_;
  std::lock_guard<std::mutex> lock(inbox_mu_);
  inbox_.push_back(std::move(p));
}

int64_t Orchestrator::ActiveJobs() const { return active_.load() + inbox_size_.load(); }

void Orchestrator::DrainInbox() {
  std::vector<PendingJob> jobs;
  {
    std::lock_guard<std::mutex> lock(inbox_mu_);
    jobs.swap(inbox_);
  }
  if (jobs.empty()) return;
  int64_t blocked_by;
  {
    std::lock_guard<std::mutex> lock(status_mu_);
    blocked_by = blocked_by_;
  }
  for (PendingJob& j : jobs) {
    // Behind a blocked head a new job cannot start: no placement needed.
    if (blocked_by == 0 || j.id < blocked_by) placement_dirty_ = true;
    view_.PutPending(std::move(j));
  }
  active_ = static_cast<int64_t>(view_.active_jobs());
  inbox_size_ -= static_cast<int64_t>(jobs.size());
}

StatusOr<JobRecord> Orchestrator::Cancel(int64_t job_id, const std::string& reason) {
  std::lock_guard<std::mutex> lock(mu_);
  DrainInbox();
  PX_ASSIGN_OR_RETURN(JobRecord job, store_->TransitionJob(job_id, JobState::kCancelled, reason,
                                                           clock_->NowMillis()));
  ApplyJob(job, nullptr);
  return job;
}

StatusOr<JobRecord> Orchestrator::Resume(int64_t job_id, const std::string& reason) {
  std::lock_guard<std::mutex> lock(mu_);
  DrainInbox();
  PX_ASSIGN_OR_RETURN(JobRecord job, store_->TransitionJob(job_id, JobState::kPending, reason,
                                                           clock_->NowMillis()));
  ApplyJob(job, nullptr);
  return job;
}

void Orchestrator::PlanStored(int64_t job_id, int attempt) {
  std::lock_guard<std::mutex> lock(mu_);
  LiveJob* job = view_.FindLive(job_id);
  if (job == nullptr || job->record.attempt != attempt) return;
  job->shard_need.reset();
  dirty_.insert(job_id);
  WakeAgentsOf(job_id);
}

void Orchestrator::CheckpointCommitted(int64_t job_id, int attempt, int64_t step) {
  std::lock_guard<std::mutex> lock(mu_);
  LiveJob* job = view_.FindLive(job_id);
  if (job == nullptr || job->record.attempt != attempt) return;
  job->checkpointed_step = std::max(job->checkpointed_step, step);
  dirty_.insert(job_id);
}

void Orchestrator::JobChanged(int64_t job_id) {
  std::lock_guard<std::mutex> lock(mu_);
  if (view_.FindLive(job_id) != nullptr) dirty_.insert(job_id);
}

std::string Orchestrator::WaitingFor(int64_t job_id) const {
  std::lock_guard<std::mutex> lock(status_mu_);
  auto it = waiting_for_.find(job_id);
  if (it != waiting_for_.end()) return it->second;
  if (blocked_by_ != 0 && job_id > blocked_by_) {
    return "queued behind job " + std::to_string(blocked_by_);
  }
  return "";
}

void Orchestrator::ApplyJob(const JobRecord& job, std::shared_ptr<const JobConfig> config) {
  const int64_t id = job.id;
  LiveJob* live = view_.FindLive(id);
  if (!config && live != nullptr) config = live->config;
  switch (job.state) {
    case JobState::kPending: {
      PendingJob p;
      p.id = id;
      p.attempt = job.attempt;
      p.workers = job.workers;
      if (live != nullptr && live->record.attempt == job.attempt) {
        // The trainers of the attempt that ended, reused if they fit.
        std::vector<std::string> previous;
        for (const TaskRecord* t : view_.AttemptTasks(id, job.attempt)) {
          if (t->role == TaskRole::kTrainer) previous.push_back(t->agent_name);
        }
        p.previous = std::move(previous);
      }
      if (!config) {
        StatusOr<std::shared_ptr<const JobConfig>> parsed = store_->ParsedConfig(job);
        if (parsed.ok()) {
          config = std::move(parsed).value();
        } else {
          p.invalid = parsed.status().message();
        }
      }
      if (config) {
        p.workers = config->job.workers;
        p.shards = RequestedShards(*config);
        p.ps_hosts = config->ps.hosts;
        p.min_workers = config->job.min_workers;
        p.replace_timeout_ms = int64_t{config->job.replace_timeout_s} * 1000;
      }
      p.since = job.updated;
      view_.EraseLive(id);
      dirty_.erase(id);
      view_.PutPending(std::move(p));
      placement_dirty_ = true;
      WakeAgentsOf(id);  // what the ended attempt still runs must stop
      break;
    }
    case JobState::kPlacing:
    case JobState::kRunning: {
      view_.ErasePending(id);
      if (live != nullptr && live->record.attempt == job.attempt) {
        live->record = job;
        break;
      }
      LiveJob j;
      j.record = job;
      j.config = config;
      if (!j.config) {
        StatusOr<std::shared_ptr<const JobConfig>> parsed = store_->ParsedConfig(job);
        if (parsed.ok()) j.config = std::move(parsed).value();
      }
      view_.PutLive(std::move(j));
      break;
    }
    default:  // ended
      view_.ErasePending(id);
      view_.EraseLive(id);
      dirty_.erase(id);
      placement_dirty_ = true;
      WakeAgentsOf(id);
      break;
  }
  active_ = static_cast<int64_t>(view_.active_jobs());
}

void Orchestrator::ApplyTasks(const std::vector<TaskRecord>& tasks) {
  for (const TaskRecord& t : tasks) {
    const TaskRecord* before = view_.FindTask(IdOf(t));
    const bool ended = before != nullptr && IsLive(before->state) && !IsLive(t.state);
    view_.PutTask(t);
    // A task that ended frees its slot, and may unblock a job waiting for
    // its earlier attempt to stop.
    if (ended) placement_dirty_ = true;
    if (view_.FindLive(t.job_id) != nullptr) dirty_.insert(t.job_id);
  }
}

void Orchestrator::WakeAgent(const std::string& name) {
  AgentView* a = view_.FindAgent(name);
  if (a == nullptr) return;
  ++a->work_seq;
  a->work_cv->notify_all();
}

void Orchestrator::WakeAgentsOf(int64_t job_id) {
  std::set<std::string> agents;
  for (const TaskRecord* t : view_.LiveTasksOf(job_id)) agents.insert(t->agent_name);
  for (const std::string& a : agents) WakeAgent(a);
}

// ---- Agents ----

std::optional<AgentRecord> Orchestrator::Agent(const std::string& name) {
  std::lock_guard<std::mutex> lock(mu_);
  AgentView* a = view_.FindAgent(name);
  if (a == nullptr || a->record.address.empty()) return std::nullopt;
  return a->record;
}

Status Orchestrator::RegisterAgent(const AgentRecord& agent, int64_t now) {
  AgentRecord record = agent;
  {
    // A drain outlives re-registrations.
    std::lock_guard<std::mutex> lock(mu_);
    AgentView* before = view_.FindAgent(agent.name);
    record.draining = before != nullptr && before->record.draining;
  }
  // Written without mu_: a registration storm (a cluster coming up) is
  // group-committed instead of waiting for passes.
  PX_RETURN_IF_ERROR(store_->UpsertAgent(record, now));
  std::lock_guard<std::mutex> lock(mu_);
  AgentView* before = view_.FindAgent(agent.name);
  record.registered =
      before != nullptr && before->record.registered > 0 ? before->record.registered : now;
  record.last_seen = now;
  if (before != nullptr) record.draining = before->record.draining;  // a drain that came meanwhile
  AgentView& a = view_.PutAgent(record);
  a.here = true;
  a.lost = false;
  placement_dirty_ = true;
  WakeAgent(agent.name);
  return Status::Ok();
}

Status Orchestrator::SetDraining(const std::string& name, bool draining, int64_t now) {
  std::lock_guard<std::mutex> lock(mu_);
  PX_RETURN_IF_ERROR(store_->SetAgentDraining(name, draining, now));
  if (AgentView* a = view_.FindAgent(name)) a->record.draining = draining;
  placement_dirty_ = true;
  return Status::Ok();
}

// ---- What agents run ----

StatusOr<LiveJob::ShardNeed> Orchestrator::ShardsNeeded(LiveJob& job) {
  if (job.shard_need) return *job.shard_need;
  // arch = "ps" puts every variable on the PS; allreduce and allgather jobs
  // have no shards. Only a hybrid plan can leave the PS empty.
  if (!job.config || job.config->job.arch != Arch::kHybrid) return *(job.shard_need = ShardNeed::kYes);
  PX_ASSIGN_OR_RETURN(std::optional<std::string> text,
                      store_->GetPlan(job.record.id, job.record.attempt));
  if (!text) return *(job.shard_need = ShardNeed::kUnknown);
  // A plan this cannot read launches the shards, which report what is wrong
  // with it.
  StatusOr<plan::JobPlan> plan = plan::ParseJobPlan(*text);
  if (!plan.ok()) return *(job.shard_need = ShardNeed::kYes);
  return *(job.shard_need = plan->has_ps() ? ShardNeed::kYes : ShardNeed::kNo);
}

const AttemptLayout& Orchestrator::Layout(LiveJob& job) {
  if (job.layout) return *job.layout;
  auto layout = std::make_shared<AttemptLayout>();
  for (const TaskRecord* t : view_.AttemptTasks(job.record.id, job.record.attempt)) {
    if (layout->host_index.emplace(t->agent_name, static_cast<int>(layout->hosts.size())).second) {
      layout->hosts.push_back(t->agent_name);
    }
    if (t->role == TaskRole::kTrainer) {
      ++layout->world;
      // Trainers come by index, so this counts the lower ranks on the agent.
      layout->local_rank[t->index] = layout->local_size[t->agent_name]++;
    } else {
      ++layout->shards;
    }
  }
  job.layout = std::move(layout);
  return *job.layout;
}

StatusOr<rpc::TaskAssignment> Orchestrator::Assignment(LiveJob& job, const TaskRecord& task,
                                                       int agent_gpus) {
  if (!job.config) {
    return Internal("job \"" + std::to_string(job.record.id) +
                    "\": the stored job file is not valid; cancel the job");
  }
  const JobConfig& config = *job.config;
  const AttemptLayout& layout = Layout(job);
  const bool trainer = task.role == TaskRole::kTrainer;
  const int local_rank = trainer ? layout.local_rank.at(task.index) : 0;
  auto size = layout.local_size.find(task.agent_name);
  rpc::TaskAssignment a;
  a.key = KeyOf(task);
  a.world_size = layout.world;
  a.local_rank = local_rank;
  a.local_world_size = size == layout.local_size.end() ? 0 : size->second;
  a.host_index = layout.host_index.at(task.agent_name);
  // The hosts of the trainers (the first in layout.hosts): what the planner
  // and local aggregation count. PS hosts ([ps] hosts = "ps") come after them.
  a.num_hosts = static_cast<int>(layout.local_size.size());
  a.num_shards = layout.shards;
  if (trainer) a.command = config.trainer.command;
  a.env = std::map<std::string, std::string>(config.trainer.env.begin(), config.trainer.env.end());
  a.job_text = job.record.job_text;
  a.job_path = job.record.job_path;
  // One GPU per trainer slot, by local rank. (Slots are not yet tracked per
  // GPU across jobs: two jobs on one GPU agent would share devices.)
  if (trainer && agent_gpus > 0) {
    a.__set_cuda_visible_devices(std::to_string(local_rank % agent_gpus));
  }
  return a;
}

StatusOr<AgentWork> Orchestrator::WorkFor(const std::string& agent,
                                          const std::vector<rpc::TaskKey>& running,
                                          bool after_register) {
  std::lock_guard<std::mutex> lock(mu_);
  return WorkForLocked(agent, running, after_register);
}

StatusOr<AgentWork> Orchestrator::WaitForWork(const std::string& agent,
                                              const std::vector<rpc::TaskKey>& running,
                                              int64_t timeout_ms) {
  const auto deadline =
      std::chrono::steady_clock::now() + std::chrono::milliseconds(std::max<int64_t>(0, timeout_ms));
  std::unique_lock<std::mutex> lock(mu_);
  while (true) {
    if (stopping_) return Unavailable("coordinator is shutting down");
    PX_ASSIGN_OR_RETURN(AgentWork work, WorkForLocked(agent, running, false));
    AgentView* a = view_.FindAgent(agent);
    if (!work.empty() || a == nullptr) return work;
    const uint64_t seen = a->work_seq;
    if (!a->work_cv->wait_until(lock, deadline,
                                [&] { return stopping_ || a->work_seq != seen; })) {
      return work;
    }
  }
}

StatusOr<AgentWork> Orchestrator::WorkForLocked(const std::string& agent,
                                                const std::vector<rpc::TaskKey>& running,
                                                bool after_register) {
  const int64_t now = clock_->NowMillis();
  AgentWork work;
  auto current = [&](int64_t job_id, int attempt) -> LiveJob* {
    LiveJob* j = view_.FindLive(job_id);
    return j != nullptr && j->record.attempt == attempt ? j : nullptr;
  };
  // After a (re)registration, per job and attempt: the tasks the agent still
  // runs (kept) and those it no longer lists (lost), for the job's events.
  std::map<std::pair<int64_t, int>, std::pair<std::vector<std::string>, std::vector<std::string>>>
      seen_again;

  // Stop what the agent runs that no longer belongs.
  std::set<TaskId> listed;
  for (const rpc::TaskKey& k : running) {
    const TaskId id = IdOfKey(k);
    const TaskRecord* t = current(k.job_id, k.attempt) ? view_.FindTask(id) : nullptr;
    // An older generation of a shard started again alone is not the task
    // the coordinator counts: stopped, and its successor started.
    if (t != nullptr && IsStaleGeneration(*t, k)) {
      work.stop.push_back(k);
      continue;
    }
    listed.insert(id);
    const bool keep = t != nullptr && IsLive(t->state) && t->agent_name == agent;
    if (!keep) work.stop.push_back(k);
    if (keep && after_register) {
      seen_again[{k.job_id, k.attempt}].first.push_back(TaskName(id.role, id.index));
    }
  }

  // Start what is assigned and not yet running; after a (re)registration,
  // what the store thinks runs here but the agent does not list is lost.
  AgentView* a = view_.FindAgent(agent);
  if (a == nullptr) return work;
  const int gpus = a->record.gpus;
  std::vector<TaskRecord> vanished;
  for (const TaskId& id : a->tasks) {
    if (listed.count(id)) continue;
    const TaskRecord& t = *view_.FindTask(id);
    LiveJob* job = current(t.job_id, t.attempt);
    if (t.state == TaskState::kAssigned && job != nullptr) {
      if (t.role == TaskRole::kPs) {
        // A hybrid job's shards start once the plan says the PS holds something.
        PX_ASSIGN_OR_RETURN(ShardNeed need, ShardsNeeded(*job));
        if (need != ShardNeed::kYes) continue;
      }
      PX_ASSIGN_OR_RETURN(rpc::TaskAssignment assignment, Assignment(*job, t, gpus));
      work.start.push_back(std::move(assignment));
    } else if (t.state == TaskState::kRunning && after_register) {
      TaskRecord lost = t;
      lost.state = TaskState::kLost;
      lost.message = "agent " + Quote(agent) +
                     " registered again without it: it ended while the agent was away, or the "
                     "agent's workdir no longer holds it";
      lost.updated = now;
      seen_again[{t.job_id, t.attempt}].second.push_back(TaskName(t.role, t.index));
      vanished.push_back(std::move(lost));
    } else if (t.state == TaskState::kAssigned && job == nullptr) {
      // Never started, and its attempt is over: nothing to stop.
      TaskRecord dropped = t;
      dropped.state = TaskState::kKilled;
      dropped.message = "not started: the attempt ended first";
      dropped.updated = now;
      vanished.push_back(std::move(dropped));
    }
  }
  std::vector<NewEvent> events;
  for (const auto& [job_attempt, names] : seen_again) {
    auto join = [](const std::vector<std::string>& v) {
      std::string out;
      for (const std::string& n : v) out += (out.empty() ? "" : ", ") + n;
      return out;
    };
    // The agent process may have restarted (and adopted its tasks), or the
    // coordinator did; either way these are what the agent listed.
    const std::string of_attempt = " of attempt " + std::to_string(job_attempt.second);
    std::string message = "agent " + Quote(agent) + " registered again";
    if (!names.first.empty()) {
      message += " and still runs " + join(names.first) + of_attempt + ", which keep their attempt";
    }
    if (!names.second.empty()) {
      message += std::string(names.first.empty() ? "" : ";") + " without " + join(names.second) +
                 (names.first.empty() ? of_attempt : "") + ", now lost";
    }
    events.push_back({job_attempt.first, "agent", message, now});
  }
  if (!vanished.empty() || !events.empty()) {
    PX_RETURN_IF_ERROR(store_->UpsertTasks(vanished, events));
    ApplyTasks(vanished);
  }
  return work;
}

uint64_t Orchestrator::QueueReports(const std::string& agent,
                                    const std::vector<rpc::TaskReport>& reports) {
  std::lock_guard<std::mutex> lock(inbox_mu_);
  const uint64_t ticket = next_ticket_++;
  report_inbox_.push_back({agent, reports, ticket});
  return ticket;
}

Status Orchestrator::WaitReports(uint64_t ticket, int64_t timeout_ms) {
  std::unique_lock<std::mutex> lock(inbox_mu_);
  if (!reports_done_cv_.wait_for(lock, std::chrono::milliseconds(std::max<int64_t>(0, timeout_ms)),
                                 [&] { return reports_stopped_ || reports_done_ >= ticket; })) {
    return DeadlineExceeded("the coordinator did not record the task reports within " +
                            std::to_string(timeout_ms) + " ms; report them again");
  }
  if (reports_done_ < ticket) return Unavailable("coordinator is shutting down");
  auto it = report_errors_.find(ticket);
  if (it == report_errors_.end()) return Status::Ok();
  Status error = it->second;
  report_errors_.erase(it);
  return error;
}

void Orchestrator::FinishReports(uint64_t through, const Status& status) {
  {
    std::lock_guard<std::mutex> lock(inbox_mu_);
    if (!status.ok()) {
      for (uint64_t t = reports_done_ + 1; t <= through; ++t) report_errors_[t] = status;
    }
    reports_done_ = std::max(reports_done_, through);
  }
  reports_done_cv_.notify_all();
}

std::optional<TaskRecord> Orchestrator::LateReportOfEndedJob(const TaskId& id,
                                                           const std::string& agent,
                                                           const rpc::TaskReport& report,
                                                           int64_t now) {
  // Only a final report can correct a task lost for silence; anything else
  // costs no read.
  if (report.state != rpc::TaskState::EXITED && report.state != rpc::TaskState::KILLED) {
    return std::nullopt;
  }
  StatusOr<std::vector<TaskRecord>> tasks = store_->ListTasks(id.job_id);
  if (!tasks.ok()) return std::nullopt;
  for (const TaskRecord& t : *tasks) {
    if (t.attempt == id.attempt && t.role == id.role && t.index == id.index &&
        t.agent_name == agent) {
      return LateFinalReport(t, report, now);
    }
  }
  return std::nullopt;
}

void Orchestrator::TakeReports(Pass* pass) {
  std::vector<QueuedReports> queued;
  {
    std::lock_guard<std::mutex> lock(inbox_mu_);
    queued.swap(report_inbox_);
  }
  const int64_t now = clock_->NowMillis();
  for (const QueuedReports& q : queued) {
    pass->reports_through = std::max(pass->reports_through, q.ticket);
    std::vector<TaskRecord> updates;
    for (const rpc::TaskReport& r : q.reports) {
      const TaskId id = IdOfKey(r.key);
      const TaskRecord* found = view_.FindTask(id);
      if (found == nullptr) {
        // The real end of a task lost while its agent was silent, whose job
        // has ended since (coordinator/orchestration/agent_liveness.h); or a repeated
        // report, or never ours.
        if (std::optional<TaskRecord> late = LateReportOfEndedJob(id, q.agent, r, now)) {
          pass->changes.events.push_back({late->job_id, "task", LateReportEvent(*late), now});
          pass->changes.tasks.push_back(std::move(*late));
          continue;
        }
        PX_LOG(DEBUG) << "agent \"" << q.agent << "\" reported a task that is not live: job \""
                      << r.key.job_id << "\" attempt " << r.key.attempt << " "
                      << TaskName(id.role, id.index);
        continue;
      }
      if (IsStaleGeneration(*found, r.key)) {
        // The process its successor replaced: its end changes nothing.
        PX_LOG(INFO) << "agent \"" << q.agent << "\" reported generation "
                     << ReportedGeneration(r.key) << " of job \"" << r.key.job_id << "\" "
                     << TaskName(id.role, id.index) << ", which is at generation "
                     << found->generation << ": ignored";
        continue;
      }
      if (found->agent_name != q.agent) {
        PX_LOG(WARNING) << "agent \"" << q.agent << "\" reported a task it does not hold: job \""
                        << r.key.job_id << "\" attempt " << r.key.attempt;
        continue;
      }
      if (!IsLive(found->state)) {
        // Already ended: a repeated report, or the real end of a task lost
        // while its agent was silent (coordinator/orchestration/agent_liveness.h).
        if (std::optional<TaskRecord> late = LateFinalReport(*found, r, now)) {
          pass->changes.events.push_back({late->job_id, "task", LateReportEvent(*late), now});
          pass->changes.tasks.push_back(*late);
          ApplyTasks({*late});
        }
        continue;
      }
      TaskRecord t = *found;
      t.state = static_cast<TaskState>(r.state);
      if (t.state == TaskState::kAssigned) continue;
      t.exit_code = r.__isset.exit_code ? std::optional<int>(r.exit_code) : std::nullopt;
      t.signal = r.__isset.signal ? std::optional<int>(r.signal) : std::nullopt;
      t.message = r.__isset.message ? r.message : "";
      t.updated = now;
      if (!IsLive(t.state)) {
        pass->changes.events.push_back(
            {t.job_id, "task", "attempt " + std::to_string(t.attempt) + ": " + Outcome(t), now});
      }
      pass->changes.tasks.push_back(t);
      // In memory at once: a later report of this batch sees it.
      ApplyTasks({t});
    }
  }
}

void Orchestrator::Stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
    for (auto& [name, a] : view_.agents()) a.work_cv->notify_all();
  }
  {
    std::lock_guard<std::mutex> lock(inbox_mu_);
    reports_stopped_ = true;
  }
  reports_done_cv_.notify_all();
}

}  // namespace parallax::coordinator
