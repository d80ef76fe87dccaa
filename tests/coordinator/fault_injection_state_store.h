// FaultInjectionStateStore: a StateStore that forwards every call to another
// one and makes chosen *write* calls fail, to test how callers behave when
// the database refuses a change (LevelDB's FaultInjectionTestEnv, for the
// StateStore seam).
//
// Writes are CreateJob, TransitionJob, RequeueJob, ReplaceJobText, AppendEvent, AddLostUpdates,
// UpsertAgent, TouchAgents,
// SetAgentDraining, StartAttempt, ApplyChanges, UpsertTask, UpsertTasks, PutPlan, KvSet, KvAdd,
// RecordMetrics and CommitCheckpoint.
// Every write is counted (failed ones too), starting at 1. A failed write
// returns UNAVAILABLE "injected fault" and is NOT forwarded, so the wrapped
// store is unchanged, as the StateStore contract promises for a failed call.
// Reads are always forwarded and never fail.
//
// Ownership: the wrapped store is not owned and must outlive the wrapper.
// Thread-safe: the counters are atomic; a concurrent FailNthWrite() races
// only with the writes it is meant to count.
#ifndef PARALLAX_TESTS_COORDINATOR_FAULT_INJECTION_STATE_STORE_H_
#define PARALLAX_TESTS_COORDINATOR_FAULT_INJECTION_STATE_STORE_H_

#include <atomic>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "coordinator/store/state_store.h"
#include "parallax/status.h"

namespace parallax::coordinator {

class FaultInjectionStateStore : public StateStore {
 public:
  explicit FaultInjectionStateStore(StateStore* base) : base_(base) {}

  // The n-th write from now on (1: the next one) fails; the writes before and
  // after it pass. n <= 0 cancels a pending failure.
  void FailNthWrite(int n) { fail_at_.store(n > 0 ? writes_seen_.load() + n : 0); }
  // While on, every write fails.
  void FailAllWrites(bool fail) { fail_all_.store(fail); }

  // Writes seen so far, failed ones included.
  int64_t writes_seen() const { return writes_seen_.load(); }
  // Writes failed on purpose so far.
  int64_t writes_failed() const { return writes_failed_.load(); }

  // ---- Writes: may fail ----
  StatusOr<JobRecord> CreateJob(const NewJob& job, int64_t now) override {
    PX_RETURN_IF_ERROR(MaybeFail());
    return base_->CreateJob(job, now);
  }
  StatusOr<JobRecord> TransitionJob(int64_t job_id, JobState to, const std::string& reason,
                                    int64_t now) override {
    PX_RETURN_IF_ERROR(MaybeFail());
    return base_->TransitionJob(job_id, to, reason, now);
  }
  StatusOr<JobRecord> RequeueJob(int64_t job_id, const std::string& reason,
                                 int64_t now) override {
    PX_RETURN_IF_ERROR(MaybeFail());
    return base_->RequeueJob(job_id, reason, now);
  }
  Status ReplaceJobText(int64_t job_id, const std::string& job_text, const std::string& job_path,
                        int workers, const std::string& what, int64_t now) override {
    PX_RETURN_IF_ERROR(MaybeFail());
    return base_->ReplaceJobText(job_id, job_text, job_path, workers, what, now);
  }
  StatusOr<int64_t> AppendEvent(int64_t job_id, const std::string& kind, const std::string& message,
                                int64_t now) override {
    PX_RETURN_IF_ERROR(MaybeFail());
    return base_->AppendEvent(job_id, kind, message, now);
  }
  Status AddLostUpdates(int64_t job_id, int64_t lost, const std::string& message,
                        int64_t now) override {
    PX_RETURN_IF_ERROR(MaybeFail());
    return base_->AddLostUpdates(job_id, lost, message, now);
  }
  Status UpsertAgent(const AgentRecord& agent, int64_t now) override {
    PX_RETURN_IF_ERROR(MaybeFail());
    return base_->UpsertAgent(agent, now);
  }
  StatusOr<int> TouchAgents(const std::vector<std::pair<std::string, int64_t>>& seen) override {
    PX_RETURN_IF_ERROR(MaybeFail());
    return base_->TouchAgents(seen);
  }
  Status SetAgentDraining(const std::string& name, bool draining, int64_t now) override {
    PX_RETURN_IF_ERROR(MaybeFail());
    return base_->SetAgentDraining(name, draining, now);
  }
  StatusOr<JobRecord> StartAttempt(int64_t job_id, const std::vector<TaskRecord>& tasks,
                                   const std::string& message, int64_t now) override {
    PX_RETURN_IF_ERROR(MaybeFail());
    return base_->StartAttempt(job_id, tasks, message, now);
  }
  StatusOr<std::vector<JobRecord>> ApplyChanges(const StateChanges& changes,
                                                int64_t now) override {
    PX_RETURN_IF_ERROR(MaybeFail());
    return base_->ApplyChanges(changes, now);
  }
  using StateStore::UpsertTasks;
  Status UpsertTasks(const std::vector<TaskRecord>& tasks,
                     const std::vector<NewEvent>& events) override {
    PX_RETURN_IF_ERROR(MaybeFail());
    return base_->UpsertTasks(tasks, events);
  }
  Status UpsertTask(const TaskRecord& task) override {
    PX_RETURN_IF_ERROR(MaybeFail());
    return base_->UpsertTask(task);
  }
  Status PutPlan(int64_t job_id, int attempt, const std::string& plan_json, int64_t now) override {
    PX_RETURN_IF_ERROR(MaybeFail());
    return base_->PutPlan(job_id, attempt, plan_json, now);
  }
  Status KvSet(const std::string& key, const std::string& value, int64_t now) override {
    PX_RETURN_IF_ERROR(MaybeFail());
    return base_->KvSet(key, value, now);
  }
  StatusOr<int64_t> KvAdd(const std::string& key, int64_t delta, int64_t now) override {
    PX_RETURN_IF_ERROR(MaybeFail());
    return base_->KvAdd(key, delta, now);
  }
  Status RecordMetrics(const std::vector<MetricRecord>& points, int64_t now) override {
    PX_RETURN_IF_ERROR(MaybeFail());
    return base_->RecordMetrics(points, now);
  }
  Status CommitCheckpoint(const CheckpointRecord& checkpoint, int64_t now) override {
    PX_RETURN_IF_ERROR(MaybeFail());
    return base_->CommitCheckpoint(checkpoint, now);
  }

