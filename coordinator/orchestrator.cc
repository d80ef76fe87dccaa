#include "coordinator/orchestrator.h"

#include <signal.h>

#include <algorithm>
#include <cstring>

#include "coordinator/partition_trials.h"
#include "coordinator/scheduler.h"
#include "core/plan/job_plan.h"
#include "core/base/logging.h"

namespace parallax::coordinator {
namespace {

std::string Quote(const std::string& s) { return "\"" + s + "\""; }

bool SameTask(const TaskRecord& t, const rpc::TaskKey& k) {
  return t.job_id == k.job_id && t.attempt == k.attempt &&
         static_cast<int>(t.role) == static_cast<int>(k.role) && t.index == k.index;
}

rpc::TaskKey KeyOf(const TaskRecord& t) {
  rpc::TaskKey k;
  k.job_id = t.job_id;
  k.attempt = t.attempt;
  k.role = static_cast<rpc::TaskRole::type>(t.role);
  k.index = t.index;
  return k;
}

std::vector<TaskRecord> OfAttempt(const std::vector<TaskRecord>& tasks, int attempt) {
  std::vector<TaskRecord> out;
  for (const TaskRecord& t : tasks) {
    if (t.attempt == attempt) out.push_back(t);
  }
  std::stable_sort(out.begin(), out.end(), [](const TaskRecord& a, const TaskRecord& b) {
    if (a.role != b.role) return a.role < b.role;  // trainers first
    return a.index < b.index;
  });
  return out;
}

// How a task ended, for events and reasons.
std::string Outcome(const TaskRecord& t) {
  std::string what = TaskName(t.role, t.index) + " on agent " + Quote(t.agent_name);
  switch (t.state) {
    case TaskState::kExited:
      return what + " exited with code " + std::to_string(t.exit_code.value_or(-1));
    case TaskState::kKilled: {
      int sig = t.signal.value_or(0);
      const char* name = sigabbrev_np(sig);
      return what + " was killed by signal " + std::to_string(sig) +
             (name ? std::string(" (SIG") + name + ")" : "");
    }
    case TaskState::kLost:
      return what + " was lost" + (t.message.empty() ? "" : ": " + t.message);
    default:
      return what + " is running";
  }
}

// A PS shard of a hybrid job whose plan put no variable on the PS is never
// launched: it is recorded as exited with code 0 and this message.
constexpr char kShardNotLaunched[] = "not launched: the plan puts no variable on the PS";

bool NotLaunched(const TaskRecord& t) {
  return t.role == TaskRole::kPs && t.state == TaskState::kExited && t.exit_code == 0 &&
         t.message == kShardNotLaunched;
}

bool Failed(const TaskRecord& t) {
  if (t.role == TaskRole::kPs) return !IsLive(t.state) && !NotLaunched(t);
  return t.state == TaskState::kKilled || t.state == TaskState::kLost ||
         (t.state == TaskState::kExited && t.exit_code.value_or(-1) != 0);
}

}  // namespace

std::string TaskName(TaskRole role, int index) {
  return (role == TaskRole::kTrainer ? "trainer/" : "ps/") + std::to_string(index);
}

Orchestrator::Orchestrator(StateStore* store, Clock* clock, OrchestratorOptions options)
    : store_(store), clock_(clock), options_(options) {}

StatusOr<std::shared_ptr<const JobConfig>> Orchestrator::Config(const JobRecord& job) {
  auto it = configs_.find(job.id);
  if (it != configs_.end()) return it->second;
  JobLoadOptions load;
  load.check_paths = false;
  StatusOr<JobConfig> config =
      ParseJobConfig(job.job_text, job.job_path.empty() ? "<submitted>" : job.job_path, load);
  if (!config.ok()) return config.status();
  auto shared = std::make_shared<const JobConfig>(std::move(config).value());
  configs_[job.id] = shared;
  return shared;
}

StatusOr<Orchestrator::ShardNeed> Orchestrator::ShardsNeeded(const JobRecord& job, int attempt) {
  PX_ASSIGN_OR_RETURN(std::shared_ptr<const JobConfig> config, Config(job));
  // arch = "ps" puts every variable on the PS; allreduce and allgather jobs
  // have no shards. Only a hybrid plan can leave the PS empty.
  if (config->job.arch != Arch::kHybrid) return ShardNeed::kYes;
  PX_ASSIGN_OR_RETURN(std::optional<std::string> text, store_->GetPlan(job.id, attempt));
  if (!text) return ShardNeed::kUnknown;
  // A plan this cannot read launches the shards, which report what is wrong
  // with it.
  StatusOr<plan::JobPlan> plan = plan::ParseJobPlan(*text);
  if (!plan.ok()) return ShardNeed::kYes;
  return plan->has_ps() ? ShardNeed::kYes : ShardNeed::kNo;
}

std::string Orchestrator::WaitingFor(int64_t job_id) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = waiting_for_.find(job_id);
  return it == waiting_for_.end() ? "" : it->second;
}

