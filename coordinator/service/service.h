// CoordinatorService: the handler behind the Thrift `Coordinator` service
// (schemas/coordinator.thrift). It checks every request's header (protocol
// version, auth token), validates the request, and turns it into StateStore
// and Orchestrator calls. A Status becomes a rpc::CoordinatorError only here.
//
// Thread-safety: every method may be called concurrently from many
// connection threads. Blocking calls (KvGet, GetPlan, PollAssignments) wait
// on a condition variable with a deadline and never hold the store while
// waiting, so they cannot starve heartbeats.
//
// Submits and reads do not run the orchestrator: a submit is committed
// (group-committed with concurrent ones) and queued, a report is queued and
// answered once the pass that records it has committed, and the background
// loop (StartBackground) runs the orchestrator's passes,
// woken by those events and coalesced (events that arrive during a pass are
// handled by the next one), and once per heartbeat_flush_ms to find lost
// agents. Without the background loop (tests, tools) each event runs a
// pass on the caller's thread.
//
// Heartbeats never touch the database on the caller's path: the newest
// last-seen time of each agent is kept in memory and written in one batch
// per flush interval (FlushHeartbeats, or the background loop). A
// coordinator crash loses at most that interval of last-seen times, never a
// registration, job or event.
#ifndef PARALLAX_COORDINATOR_SERVICE_H_
#define PARALLAX_COORDINATOR_SERVICE_H_

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <thread>

#include "coordinator/orchestration/orchestrator.h"
#include "coordinator/orchestration/replan_monitor.h"
#include "coordinator/service/agent_registry.h"
#include "coordinator/service/consistency_switches.h"
#include "coordinator/service/shard_stats.h"
#include "coordinator/store/state_store.h"
#include "core/base/clock.h"
#include "parallax/status.h"
#include "schemas/Coordinator.h"
#include "schemas/coordinator_constants.h"
#include "schemas/kv_keys.h"

namespace parallax::coordinator {

struct ServiceOptions {
  // Shared secret every request must carry; empty accepts any token.
  std::string auth_token;
  // An agent whose last heartbeat is older than this is shown as not alive.
  int64_t agent_timeout_ms = 10'000;
  // The coordinator listens on loopback only (every agent is on its host):
  // when false, an agent registering loopback addresses gets a warning.
  bool listens_on_loopback = true;
  // Longest wait a blocking call may ask for; longer requests are capped.
  int64_t max_wait_ms = 300'000;
  // How often the background loop writes heartbeat times to the store and
  // looks for lost agents (events wake it in between).
  int64_t heartbeat_flush_ms = 1'000;
  // Request size limits (bytes): bigger requests are INVALID_ARGUMENT.
  size_t max_job_text_bytes = static_cast<size_t>(rpc::g_coordinator_constants.MAX_JOB_TEXT_BYTES);
  size_t max_kv_value_bytes = 1 << 20;  // --max-kv-value-bytes
  size_t max_plan_bytes = 16 << 20;
  // Count limits, so a client cannot fill the database or the scheduler:
  // a submit (or resume) past max_active_jobs PENDING/PLACING/RUNNING jobs,
  // and a new key past max_kv_entries_per_job keys under "job/<id>/" or
  // max_kv_global_entries keys outside any job's prefix, is
  // FAILED_PRECONDITION naming the flag that raises it. Checked before the
  // write, so concurrent requests may overshoot by the number of
  // connections. 0: no limit. (Keys of finished jobs are kept: the per-job
  // limit bounds each job, not the database.) A queued job costs the
  // coordinator a row and a few hundred bytes of memory, and a submit costs
  // the same however many are queued, so the job limit is a guard against a
  // runaway client, not a capacity limit.
  int64_t max_active_jobs = 100'000;          // --max-active-jobs
  int64_t max_kv_entries_per_job = 100'000;    // --max-kv-entries-per-job
  int64_t max_kv_global_entries = 100'000;     // --max-kv-global-entries
};

class CoordinatorService : public rpc::CoordinatorIf {
 public:
  // `store` and `clock` must outlive the service.
  CoordinatorService(StateStore* store, Clock* clock, ServiceOptions options);
  ~CoordinatorService() override;

  CoordinatorService(const CoordinatorService&) = delete;
  CoordinatorService& operator=(const CoordinatorService&) = delete;