  // ---- Reads: always forwarded ----
  StatusOr<JobRecord> GetJob(int64_t job_id) override { return base_->GetJob(job_id); }
  StatusOr<std::vector<JobRecord>> ListJobs(const JobFilter& filter) override {
    return base_->ListJobs(filter);
  }
  StatusOr<std::map<JobState, int64_t>> CountJobs() override { return base_->CountJobs(); }
  StatusOr<std::vector<EventRecord>> ListEvents(int64_t job_id, int64_t after_seq,
                                                int limit) override {
    return base_->ListEvents(job_id, after_seq, limit);
  }
  StatusOr<std::vector<AgentRecord>> ListAgents() override { return base_->ListAgents(); }
  StatusOr<std::vector<TaskRecord>> ListTasks(int64_t job_id) override {
    return base_->ListTasks(job_id);
  }
  StatusOr<std::vector<TaskRecord>> ListLiveTasks() override { return base_->ListLiveTasks(); }
  StatusOr<std::optional<std::string>> GetPlan(int64_t job_id, int attempt) override {
    return base_->GetPlan(job_id, attempt);
  }
  StatusOr<std::optional<std::string>> KvGet(const std::string& key) override {
    return base_->KvGet(key);
  }
  StatusOr<int64_t> KvCount(const std::string& prefix) override { return base_->KvCount(prefix); }
  StatusOr<std::vector<MetricRecord>> ListMetrics(int64_t job_id, int64_t after_step,
                                                  int limit) override {
    return base_->ListMetrics(job_id, after_step, limit);
  }
  StatusOr<std::vector<CheckpointRecord>> ListCheckpoints(int64_t job_id) override {
    return base_->ListCheckpoints(job_id);
  }

 private:
  // Counts one write and says whether it must fail.
  Status MaybeFail() {
    const int64_t n = ++writes_seen_;
    if (fail_all_.load() || n == fail_at_.load()) {
      ++writes_failed_;
      return Unavailable("injected fault");
    }
    return Status::Ok();
  }

  StateStore* const base_;
  std::atomic<int64_t> writes_seen_{0};
  std::atomic<int64_t> writes_failed_{0};
  std::atomic<int64_t> fail_at_{0};  // absolute write number that fails; 0: none
  std::atomic<bool> fail_all_{false};
};

}  // namespace parallax::coordinator

#endif  // PARALLAX_TESTS_COORDINATOR_FAULT_INJECTION_STATE_STORE_H_