StatusOr<bool> Orchestrator::Reconcile(const std::map<std::string, int64_t>& last_seen) {
  std::lock_guard<std::mutex> lock(mu_);
  std::set<std::string> available;
  PX_ASSIGN_OR_RETURN(bool changed, MarkLostAgents(last_seen, &available));
  PX_ASSIGN_OR_RETURN(std::vector<JobRecord> live,
                      store_->ListJobs({{JobState::kPlacing, JobState::kRunning}, 0}));
  for (const JobRecord& job : live) {
    PX_ASSIGN_OR_RETURN(bool moved, AdvanceJob(job));
    changed |= moved;
  }
  PX_ASSIGN_OR_RETURN(bool placed, PlacePending(available));
  return changed || placed;
}

StatusOr<bool> Orchestrator::MarkLostAgents(const std::map<std::string, int64_t>& last_seen,
                                            std::set<std::string>* available) {
  const int64_t now = clock_->NowMillis();
  PX_ASSIGN_OR_RETURN(std::vector<AgentRecord> agents, store_->ListAgents());
  PX_ASSIGN_OR_RETURN(std::vector<TaskRecord> live, store_->ListLiveTasks());
  bool changed = false;
  for (const AgentRecord& a : agents) {
    int64_t seen = a.last_seen;
    auto it = last_seen.find(a.name);
    if (it != last_seen.end()) seen = std::max(seen, it->second);
    if (now - seen <= options_.agent_timeout_ms) {
      lost_agents_.erase(a.name);
      // Only agents that talked to this coordinator process take new tasks.
      if (!a.draining && it != last_seen.end()) available->insert(a.name);
      continue;
    }
    std::vector<TaskRecord> orphaned;
    for (TaskRecord t : live) {
      if (t.agent_name != a.name) continue;
      t.state = TaskState::kLost;
      t.message = "agent " + Quote(a.name) + " stopped heartbeating " +
                  std::to_string((now - seen) / 1000) + " s ago";
      t.updated = now;
      orphaned.push_back(std::move(t));
    }
    if (lost_agents_.insert(a.name).second) {
      PX_RETURN_IF_ERROR(store_->AppendEvent(0, "agent",
                                             "agent " + Quote(a.name) + " is lost: no heartbeat for " +
                                                 std::to_string((now - seen) / 1000) + " s",
                                             now)
                             .status());
    }
    if (!orphaned.empty()) {
      PX_RETURN_IF_ERROR(store_->UpsertTasks(orphaned));
      changed = true;
    }
  }
  return changed;
}

