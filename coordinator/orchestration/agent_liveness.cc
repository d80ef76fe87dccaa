#include "coordinator/orchestration/agent_liveness.h"

#include "coordinator/orchestration/task_outcome.h"

namespace parallax::coordinator {
namespace {

// How a LostForSilence message starts; LostBySilence looks for it.
std::string SilentPrefix(const std::string& agent) {
  return "agent \"" + agent + "\" stopped heartbeating ";
}

}  // namespace

AgentLiveness::Transition AgentLiveness::Observe(const std::string& agent, int64_t last_seen,
                                                 int64_t now) {
  Transition t;
  auto lost = lost_since_.find(agent);
  if (now - last_seen <= timeout_ms_) {
    if (lost != lost_since_.end()) {
      t.kind = Transition::kReturned;
      t.silent_ms = last_seen - lost->second;
      lost_since_.erase(lost);
    }
    return t;
  }
  if (lost == lost_since_.end()) {
    t.kind = Transition::kLost;
    t.silent_ms = now - last_seen;
    lost_since_[agent] = last_seen;
  }
  return t;
}

std::string TransitionEvent(const std::string& agent, const AgentLiveness::Transition& change) {
  const std::string seconds = std::to_string(change.silent_ms / 1000);
  if (change.kind == AgentLiveness::Transition::kLost) {
    return "agent \"" + agent + "\" is lost: no heartbeat for " + seconds + " s";
  }
  return "agent \"" + agent + "\" is back after " + seconds +
         " s of silence (more than --agent-timeout-ms); it keeps only tasks of current attempts "
         "and reports how the others ended";
}

TaskRecord LostForSilence(TaskRecord task, const std::string& agent, int64_t silent_ms,
                          int64_t now) {
  task.state = TaskState::kLost;
  task.message = SilentPrefix(agent) + std::to_string(silent_ms / 1000) + " s ago";
  task.updated = now;
  return task;
}

bool LostBySilence(const TaskRecord& task) {
  return task.state == TaskState::kLost && task.message.rfind(SilentPrefix(task.agent_name), 0) == 0;
}

ListedTask ListedTaskVerdict(const std::optional<JobRecord>& job, const TaskRecord* record,
                             const std::string& agent) {
  if (!job || record == nullptr) return ListedTask::kStop;
  const bool live_job = job->state == JobState::kPlacing || job->state == JobState::kRunning;
  if (!live_job || record->attempt != job->attempt) return ListedTask::kStop;
  return IsLive(record->state) && record->agent_name == agent ? ListedTask::kKeep
                                                               : ListedTask::kStop;
}

std::optional<TaskRecord> LateFinalReport(const TaskRecord& record, const rpc::TaskReport& report,
                                          int64_t now) {
  if (!LostBySilence(record)) return std::nullopt;
  TaskRecord t = record;
  if (report.state == rpc::TaskState::EXITED && report.__isset.exit_code) {
    t.state = TaskState::kExited;
    t.exit_code = report.exit_code;
    t.signal.reset();
  } else if (report.state == rpc::TaskState::KILLED && report.__isset.signal) {
    t.state = TaskState::kKilled;
    t.signal = report.signal;
    t.exit_code.reset();
  } else {
    return std::nullopt;  // not a final report with an outcome: LOST stands
  }
  t.message = "reported after its agent was lost (" + record.message + ")" +
              (report.__isset.message && !report.message.empty() ? "\n" + report.message : "");
  t.updated = now;
  return t;
}

std::string LateReportEvent(const TaskRecord& corrected) {
  return "attempt " + std::to_string(corrected.attempt) + ": " + Outcome(corrected) +
         ", reported after its agent was lost (the job's state stands)";
}

}  // namespace parallax::coordinator
