#include "coordinator/orchestration/cluster_view.h"

#include <climits>
#include <utility>

namespace parallax::coordinator {
namespace {

TaskId First(int64_t job_id, int attempt = INT_MIN) {
  return {job_id, attempt, TaskRole::kTrainer, INT_MIN};
}

}  // namespace

AgentView& ClusterView::PutAgent(const AgentRecord& record) {
  AgentView& a = agents_[record.name];
  a.record = record;
  return a;
}

AgentView* ClusterView::FindAgent(const std::string& name) {
  auto it = agents_.find(name);
  return it == agents_.end() ? nullptr : &it->second;
}

LiveJob& ClusterView::PutLive(LiveJob job) {
  const int64_t id = job.record.id;
  LiveJob& slot = live_[id];
  const bool new_attempt = slot.record.attempt != job.record.attempt;
  slot = std::move(job);
  if (new_attempt) DropEnded(id);
  return slot;
}

LiveJob* ClusterView::FindLive(int64_t id) {
  auto it = live_.find(id);
  return it == live_.end() ? nullptr : &it->second;
}

void ClusterView::EraseLive(int64_t id) {
  live_.erase(id);
  DropEnded(id);
}

bool ClusterView::Keep(const TaskRecord& t) const {
  if (IsLive(t.state)) return true;
  auto it = live_.find(t.job_id);
  return it != live_.end() && it->second.record.attempt == t.attempt;
}

void ClusterView::Index(const TaskRecord& t) {
  if (!IsLive(t.state)) return;
  AgentView& a = agents_[t.agent_name];
  if (a.record.name.empty()) a.record.name = t.agent_name;  // a task outlives its agent's record
  a.tasks.insert(IdOf(t));
  if (t.role == TaskRole::kTrainer) ++a.trainers;
  ++live_tasks_of_[t.job_id];
}

void ClusterView::Unindex(const TaskRecord& t) {
  if (!IsLive(t.state)) return;
  AgentView& a = agents_[t.agent_name];
  a.tasks.erase(IdOf(t));
  if (t.role == TaskRole::kTrainer) --a.trainers;
  if (--live_tasks_of_[t.job_id] <= 0) live_tasks_of_.erase(t.job_id);
}

void ClusterView::PutTask(const TaskRecord& task) {
  const TaskId id = IdOf(task);
  auto it = tasks_.find(id);
  if (it != tasks_.end()) {
    Unindex(it->second);
    tasks_.erase(it);
  }
  if (!Keep(task)) return;
  tasks_.emplace(id, task);
  Index(task);
}

const TaskRecord* ClusterView::FindTask(const TaskId& id) const {
  auto it = tasks_.find(id);
  return it == tasks_.end() ? nullptr : &it->second;
}

std::vector<const TaskRecord*> ClusterView::AttemptTasks(int64_t job_id, int attempt) const {
  std::vector<const TaskRecord*> out;
  for (auto it = tasks_.lower_bound(First(job_id, attempt));
       it != tasks_.end() && it->first.job_id == job_id && it->first.attempt == attempt; ++it) {
    out.push_back(&it->second);
  }
  return out;
}

std::vector<const TaskRecord*> ClusterView::LiveTasksOf(int64_t job_id) const {
  std::vector<const TaskRecord*> out;
  if (!live_tasks_of_.count(job_id)) return out;
  for (auto it = tasks_.lower_bound(First(job_id)); it != tasks_.end() && it->first.job_id == job_id;
       ++it) {
    if (IsLive(it->second.state)) out.push_back(&it->second);
  }
  return out;
}

int ClusterView::LiveTaskCount(int64_t job_id) const {
  auto it = live_tasks_of_.find(job_id);
  return it == live_tasks_of_.end() ? 0 : it->second;
}

void ClusterView::DropEnded(int64_t job_id) {
  for (auto it = tasks_.lower_bound(First(job_id)); it != tasks_.end() && it->first.job_id == job_id;) {
    it = Keep(it->second) ? std::next(it) : tasks_.erase(it);
  }
}

}  // namespace parallax::coordinator