StatusOr<bool> Orchestrator::AdvanceJob(const JobRecord& job) {
  const int64_t now = clock_->NowMillis();
  PX_ASSIGN_OR_RETURN(std::vector<TaskRecord> all, store_->ListTasks(job.id));
  std::vector<TaskRecord> tasks = OfAttempt(all, job.attempt);
  if (tasks.empty()) return false;
  // Shards wait for the plan (WorkFor); when it puts nothing on the PS they
  // are never launched.
  std::vector<TaskRecord> skipped;
  bool marked = false;
  for (const TaskRecord& t : tasks) {
    if (t.role == TaskRole::kPs && t.state == TaskState::kAssigned) skipped.push_back(t);
  }
  if (!skipped.empty()) {
    PX_ASSIGN_OR_RETURN(ShardNeed need, ShardsNeeded(job, job.attempt));
    if (need == ShardNeed::kNo) {
      for (TaskRecord& t : skipped) {
        t.state = TaskState::kExited;
        t.exit_code = 0;
        t.message = kShardNotLaunched;
        t.updated = now;
      }
      PX_RETURN_IF_ERROR(store_->UpsertTasks(skipped));
      PX_RETURN_IF_ERROR(store_->AppendEvent(job.id, "plan",
                                             "attempt " + std::to_string(job.attempt) +
                                                 ": the plan puts no variable on the PS; " +
                                                 std::to_string(skipped.size()) +
                                                 " PS shard(s) not launched",
                                             now)
                             .status());
      PX_ASSIGN_OR_RETURN(all, store_->ListTasks(job.id));
      tasks = OfAttempt(all, job.attempt);
      marked = true;
    }
  }
  bool all_started = true, trainers_done = true;
  const TaskRecord* failed = nullptr;
  for (const TaskRecord& t : tasks) {
    if (t.state == TaskState::kAssigned) all_started = false;
    if (t.role == TaskRole::kTrainer &&
        !(t.state == TaskState::kExited && t.exit_code.value_or(-1) == 0)) {
      trainers_done = false;
    }
  }
  for (const TaskRecord& t : tasks) {
    if (Failed(t)) {
      failed = &t;
      break;
    }
  }
  // A partition-search trial ends on its own terms (coordinator/partition_trials.h).
  if (StatusOr<std::shared_ptr<const JobConfig>> config = Config(job); config.ok()) {
    PX_ASSIGN_OR_RETURN(bool trial_over,
                        EndTrialIfOver(store_, job, **config, failed ? Outcome(*failed) : "",
                                       trainers_done, now));
    if (trial_over) return true;
  }
  if (trainers_done) {
    if (job.state == JobState::kPlacing) {
      PX_RETURN_IF_ERROR(store_->TransitionJob(job.id, JobState::kRunning, "", now).status());
    }
    int trainers = 0;
    for (const TaskRecord& t : tasks) trainers += t.role == TaskRole::kTrainer;
    PX_RETURN_IF_ERROR(store_->TransitionJob(job.id, JobState::kSucceeded,
                                             "all " + std::to_string(trainers) +
                                                 " trainers exited with code 0",
                                             now)
                           .status());
    configs_.erase(job.id);
    return true;
  }
  if (failed != nullptr) {
    PX_ASSIGN_OR_RETURN(std::shared_ptr<const JobConfig> config, Config(job));
    std::string what = Outcome(*failed);
    if (job.restarts < config->job.max_restarts) {
      PX_RETURN_IF_ERROR(
          store_->TransitionJob(job.id, JobState::kPending,
                                "restart " + std::to_string(job.restarts + 1) + " of " +
                                    std::to_string(config->job.max_restarts) + ": " + what,
                                now)
              .status());
    } else {
      std::string reason = what;
      if (config->job.max_restarts > 0) {
        reason += " (after " + std::to_string(job.restarts) + " restart(s); max_restarts = " +
                  std::to_string(config->job.max_restarts) + ")";
      }
      if (!failed->message.empty() && failed->state != TaskState::kLost) {
        reason += "; last log lines:\n" + failed->message;
      }
      PX_RETURN_IF_ERROR(store_->TransitionJob(job.id, JobState::kFailed, reason, now).status());
      configs_.erase(job.id);
    }
    return true;
  }
  if (job.state == JobState::kPlacing && all_started) {
    const auto launched =
        std::count_if(tasks.begin(), tasks.end(), [](const TaskRecord& t) { return !NotLaunched(t); });
    PX_RETURN_IF_ERROR(
        store_->TransitionJob(job.id, JobState::kRunning,
                              "all " + std::to_string(launched) + " tasks started", now)
            .status());
    return true;
  }
  return marked;
}