  // Loads the orchestrator's state (agents, the queue, live jobs and their
  // tasks) from the store. Call once before serving.
  Status Init();
  // Starts the background loop. Stop() (or the destructor) joins it.
  void StartBackground();
  // Wakes every blocked call (they fail with UNAVAILABLE "shutting down"),
  // stops the loop and writes pending heartbeats.
  void Stop();
  // Writes pending heartbeat times to the store now.
  Status FlushHeartbeats();
  // Runs one whole orchestration pass now, lost agents included (what the
  // background loop does every heartbeat_flush_ms).
  void Reconcile();
  // The shared secret requests must carry ("" : none).
  const std::string& auth_token() const { return options_.auth_token; }

  // Every registered agent with its newest heartbeat time and whether it is
  // alive now (what ListAgents answers), for in-process readers such as the
  // web pages.
  StatusOr<std::vector<rpc::AgentInfo>> Agents();
  // The PS shards' newest counters (ReportShardStats).
  ShardStatsBoard& shard_stats() { return shard_stats_; }

  // rpc::CoordinatorIf
  void Hello(rpc::HelloResponse& out, const rpc::RequestHeader& header) override;
  void SubmitJob(rpc::JobInfo& out, const rpc::RequestHeader& header,
                 const rpc::SubmitJobRequest& request) override;
  void GetJob(rpc::JobInfo& out, const rpc::RequestHeader& header, int64_t job_id) override;
  void ListJobs(std::vector<rpc::JobInfo>& out, const rpc::RequestHeader& header,
                const rpc::ListJobsRequest& request) override;
  void CancelJob(rpc::JobInfo& out, const rpc::RequestHeader& header, int64_t job_id,
                 const std::string& reason) override;
  void ReplanJob(rpc::JobInfo& out, const rpc::RequestHeader& header, int64_t job_id,
                 const std::string& reason) override;
  void GetEvents(std::vector<rpc::Event>& out, const rpc::RequestHeader& header, int64_t job_id,
                 int64_t after_seq, int32_t limit) override;
  void RegisterAgent(const rpc::RequestHeader& header, const rpc::AgentInfo& agent) override;
  void Heartbeat(rpc::HeartbeatResponse& out, const rpc::RequestHeader& header,
                 const rpc::HeartbeatRequest& request) override;
  void ListAgents(std::vector<rpc::AgentInfo>& out, const rpc::RequestHeader& header) override;
  void DeregisterAgent(const rpc::RequestHeader& header, const std::string& agent_name,
                       const std::string& workdir_id) override;
  void PollAssignments(rpc::PollResponse& out, const rpc::RequestHeader& header,
                       const rpc::PollRequest& request) override;
  void ReportTasks(const rpc::RequestHeader& header, const std::string& agent_name,
                   const std::vector<rpc::TaskReport>& reports) override;
  void DrainAgent(const rpc::RequestHeader& header, const std::string& agent_name,
                  bool drain) override;
  void ResumeJob(rpc::JobInfo& out, const rpc::RequestHeader& header, int64_t job_id,
                 const rpc::ResumeOptions& options) override;
  void ListTasks(std::vector<rpc::TaskInfo>& out, const rpc::RequestHeader& header,
                 int64_t job_id) override;
  void PutPlan(const rpc::RequestHeader& header, const rpc::PutPlanRequest& request) override;
  void GetPlan(std::string& out, const rpc::RequestHeader& header, int64_t job_id,
               int32_t attempt, int64_t timeout_ms) override;
  void KvSet(const rpc::RequestHeader& header, const rpc::KvSetRequest& request) override;
  void KvGet(std::vector<std::string>& out, const rpc::RequestHeader& header,
             const rpc::KvGetRequest& request) override;
  int64_t KvAdd(const rpc::RequestHeader& header, const rpc::KvAddRequest& request) override;
  void ReportMetrics(const rpc::RequestHeader& header,
                     const std::vector<rpc::MetricPoint>& points) override;
  void GetMetrics(std::vector<rpc::MetricPoint>& out, const rpc::RequestHeader& header,
                  const rpc::GetMetricsRequest& request) override;
  void ReportShardStats(const rpc::RequestHeader& header,
                        const rpc::ShardStatsReport& report) override;
  void GetShardStats(std::vector<rpc::ShardStatsReport>& out, const rpc::RequestHeader& header,
                     int64_t job_id) override;
  void CommitCheckpoint(const rpc::RequestHeader& header,
                        const rpc::CheckpointInfo& checkpoint) override;
  void ListCheckpoints(std::vector<rpc::CheckpointInfo>& out, const rpc::RequestHeader& header,
                       int64_t job_id) override;
  // In service_consistency.cc (coordinator/service/consistency_switches.h).
  void SetConsistency(rpc::ConsistencySwitch& out, const rpc::RequestHeader& header,
                      int64_t job_id, const std::string& consistency) override;
  void LeaseConsistency(std::vector<rpc::ConsistencySwitch>& out, const rpc::RequestHeader& header,
                        const rpc::ConsistencyLeaseRequest& request) override;

