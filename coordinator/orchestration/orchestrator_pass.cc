// The orchestrator's passes: reports, lost agents, job moves from their
// tasks' states, and placement of the queue, written in one transaction.
// Events are in orchestrator.cc.
#include <algorithm>
#include <utility>

#include "coordinator/orchestration/agent_liveness.h"
#include "coordinator/orchestration/orchestrator.h"
#include "coordinator/orchestration/orchestrator_internal.h"
#include "coordinator/orchestration/partition_trials.h"
#include "coordinator/orchestration/resize.h"
#include "coordinator/orchestration/shard_recovery.h"
#include "core/base/logging.h"

namespace parallax::coordinator {

using namespace orchestrator_internal;

StatusOr<bool> Orchestrator::Reconcile(const std::map<std::string, int64_t>* last_seen) {
  std::lock_guard<std::mutex> pass_lock(pass_mu_);
  bool changed = false;
  // A job that moves may free slots for the queue, a job restarted returns
  // to it, and at most kMaxAttemptsPerPass jobs start per pass: a few rounds,
  // then what is left waits for the next pass.
  for (int round = 0; round < 4; ++round) {
    std::lock_guard<std::mutex> lock(mu_);
    Pass pass;
    DrainInbox();
    if (placement_recheck_at_ > 0 && clock_->NowMillis() >= placement_recheck_at_) {
      placement_recheck_at_ = 0;  // an elastic job's replacement wait is over
      placement_dirty_ = true;
    }
    TakeReports(&pass);
    if (last_seen != nullptr && round == 0) {
      MarkLostAgents(*last_seen, &pass);
      for (const auto& [id, job] : view_.live()) dirty_.insert(id);
    }
    std::set<int64_t> dirty;
    dirty.swap(dirty_);
    for (int64_t id : dirty) {
      if (Status s = AdvanceJob(id, &pass); !s.ok()) {
        // Nothing of this pass is written: take it all again from the store.
        FinishReports(pass.reports_through, s);
        if (Status reload = Load(); !reload.ok()) PX_LOG(ERROR) << reload.ToString();
        return s;
      }
    }
    if (Status s = PlacePending(&pass); !s.ok()) {
      FinishReports(pass.reports_through, s);
      if (Status reload = Load(); !reload.ok()) PX_LOG(ERROR) << reload.ToString();
      return s;
    }
    const bool wrote = !pass.changes.empty();
    PX_RETURN_IF_ERROR(Commit(&pass));
    changed |= wrote;
    if (dirty_.empty() && !placement_dirty_) break;
  }
  return changed;
}

Status Orchestrator::Commit(Pass* pass) {
  const int64_t now = clock_->NowMillis();
  std::vector<JobRecord> records;
  if (!pass->changes.empty()) {
    StatusOr<std::vector<JobRecord>> written = store_->ApplyChanges(pass->changes, now);
    if (!written.ok()) {
      // What this pass applied in memory is not in the store: take the
      // memory from the store again, and let the reporters retry.
      FinishReports(pass->reports_through, written.status());
      if (Status reload = Load(); !reload.ok()) PX_LOG(ERROR) << reload.ToString();
      return written.status();
    }
    records = std::move(written).value();
  }
  const size_t transitions = pass->changes.transitions.size();
  for (size_t i = 0; i < records.size(); ++i) {
    if (i < transitions) {
      ApplyJob(records[i], pass->transition_configs[i]);
      continue;
    }
    ApplyJob(records[i], pass->attempt_configs[i - transitions]);
    // A new attempt: its tasks, and the agents that start them.
    std::set<std::string> agents;
    for (TaskRecord t : pass->changes.attempts[i - transitions].tasks) {
      t.job_id = records[i].id;
      t.attempt = records[i].attempt;
      t.updated = now;
      view_.PutTask(t);
      agents.insert(t.agent_name);
    }
    for (const std::string& a : agents) WakeAgent(a);
  }
  FinishReports(pass->reports_through, Status::Ok());
  if (pass->placed) {
    std::lock_guard<std::mutex> lock(status_mu_);
    waiting_for_ = std::move(pass->reasons);
    blocked_by_ = pass->blocked_by;
  }
  return Status::Ok();
}

void Orchestrator::MarkLostAgents(const std::map<std::string, int64_t>& last_seen, Pass* pass) {
  const int64_t now = clock_->NowMillis();
  for (auto& [name, a] : view_.agents()) {
    if (a.record.address.empty()) continue;  // known only from a task: never registered
    int64_t seen = a.record.last_seen;
    auto it = last_seen.find(name);
    if (it != last_seen.end()) seen = std::max(seen, it->second);
    // The state machine and its rules: coordinator/orchestration/agent_liveness.h.
    const AgentLiveness::Transition change = liveness_.Observe(name, seen, now);
    if (change.kind != AgentLiveness::Transition::kNone) {
      pass->changes.events.push_back({0, "agent", TransitionEvent(name, change), now});
    }
    // The view's flag follows the state machine: lost, the agent's slots
    // leave placement; back, it takes tasks again.
    const bool lost = liveness_.IsLost(name);
    if (lost != a.lost) placement_dirty_ = true;
    a.lost = lost;
    if (!lost) continue;
    std::vector<TaskRecord> orphaned;
    for (const TaskId& id : a.tasks) {
      orphaned.push_back(LostForSilence(*view_.FindTask(id), name, now - seen, now));
    }
    pass->changes.tasks.insert(pass->changes.tasks.end(), orphaned.begin(), orphaned.end());
    ApplyTasks(orphaned);
  }
}

void Orchestrator::Transition(const LiveJob& job, JobState to, const std::string& reason,
                              Pass* pass) {
  pass->changes.transitions.push_back({job.record.id, to, reason});
  pass->transition_configs.push_back(job.config);
  pass->moved.insert(job.record.id);
}

Status Orchestrator::AdvanceJob(int64_t job_id, Pass* pass) {
  LiveJob* live = view_.FindLive(job_id);
  if (live == nullptr || pass->moved.count(job_id)) return Status::Ok();
  const JobRecord& job = live->record;
  const int64_t now = clock_->NowMillis();
  std::vector<const TaskRecord*> tasks = view_.AttemptTasks(job_id, job.attempt);
  if (tasks.empty()) return Status::Ok();
  // Shards wait for the plan (WorkFor); when it puts nothing on the PS they
  // are never launched.
  std::vector<TaskRecord> skipped;
  for (const TaskRecord* t : tasks) {
    if (t->role == TaskRole::kPs && t->state == TaskState::kAssigned) skipped.push_back(*t);
  }
  if (!skipped.empty()) {
    PX_ASSIGN_OR_RETURN(ShardNeed need, ShardsNeeded(*live));
    if (need == ShardNeed::kNo) {
      for (TaskRecord& t : skipped) {
        t.state = TaskState::kExited;
        t.exit_code = 0;
        t.message = kShardNotLaunched;
        t.updated = now;
        pass->changes.tasks.push_back(t);
        view_.PutTask(t);
      }
      pass->changes.events.push_back({job_id, "plan",
                                      "attempt " + std::to_string(job.attempt) +
                                          ": the plan puts no variable on the PS; " +
                                          std::to_string(skipped.size()) +
                                          " PS shard(s) not launched",
                                      now});
      placement_dirty_ = true;
      tasks = view_.AttemptTasks(job_id, job.attempt);
    }
  }
  bool all_started = true, trainers_done = true;
  int trainers = 0, launched = 0;
  for (const TaskRecord* t : tasks) {
    if (t->state == TaskState::kAssigned) all_started = false;
    if (t->role == TaskRole::kTrainer) {
      ++trainers;
      if (!(t->state == TaskState::kExited && t->exit_code.value_or(-1) == 0)) {
        trainers_done = false;
      }
    }
    launched += !IsNotLaunched(*t);
  }
  if (RestartShards(*live, tasks, pass)) tasks = view_.AttemptTasks(job_id, job.attempt);
  std::optional<TaskRecord> failed;
  if (const TaskRecord* first = FirstFailure(tasks)) failed = *first;
  // A partition-search trial ends on its own terms (coordinator/orchestration/partition_trials.h),
  // written at once: rare, and it reads what it writes.
  if (live->config) {
    PX_ASSIGN_OR_RETURN(bool trial_over,
                        EndTrialIfOver(store_, job, *live->config,
                                       failed ? Outcome(*failed) : "", trainers_done, now));
    if (trial_over) {
      PX_ASSIGN_OR_RETURN(JobRecord requeued, store_->GetJob(job_id));
      ApplyJob(requeued, live->config);
      return Status::Ok();
    }
  }
  if (trainers_done) {
    if (job.state == JobState::kPlacing) Transition(*live, JobState::kRunning, "", pass);
    Transition(*live, JobState::kSucceeded,
               "all " + std::to_string(trainers) + " trainers exited with code 0", pass);
    return Status::Ok();
  }
  if (failed) {
    const int max_restarts = live->config ? live->config->job.max_restarts : 0;
    const std::string what = Outcome(*failed);
    if (job.restarts < max_restarts) {
      Transition(*live, JobState::kPending,
                 "restart " + std::to_string(job.restarts + 1) + " of " +
                     std::to_string(max_restarts) + ": " + what,
                 pass);
      return Status::Ok();
    }
    std::string reason = what;
    if (max_restarts > 0) {
      reason += " (after " + std::to_string(job.restarts) +
                " restart(s); max_restarts = " + std::to_string(max_restarts) + ")";
    }
    if (!failed->message.empty() && failed->state != TaskState::kLost) {
      reason += "; last log lines:\n" + failed->message;
    }
    Transition(*live, JobState::kFailed, reason, pass);
    return Status::Ok();
  }
  if (job.state == JobState::kPlacing && all_started) {
    Transition(*live, JobState::kRunning, "all " + std::to_string(launched) + " tasks started",
               pass);
    return Status::Ok();
  }
  if (live->checkpointed_step >= 0 && job.state == JobState::kRunning) {
    PX_ASSIGN_OR_RETURN(bool replanned, MaybeReplan(*live, now));
    if (replanned) return Status::Ok();
    PX_ASSIGN_OR_RETURN(bool grown, MaybeGrow(*live, now));
    if (grown) return Status::Ok();
  }
  return Status::Ok();
}

bool Orchestrator::RestartShards(const LiveJob& live, const std::vector<const TaskRecord*>& tasks,
                                 Pass* pass) {
  if (!live.config) return false;
  ShardRecoveryContext context;
  for (const TaskRecord* t : tasks) {
    if (t->role == TaskRole::kTrainer && IsFailed(*t)) context.trainer_failed = true;
  }
  const int64_t now = clock_->NowMillis();
  std::vector<TaskRecord> restarted;
  for (const TaskRecord* t : tasks) {
    if (t->role != TaskRole::kPs || !IsFailed(*t)) continue;
    const AgentView* agent = view_.FindAgent(t->agent_name);
    context.agent_available =
        agent != nullptr && agent->here && !agent->lost && !agent->record.draining;
    const ShardRecoveryDecision d = DecideShardRecovery(*live.config, *t, context);
    if (!d.restart) {
      if (!d.why_not.empty()) {
        PX_LOG(INFO) << "job \"" << t->job_id << "\": " << TaskName(t->role, t->index)
                     << " is not started again alone: " << d.why_not;
      }
      continue;
    }
    pass->changes.events.push_back({t->job_id, "shard", ShardRestartEvent(*t, d.generation), now});
    TaskRecord next = *t;
    next.state = TaskState::kAssigned;
    next.exit_code.reset();
    next.signal.reset();
    next.message.clear();
    next.generation = d.generation;
    next.updated = now;
    restarted.push_back(std::move(next));
  }
  if (restarted.empty()) return false;
  pass->changes.tasks.insert(pass->changes.tasks.end(), restarted.begin(), restarted.end());
  ApplyTasks(restarted);
  for (const TaskRecord& t : restarted) WakeAgent(t.agent_name);
  return true;
}

Capacity Orchestrator::FreeCapacity() {
  Capacity capacity;
  for (const auto& [name, a] : view_.agents()) {
    if (a.here && !a.lost && !a.record.draining) {
      int shards = 0;
      for (const TaskId& t : a.tasks) shards += t.role == TaskRole::kPs ? 1 : 0;
      capacity.Set({name, a.record.slots, a.record.slots - a.trainers, a.record.ps_host, shards});
    }
  }
  return capacity;
}

StatusOr<bool> Orchestrator::MaybeGrow(LiveJob& live, int64_t now) {
  const int64_t step = live.checkpointed_step;
  live.checkpointed_step = -1;
  if (!live.config) return false;
  const int current = Layout(live).world;
  const int target = GrowTo(*live.config, current, FreeCapacity().free_slots());
  if (target == 0) return false;
  const int64_t id = live.record.id;
  const std::string reason = "elastic: grows from " + std::to_string(current) + " to " +
                             std::to_string(target) + " of " +
                             std::to_string(live.config->job.workers) +
                             " workers: slots are free again; the next attempt resumes from the "
                             "checkpoint of step " + std::to_string(step);
  // Written at once, like a trial's end: rare, and not counted as a restart.
  PX_RETURN_IF_ERROR(store_->AppendEvent(id, "elastic", reason, now).status());
  PX_ASSIGN_OR_RETURN(JobRecord requeued, store_->RequeueJob(id, reason, now));
  ApplyJob(requeued, live.config);
  return true;
}

Status Orchestrator::PlacePending(Pass* pass) {
  if (!placement_dirty_) return Status::Ok();
  placement_dirty_ = false;
  pass->placed = true;
  Capacity capacity = FreeCapacity();
  const int64_t now = clock_->NowMillis();
  int started = 0;
  for (const auto& [id, job] : view_.pending()) {
    if (pass->moved.count(id)) continue;
    if (!job.invalid.empty()) {
      pass->changes.transitions.push_back(
          {id, JobState::kFailed, "the stored job file is not valid: " + job.invalid});
      pass->transition_configs.push_back(nullptr);
      pass->moved.insert(id);
      continue;
    }
    if (view_.LiveTaskCount(id) > 0) {
      pass->reasons[id] =
          "waiting for the tasks of attempt " + std::to_string(job.attempt) + " to stop";
      pass->blocked_by = id;
      break;
    }
    if (started == kMaxAttemptsPerPass) {
      placement_dirty_ = true;  // the next round goes on from here
      break;
    }
    PlacementRequest request;
    request.workers = job.workers;
    request.shards = job.shards;
    request.ps_hosts = job.ps_hosts;
    if (job.previous) {
      request.previous = *job.previous;
    } else if (job.attempt > 0) {
      PX_ASSIGN_OR_RETURN(std::vector<TaskRecord> all, store_->ListTasks(id));
      for (const TaskRecord& t : all) {  // by attempt, then trainers by index
        if (t.attempt == job.attempt && t.role == TaskRole::kTrainer) {
          request.previous.push_back(t.agent_name);
        }
      }
    }
    Placement p = PlaceJobIn(request, capacity);
    std::string elastic;
    if (p.fit != Placement::Fit::kPlaced) {
      // An elastic job goes on with fewer workers (coordinator/orchestration/resize.h).
      const ElasticChoice choice = ChooseElasticWorkers(job, capacity.free_slots(), now);
      if (choice.workers > 0) {
        request.workers = choice.workers;
        p = PlaceJobIn(request, capacity);
        elastic = choice.reason;
      } else if (!choice.reason.empty()) {
        p.reason += "; " + choice.reason;
      }
      if (choice.recheck_at > 0 &&
          (placement_recheck_at_ == 0 || choice.recheck_at < placement_recheck_at_)) {
        placement_recheck_at_ = choice.recheck_at;
      }
    }
    if (p.fit != Placement::Fit::kPlaced) {
      pass->reasons[id] = p.reason;
      if (p.fit == Placement::Fit::kWait) {
        pass->blocked_by = id;
        break;
      }
      continue;
    }
    PX_RETURN_IF_ERROR(StartJob(job, p, elastic, pass));
    std::map<std::string, int> per_agent;
    for (const std::string& a : p.trainer_agents) ++per_agent[a];
    for (const auto& [name, n] : per_agent) capacity.Take(name, n);
    for (const std::string& a : p.ps_agents) capacity.AddShards(a, 1);
    ++started;
  }
  return Status::Ok();
}

Status Orchestrator::StartJob(const PendingJob& pending, const Placement& p,
                              const std::string& elastic, Pass* pass) {
  const int64_t now = clock_->NowMillis();
  // The job's text: the queue keeps only what placement needs.
  PX_ASSIGN_OR_RETURN(JobRecord job, store_->GetJob(pending.id));
  StatusOr<std::shared_ptr<const JobConfig>> parsed = store_->ParsedConfig(job);
  if (!parsed.ok()) {
    pass->changes.transitions.push_back(
        {job.id, JobState::kFailed,
         "the stored job file is not valid: " + parsed.status().message()});
    pass->transition_configs.push_back(nullptr);
    pass->moved.insert(job.id);
    return Status::Ok();
  }
  std::shared_ptr<const JobConfig> config = std::move(parsed).value();
  NewAttempt attempt;
  attempt.job_id = job.id;
  std::map<std::string, int> per_agent;
  for (size_t r = 0; r < p.trainer_agents.size(); ++r) {
    TaskRecord t;
    t.role = TaskRole::kTrainer;
    t.index = static_cast<int>(r);
    t.agent_name = p.trainer_agents[r];
    t.state = TaskState::kAssigned;
    attempt.tasks.push_back(t);
    ++per_agent[t.agent_name];
  }
  for (size_t s = 0; s < p.ps_agents.size(); ++s) {
    TaskRecord t;
    t.role = TaskRole::kPs;
    t.index = static_cast<int>(s);
    t.agent_name = p.ps_agents[s];
    t.state = TaskState::kAssigned;
    attempt.tasks.push_back(t);
  }
  attempt.message = "trainers on";
  for (const auto& [name, n] : per_agent) {
    attempt.message += " " + Quote(name) + "×" + std::to_string(n);
  }
  if (!p.ps_agents.empty()) {
    attempt.message += ", " + std::to_string(p.ps_agents.size()) + " PS shard(s)";
  }
  // The partition search publishes the attempt's settings before it starts
  // (written at once; a start that then fails runs the same trial again).
  PX_ASSIGN_OR_RETURN(AttemptStart kind, BeginAttempt(store_, job, *config,
                                                      static_cast<int>(p.ps_agents.size()), now));
  if (!kind.message.empty()) attempt.message += "; " + kind.message;
  if (!elastic.empty()) pass->changes.events.push_back({job.id, "elastic", elastic, now});
  pass->changes.attempts.push_back(std::move(attempt));
  pass->attempt_configs.push_back(std::move(config));
  pass->moved.insert(job.id);
  return Status::Ok();
}

}  // namespace parallax::coordinator