StatusOr<bool> Orchestrator::PlacePending(const std::set<std::string>& available) {
  const int64_t now = clock_->NowMillis();
  PX_ASSIGN_OR_RETURN(std::vector<JobRecord> pending, store_->ListJobs({{JobState::kPending}, 0}));
  std::sort(pending.begin(), pending.end(),
            [](const JobRecord& a, const JobRecord& b) { return a.id < b.id; });
  std::set<int64_t> pending_ids;
  for (const JobRecord& j : pending) pending_ids.insert(j.id);
  for (auto it = waiting_for_.begin(); it != waiting_for_.end();) {
    it = pending_ids.count(it->first) ? std::next(it) : waiting_for_.erase(it);
  }
  if (pending.empty()) return false;

  PX_ASSIGN_OR_RETURN(std::vector<AgentRecord> agents, store_->ListAgents());
  PX_ASSIGN_OR_RETURN(std::vector<TaskRecord> live, store_->ListLiveTasks());
  std::map<std::string, int> used;
  std::set<int64_t> jobs_with_live_tasks;
  for (const TaskRecord& t : live) {
    if (t.role == TaskRole::kTrainer) ++used[t.agent_name];
    jobs_with_live_tasks.insert(t.job_id);
  }
  std::vector<AgentCapacity> capacity;
  for (const AgentRecord& a : agents) {
    if (!available.count(a.name)) continue;
    capacity.push_back({a.name, a.slots, a.slots - used[a.name]});
  }

  bool changed = false;
  int64_t blocked_by = 0;
  for (const JobRecord& job : pending) {
    if (blocked_by != 0) {
      waiting_for_[job.id] = "queued behind job " + std::to_string(blocked_by);
      continue;
    }
    if (jobs_with_live_tasks.count(job.id)) {
      waiting_for_[job.id] = "waiting for the tasks of attempt " + std::to_string(job.attempt) +
                             " to stop";
      blocked_by = job.id;
      continue;
    }
    StatusOr<std::shared_ptr<const JobConfig>> config = Config(job);
    if (!config.ok()) {
      PX_RETURN_IF_ERROR(store_->TransitionJob(job.id, JobState::kFailed,
                                               "the stored job file is not valid: " +
                                                   config.status().message(),
                                               now)
                             .status());
      changed = true;
      continue;
    }
    const JobConfig& cfg = **config;
    PlacementRequest request;
    request.workers = cfg.job.workers;
    request.shards =
        (cfg.job.arch == Arch::kAllReduce || cfg.job.arch == Arch::kAllGather) ? -1 : cfg.ps.shards;
    if (job.attempt > 0) {
      PX_ASSIGN_OR_RETURN(std::vector<TaskRecord> all, store_->ListTasks(job.id));
      for (const TaskRecord& t : OfAttempt(all, job.attempt)) {
        if (t.role == TaskRole::kTrainer) request.previous.push_back(t.agent_name);
      }
    }
    Placement p = PlaceJob(request, capacity);
    if (p.fit != Placement::Fit::kPlaced) {
      waiting_for_[job.id] = p.reason;
      if (p.fit == Placement::Fit::kWait) blocked_by = job.id;
      continue;
    }
    std::vector<TaskRecord> tasks;
    std::map<std::string, int> per_agent;
    for (size_t r = 0; r < p.trainer_agents.size(); ++r) {
      TaskRecord t;
      t.role = TaskRole::kTrainer;
      t.index = static_cast<int>(r);
      t.agent_name = p.trainer_agents[r];
      t.state = TaskState::kAssigned;
      tasks.push_back(t);
      ++per_agent[t.agent_name];
    }
    for (size_t s = 0; s < p.ps_agents.size(); ++s) {
      TaskRecord t;
      t.role = TaskRole::kPs;
      t.index = static_cast<int>(s);
      t.agent_name = p.ps_agents[s];
      t.state = TaskState::kAssigned;
      tasks.push_back(t);
    }
    std::string message = "trainers on";
    for (const auto& [name, n] : per_agent) message += " " + Quote(name) + "×" + std::to_string(n);
    if (!p.ps_agents.empty()) message += ", " + std::to_string(p.ps_agents.size()) + " PS shard(s)";
    PX_ASSIGN_OR_RETURN(AttemptStart kind, BeginAttempt(store_, job, cfg,
                                                        static_cast<int>(p.ps_agents.size()), now));
    if (!kind.message.empty()) message += "; " + kind.message;
    PX_RETURN_IF_ERROR(store_->StartAttempt(job.id, tasks, message, now).status());
    for (AgentCapacity& c : capacity) c.free -= per_agent[c.name];
    waiting_for_.erase(job.id);
    changed = true;
  }
  return changed;
}