 private:
  // Throws rpc::CoordinatorError unless the header's version and token are right.
  void CheckHeader(const rpc::RequestHeader& header) const;
  // Blocks until `ready()` holds (checked under wait_mu_), the deadline
  // passes, or the service stops. Returns whether `ready()` held.
  template <typename Ready>
  bool WaitFor(int64_t timeout_ms, Ready ready);
  // Wakes blocked KvGet/GetPlan calls after a change.
  void NotifyWaiters();
  // An event the orchestrator must act on: wakes the background loop, or
  // without one runs a pass now.
  void Wake();
  // One pass; `whole` adds lost agents and every live job.
  void RunPass(bool whole);
  void Loop();
  rpc::JobInfo JobInfoOf(const JobRecord& job, bool with_text);
  // Throws FENCED when `attempt` is older than the job's current attempt.
  void CheckAttempt(int64_t job_id, int attempt);
  // Whether a client may write `key` (`parsed` is its ParseKey): applies
  // CheckAttempt to an attempt's keys, and throws INVALID_ARGUMENT for the
  // keys only the coordinator writes.
  void CheckKey(const std::string& key, const kv_keys::ParsedKey& parsed);
  // Throws FAILED_PRECONDITION when `key` is new and the key-value limits
  // are reached. Returns whether `key` is a new key outside any job's prefix
  // (the caller counts it once written).
  bool CheckKvRoom(const std::string& key, const kv_keys::ParsedKey& parsed);
  // Throws FAILED_PRECONDITION when max_active_jobs jobs are live.
  void CheckJobRoom();

  // Constant after construction.
  StateStore* const store_;
  Clock* const clock_;
  const ServiceOptions options_;

  // Guards the in-memory agent registry: name -> newest heartbeat time, and
  // the names whose time has not been written yet.
  std::mutex agents_mu_;
  std::map<std::string, int64_t> last_seen_;  // GUARDED_BY(agents_mu_)
  std::map<std::string, int64_t> unflushed_;  // GUARDED_BY(agents_mu_)
  // Agents that registered and have not polled since.
  std::set<std::string> fresh_;  // GUARDED_BY(agents_mu_)
  // Workdir ids, clean stops and warnings of agents (thread-safe itself).
  AgentRegistry registry_;

  Orchestrator orchestrator_;
  ShardStatsBoard shard_stats_;
  ConsistencySwitches consistency_{store_};
  // Measured against predicted communication; re-planning (thread-safe).
  ReplanMonitor replan_{store_};

  // Blocking calls wait on wait_cv_; every change to kv or plans bumps
  // change_seq_ and notifies.
  std::mutex wait_mu_;
  std::condition_variable wait_cv_;
  uint64_t change_seq_ = 0;  // GUARDED_BY(wait_mu_)
  bool stopping_ = false;    // GUARDED_BY(wait_mu_)

  // Keys outside "job/<id>/" in the store: counted once in Init, then kept.
  std::atomic<int64_t> global_kv_keys_{0};

  // The background loop: woken by Wake(), or every heartbeat_flush_ms.
  std::mutex loop_mu_;
  std::condition_variable loop_cv_;
  bool wake_ = false;        // GUARDED_BY(loop_mu_)
  bool loop_stop_ = false;   // GUARDED_BY(loop_mu_)
  std::atomic<bool> background_{false};
  std::thread loop_;
};

}  // namespace parallax::coordinator

#endif  // PARALLAX_COORDINATOR_SERVICE_H_