StatusOr<rpc::TaskAssignment> Orchestrator::Assignment(const JobRecord& job, const TaskRecord& task,
                                                       const std::vector<TaskRecord>& attempt_tasks,
                                                       int agent_gpus) {
  PX_ASSIGN_OR_RETURN(std::shared_ptr<const JobConfig> config, Config(job));
  std::vector<std::string> hosts;
  int world = 0, shards = 0, local_rank = 0, local_size = 0;
  for (const TaskRecord& t : attempt_tasks) {
    if (std::find(hosts.begin(), hosts.end(), t.agent_name) == hosts.end()) {
      hosts.push_back(t.agent_name);
    }
    if (t.role == TaskRole::kTrainer) {
      ++world;
      if (t.agent_name == task.agent_name) {
        if (t.index < task.index) ++local_rank;
        ++local_size;
      }
    } else {
      ++shards;
    }
  }
  rpc::TaskAssignment a;
  a.key = KeyOf(task);
  a.world_size = world;
  a.local_rank = task.role == TaskRole::kTrainer ? local_rank : 0;
  a.local_world_size = local_size;
  a.host_index = static_cast<int>(std::find(hosts.begin(), hosts.end(), task.agent_name) -
                                  hosts.begin());
  a.num_hosts = static_cast<int>(hosts.size());
  a.num_shards = shards;
  if (task.role == TaskRole::kTrainer) a.command = config->trainer.command;
  a.env = std::map<std::string, std::string>(config->trainer.env.begin(),
                                             config->trainer.env.end());
  a.job_text = job.job_text;
  a.job_path = job.job_path;
  // One GPU per trainer slot, by local rank. (Slots are not yet tracked per
  // GPU across jobs: two jobs on one GPU agent would share devices.)
  if (task.role == TaskRole::kTrainer && agent_gpus > 0) {
    a.__set_cuda_visible_devices(std::to_string(local_rank % agent_gpus));
  }
  return a;
}

StatusOr<AgentWork> Orchestrator::WorkFor(const std::string& agent,
                                          const std::vector<rpc::TaskKey>& running,
                                          bool after_register) {
  std::lock_guard<std::mutex> lock(mu_);
  const int64_t now = clock_->NowMillis();
  AgentWork work;
  std::map<int64_t, std::optional<JobRecord>> jobs;
  std::map<int64_t, std::vector<TaskRecord>> tasks_of;
  auto load = [&](int64_t job_id) -> Status {
    if (jobs.count(job_id)) return Status::Ok();
    StatusOr<JobRecord> job = store_->GetJob(job_id);
    if (job.status().code() == StatusCode::kNotFound) {
      jobs[job_id] = std::nullopt;
      return Status::Ok();
    }
    PX_RETURN_IF_ERROR(job.status());
    jobs[job_id] = *job;
    PX_ASSIGN_OR_RETURN(tasks_of[job_id], store_->ListTasks(job_id));
    return Status::Ok();
  };
  auto current = [&](int64_t job_id, int attempt) {
    const std::optional<JobRecord>& j = jobs[job_id];
    return j && (j->state == JobState::kPlacing || j->state == JobState::kRunning) &&
           j->attempt == attempt;
  };

  // After a (re)registration, per job and attempt: the tasks the agent still
  // runs (kept) and those it no longer lists (lost), for the job's events.
  std::map<std::pair<int64_t, int>, std::pair<std::vector<std::string>, std::vector<std::string>>>
      seen_again;

  // Stop what the agent runs that no longer belongs.
  for (const rpc::TaskKey& k : running) {
    PX_RETURN_IF_ERROR(load(k.job_id));
    bool keep = false;
    if (current(k.job_id, k.attempt)) {
      for (const TaskRecord& t : tasks_of[k.job_id]) {
        if (SameTask(t, k)) keep = IsLive(t.state) && t.agent_name == agent;
      }
    }
    if (!keep) work.stop.push_back(k);
    if (keep && after_register) {
      seen_again[{k.job_id, k.attempt}].first.push_back(
          TaskName(static_cast<TaskRole>(k.role), k.index));
    }
  }

  // Start what is assigned and not yet running; after a (re)registration,
  // what the store thinks runs here but the agent does not list is lost.
  PX_ASSIGN_OR_RETURN(std::vector<TaskRecord> live, store_->ListLiveTasks());
  PX_ASSIGN_OR_RETURN(std::vector<AgentRecord> agents, store_->ListAgents());
  int gpus = 0;
  for (const AgentRecord& a : agents) {
    if (a.name == agent) gpus = a.gpus;
  }
  std::vector<TaskRecord> vanished;
  for (const TaskRecord& t : live) {
    if (t.agent_name != agent) continue;
    bool listed = std::any_of(running.begin(), running.end(),
                              [&](const rpc::TaskKey& k) { return SameTask(t, k); });
    if (listed) continue;
    PX_RETURN_IF_ERROR(load(t.job_id));
    if (t.state == TaskState::kAssigned && current(t.job_id, t.attempt)) {
      if (t.role == TaskRole::kPs) {
        // A hybrid job's shards start once the plan says the PS holds something.
        PX_ASSIGN_OR_RETURN(ShardNeed need, ShardsNeeded(*jobs[t.job_id], t.attempt));
        if (need != ShardNeed::kYes) continue;
      }
      PX_ASSIGN_OR_RETURN(rpc::TaskAssignment a,
                          Assignment(*jobs[t.job_id], t, OfAttempt(tasks_of[t.job_id], t.attempt),
                                     gpus));
      work.start.push_back(std::move(a));
    } else if (t.state == TaskState::kRunning && after_register) {
      TaskRecord lost = t;
      lost.state = TaskState::kLost;
      lost.message = "agent " + Quote(agent) +
                     " registered again without it: it ended while the agent was away, or the "
                     "agent's workdir no longer holds it";
      lost.updated = now;
      seen_again[{t.job_id, t.attempt}].second.push_back(TaskName(t.role, t.index));
      vanished.push_back(std::move(lost));
    } else if (t.state == TaskState::kAssigned && !current(t.job_id, t.attempt)) {
      // Never started, and its attempt is over: nothing to stop.
      TaskRecord dropped = t;
      dropped.state = TaskState::kKilled;
      dropped.message = "not started: the attempt ended first";
      dropped.updated = now;
      vanished.push_back(std::move(dropped));
    }
  }
  if (!vanished.empty()) PX_RETURN_IF_ERROR(store_->UpsertTasks(vanished));
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
    PX_RETURN_IF_ERROR(store_->AppendEvent(job_attempt.first, "agent", message, now).status());
  }
  return work;
}

Status Orchestrator::ApplyReports(const std::string& agent,
                                  const std::vector<rpc::TaskReport>& reports) {
  std::lock_guard<std::mutex> lock(mu_);
  const int64_t now = clock_->NowMillis();
  std::map<int64_t, std::vector<TaskRecord>> tasks_of;
  std::vector<TaskRecord> updates;
  for (const rpc::TaskReport& r : reports) {
    if (!tasks_of.count(r.key.job_id)) {
      StatusOr<std::vector<TaskRecord>> tasks = store_->ListTasks(r.key.job_id);
      if (tasks.status().code() == StatusCode::kNotFound) {
        PX_LOG(WARNING) << "agent \"" << agent << "\" reported a task of unknown job \""
                        << r.key.job_id << "\"";
        continue;
      }
      PX_RETURN_IF_ERROR(tasks.status());
      tasks_of[r.key.job_id] = std::move(tasks).value();
    }
    const TaskRecord* found = nullptr;
    for (const TaskRecord& t : tasks_of[r.key.job_id]) {
      if (SameTask(t, r.key)) found = &t;
    }
    if (found == nullptr || found->agent_name != agent) {
      PX_LOG(WARNING) << "agent \"" << agent << "\" reported a task it does not hold: job \""
                      << r.key.job_id << "\" attempt " << r.key.attempt;
      continue;
    }
    if (!IsLive(found->state)) continue;  // already ended: a late or repeated report
    TaskRecord t = *found;
    t.state = static_cast<TaskState>(r.state);
    if (t.state == TaskState::kAssigned) continue;
    t.exit_code = r.__isset.exit_code ? std::optional<int>(r.exit_code) : std::nullopt;
    t.signal = r.__isset.signal ? std::optional<int>(r.signal) : std::nullopt;
    t.message = r.__isset.message ? r.message : "";
    t.updated = now;
    if (!IsLive(t.state)) {
      PX_RETURN_IF_ERROR(
          store_->AppendEvent(t.job_id, "task",
                              "attempt " + std::to_string(t.attempt) + ": " + Outcome(t), now)
              .status());
    }
    updates.push_back(std::move(t));
  }
  if (updates.empty()) return Status::Ok();
  return store_->UpsertTasks(updates);
}

}  // namespace parallax::coordinator
