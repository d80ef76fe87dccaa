#include "coordinator/service/service.h"

#include <algorithm>
#include <chrono>
#include <optional>
#include <utility>

#include "coordinator/orchestration/resize.h"
#include "coordinator/orchestration/task_outcome.h"
#include "coordinator/service/lost_updates.h"
#include "core/base/logging.h"
#include "core/config/job_config.h"
#include "core/rpc/request_header.h"
#include "schemas/coordinator_constants.h"
#include "schemas/kv_keys.h"

namespace parallax::coordinator {
namespace {

constexpr char kServerVersion[] = "0.1.0";

// How long ReportTasks waits for the pass that records its reports; an
// agent's call times out after 10 s and it reports again.
constexpr int64_t kReportWaitMs = 30'000;

[[noreturn]] void Throw(rpc::ErrorCode::type code, std::string message) {
  rpc::CoordinatorError error;
  error.code = code;
  error.message = std::move(message);
  throw error;
}

// Throws the Status as a CoordinatorError unless it is OK.
void ThrowIfError(const Status& status) {
  if (!status.ok()) throw ToCoordinatorError(status);
}

template <typename T>
T ValueOrThrow(StatusOr<T> result) {
  ThrowIfError(result.status());
  return std::move(result).value();
}

void RequireJobId(int64_t job_id) {
  if (job_id <= 0) {
    Throw(rpc::ErrorCode::INVALID_ARGUMENT,
          "job id must be a positive integer, got " + std::to_string(job_id));
  }
}

rpc::JobInfo ToJobInfo(const JobRecord& job, bool with_text, const std::string& waiting_for) {
  rpc::JobInfo info;
  info.id = job.id;
  info.name = job.name;
  info.state = static_cast<rpc::JobState::type>(job.state);
  info.workers = job.workers;
  info.step = job.step;
  info.created = job.created;
  info.updated = job.updated;
  info.attempt = job.attempt;
  if (!job.reason.empty()) info.__set_reason(job.reason);
  if (!job.job_path.empty()) info.__set_job_path(job.job_path);
  if (!job.submitted_by.empty()) info.__set_submitted_by(job.submitted_by);
  if (with_text) info.__set_job_text(job.job_text);
  if (!waiting_for.empty() && job.state == JobState::kPending) info.__set_waiting_for(waiting_for);
  return info;
}

std::string ClientName(const rpc::RequestHeader& header) {
  return header.__isset.client && !header.client.empty() ? header.client : "unknown client";
}

}  // namespace

CoordinatorService::CoordinatorService(StateStore* store, Clock* clock, ServiceOptions options)
    : store_(store),
      clock_(clock),
      options_(std::move(options)),
      registry_(options_.listens_on_loopback),
      orchestrator_(store, clock, OrchestratorOptions{options_.agent_timeout_ms}) {}

rpc::JobInfo CoordinatorService::JobInfoOf(const JobRecord& job, bool with_text) {
  return ToJobInfo(job, with_text, orchestrator_.WaitingFor(job.id));
}

void CoordinatorService::Reconcile() { RunPass(/*whole=*/true); }

void CoordinatorService::RunPass(bool whole) {
  std::map<std::string, int64_t> seen;
  if (whole) {
    std::lock_guard<std::mutex> lock(agents_mu_);
    seen = last_seen_;
  }
  StatusOr<bool> changed = orchestrator_.Reconcile(whole ? &seen : nullptr);
  if (!changed.ok()) {
    PX_LOG(WARNING) << "reconcile: " << changed.status().ToString();
  } else if (*changed) {
    NotifyWaiters();  // a pass may publish keys (the partition search's)
  }
}

void CoordinatorService::Wake() {
  if (!background_) {
    RunPass(/*whole=*/true);
    return;
  }
  {
    std::lock_guard<std::mutex> lock(loop_mu_);
    wake_ = true;
  }
  loop_cv_.notify_one();
}

void CoordinatorService::CheckAttempt(int64_t job_id, int attempt) {
  JobRecord job = ValueOrThrow(store_->GetJob(job_id));
  if (attempt < job.attempt) {
    Throw(rpc::ErrorCode::FENCED,
          "attempt " + std::to_string(attempt) + " of job " + std::to_string(job_id) +
              " is over (the job is at attempt " + std::to_string(job.attempt) +
              "); this process belongs to a stopped attempt and must exit");
  }
}

void CoordinatorService::CheckKey(const std::string& key, const kv_keys::ParsedKey& parsed) {
  if (parsed.scope == kv_keys::ParsedKey::Scope::kAttempt) {
    // Keys of unknown jobs are allowed (tests, tools).
    StatusOr<JobRecord> job = store_->GetJob(parsed.job_id);
    if (job.ok() && parsed.attempt < job->attempt) CheckAttempt(job->id, parsed.attempt);
  }
  // The partition search's keys (coordinator/orchestration/partition_trials.h).
  if (kv_keys::IsCoordinatorOnly(parsed)) {
    Throw(rpc::ErrorCode::INVALID_ARGUMENT,
          "key \"" + key + "\" is written only by the coordinator (partition search)");
  }
}

bool CoordinatorService::CheckKvRoom(const std::string& key, const kv_keys::ParsedKey& parsed) {
  if (options_.max_kv_entries_per_job <= 0 && options_.max_kv_global_entries <= 0) {
    return false;
  }
  if (ValueOrThrow(store_->KvGet(key)).has_value()) return false;  // a replacement adds nothing
  if (parsed.scope == kv_keys::ParsedKey::Scope::kJob ||
      parsed.scope == kv_keys::ParsedKey::Scope::kAttempt) {
    const std::string prefix = kv_keys::JobPrefix(parsed.job_id);
    if (options_.max_kv_entries_per_job > 0 &&
        ValueOrThrow(store_->KvCount(prefix)) >= options_.max_kv_entries_per_job) {
      Throw(rpc::ErrorCode::FAILED_PRECONDITION,
            "key-value limit reached: \"" + prefix + "\" already holds " +
                std::to_string(options_.max_kv_entries_per_job) +
                " keys; raise the coordinator's --max-kv-entries-per-job if the job needs more");
    }
    return false;
  }
  if (options_.max_kv_global_entries > 0 &&
      global_kv_keys_.load() >= options_.max_kv_global_entries) {
    Throw(rpc::ErrorCode::FAILED_PRECONDITION,
          "key-value limit reached: " + std::to_string(options_.max_kv_global_entries) +
              " keys outside any job's \"job/<id>/\" prefix are stored; use job keys, or "
              "raise the coordinator's --max-kv-global-entries");
  }
  return true;
}

void CoordinatorService::CheckJobRoom() {
  if (options_.max_active_jobs <= 0) return;
  const int64_t n = orchestrator_.ActiveJobs();
  if (n >= options_.max_active_jobs) {
    Throw(rpc::ErrorCode::FAILED_PRECONDITION,
          "job limit reached: " + std::to_string(n) +
              " jobs are pending or running (the coordinator's --max-active-jobs is " +
              std::to_string(options_.max_active_jobs) +
              "); wait for some to finish, cancel some, or raise --max-active-jobs");
  }
}

CoordinatorService::~CoordinatorService() { Stop(); }

Status CoordinatorService::Init() {
  // Agents known from the database are not trusted until they talk to this
  // coordinator process: their first heartbeat is answered known = false, so
  // they register again and report what they run (reconciliation). Until
  // then no task is placed on them, and after agent_timeout_ms of silence
  // their tasks are lost.
  PX_RETURN_IF_ERROR(orchestrator_.Init());
  PX_ASSIGN_OR_RETURN(int64_t all_keys, store_->KvCount(""));
  PX_ASSIGN_OR_RETURN(int64_t job_keys, store_->KvCount(kv_keys::kJobScope));
  global_kv_keys_ = all_keys - job_keys;
  return Status::Ok();
}

void CoordinatorService::StartBackground() {
  PX_CHECK(!loop_.joinable()) << "StartBackground called twice";
  background_ = true;
  loop_ = std::thread([this] { Loop(); });
}

void CoordinatorService::Stop() {
  {
    std::lock_guard<std::mutex> lock(wait_mu_);
    stopping_ = true;
  }
  wait_cv_.notify_all();
  orchestrator_.Stop();
  {
    std::lock_guard<std::mutex> lock(loop_mu_);
    loop_stop_ = true;
  }
  loop_cv_.notify_all();
  if (loop_.joinable()) loop_.join();
  Status s = FlushHeartbeats();
  if (!s.ok()) PX_LOG(WARNING) << "could not write heartbeat times on stop: " << s.ToString();
}

void CoordinatorService::Loop() {
  const auto period = std::chrono::milliseconds(options_.heartbeat_flush_ms);
  auto next_tick = std::chrono::steady_clock::now() + period;
  std::unique_lock<std::mutex> lock(loop_mu_);
  while (!loop_stop_) {
    loop_cv_.wait_until(lock, next_tick, [&] { return loop_stop_ || wake_; });
    if (loop_stop_) break;
    wake_ = false;
    const bool tick = std::chrono::steady_clock::now() >= next_tick;
    lock.unlock();
    if (tick) {
      Status s = FlushHeartbeats();
      if (!s.ok()) PX_LOG(WARNING) << "could not write heartbeat times: " << s.ToString();
      next_tick = std::chrono::steady_clock::now() + period;
    }
    // Events that arrive during this pass set wake_ again: one more pass
    // handles all of them.
    RunPass(/*whole=*/tick);
    lock.lock();
  }
}

Status CoordinatorService::FlushHeartbeats() {
  std::vector<std::pair<std::string, int64_t>> batch;
  {
    std::lock_guard<std::mutex> lock(agents_mu_);
    batch.assign(unflushed_.begin(), unflushed_.end());
    unflushed_.clear();
  }
  if (batch.empty()) return Status::Ok();
  StatusOr<int> n = store_->TouchAgents(batch);
  if (!n.ok()) {
    // Keep them for the next flush unless a newer heartbeat replaced them.
    std::lock_guard<std::mutex> lock(agents_mu_);
    for (auto& [name, t] : batch) unflushed_.emplace(name, t);
    return n.status();
  }
  return Status::Ok();
}

void CoordinatorService::CheckHeader(const rpc::RequestHeader& header) const {
  if (auto error = CheckRequestHeader(header, options_.auth_token, "coordinator")) throw *error;
}

template <typename Ready>
bool CoordinatorService::WaitFor(int64_t timeout_ms, Ready ready) {
  timeout_ms = std::clamp<int64_t>(timeout_ms, 0, options_.max_wait_ms);
  auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  while (true) {
    uint64_t seen;
    {
      std::lock_guard<std::mutex> lock(wait_mu_);
      if (stopping_) Throw(rpc::ErrorCode::UNAVAILABLE, "coordinator is shutting down");
      seen = change_seq_;
    }
    // Checked without wait_mu_ held: the store has its own lock, and a change
    // after this check bumps change_seq_, so the wait below cannot miss it.
    if (ready()) return true;
    std::unique_lock<std::mutex> lock(wait_mu_);
    if (!wait_cv_.wait_until(lock, deadline,
                             [&] { return stopping_ || change_seq_ != seen; })) {
      return false;
    }
  }
}

void CoordinatorService::NotifyWaiters() {
  {
    std::lock_guard<std::mutex> lock(wait_mu_);
    ++change_seq_;
  }
  wait_cv_.notify_all();
}

void CoordinatorService::Hello(rpc::HelloResponse& out, const rpc::RequestHeader& header) {
  CheckHeader(header);
  out.protocol_version = rpc::g_coordinator_constants.PROTOCOL_VERSION;
  out.server_version = kServerVersion;
  out.server_time = clock_->NowMillis();
}

void CoordinatorService::SubmitJob(rpc::JobInfo& out, const rpc::RequestHeader& header,
                                   const rpc::SubmitJobRequest& request) {
  CheckHeader(header);
  if (request.job_text.size() > options_.max_job_text_bytes) {
    Throw(rpc::ErrorCode::INVALID_ARGUMENT,
          "job file is " + std::to_string(request.job_text.size()) + " bytes; the limit is " +
              std::to_string(options_.max_job_text_bytes));
  }
  std::string source = request.__isset.job_path && !request.job_path.empty()
                           ? request.job_path
                           : std::string("<submitted>");
  // The coordinator never trusts the client's validation. Paths are checked
  // on the hosts that use them, not here.
  JobLoadOptions load_options;
  load_options.check_paths = false;
  StatusOr<JobConfig> config = ParseJobConfig(request.job_text, source, load_options);
  ThrowIfError(config.status());
  CheckJobRoom();
  NewJob job;
  job.name = config->job.name;
  job.workers = config->job.workers;
  job.job_text = request.job_text;
  job.job_path = request.__isset.job_path ? request.job_path : "";
  job.submitted_by = ClientName(header);
  // Committed when this returns (with the submits that came meanwhile).
  JobRecord record = ValueOrThrow(store_->CreateJob(job, clock_->NowMillis()));
  PX_LOG(INFO) << "job \"" << record.id << "\" (" << record.name << ") submitted by "
               << job.submitted_by;
  orchestrator_.Enqueue(record, *config);
  out = JobInfoOf(record, /*with_text=*/false);
  Wake();
}

void CoordinatorService::GetJob(rpc::JobInfo& out, const rpc::RequestHeader& header,
                                int64_t job_id) {
  CheckHeader(header);
  RequireJobId(job_id);
  const JobRecord job = ValueOrThrow(store_->GetJob(job_id));
  out = JobInfoOf(job, /*with_text=*/true);
  // PS shards started again alone, and the updates lost with them.
  int restarts = 0;
  for (const TaskRecord& t : ValueOrThrow(store_->ListTasks(job_id))) restarts += t.generation - 1;
  if (restarts > 0) {
    out.__set_shard_restarts(restarts);
    out.__set_lost_updates(job.lost_updates);
    out.__set_lost_updates_unknown(job.lost_updates_unknown);
  }
}

void CoordinatorService::ListJobs(std::vector<rpc::JobInfo>& out,
                                  const rpc::RequestHeader& header,
                                  const rpc::ListJobsRequest& request) {
  CheckHeader(header);
  JobFilter filter;
  if (request.__isset.states) {
    for (rpc::JobState::type s : request.states) {
      if (s < rpc::JobState::PENDING || s > rpc::JobState::CANCELLED) {
        Throw(rpc::ErrorCode::INVALID_ARGUMENT, "unknown job state " + std::to_string(s));
      }
      filter.states.push_back(static_cast<JobState>(s));
    }
  }
  if (request.__isset.limit) {
    if (request.limit < 0) Throw(rpc::ErrorCode::INVALID_ARGUMENT, "limit must be >= 0");
    filter.limit = request.limit;
  }
  out.clear();
  for (const JobRecord& job : ValueOrThrow(store_->ListJobs(filter))) {
    out.push_back(JobInfoOf(job, /*with_text=*/false));
  }
}

void CoordinatorService::CancelJob(rpc::JobInfo& out, const rpc::RequestHeader& header,
                                   int64_t job_id, const std::string& reason) {
  CheckHeader(header);
  RequireJobId(job_id);
  std::string why = reason.empty() ? "cancelled by " + ClientName(header) : reason;
  StatusOr<JobRecord> job = orchestrator_.Cancel(job_id, why);
  if (job.status().code() == StatusCode::kFailedPrecondition) {
    // Say it in the user's terms: the job already finished.
    StatusOr<JobRecord> current = store_->GetJob(job_id);
    if (current.ok()) {
      Throw(rpc::ErrorCode::FAILED_PRECONDITION,
            "job " + std::to_string(job_id) + " is already " +
                std::string(JobStateName(current->state)) + "; only a live job can be cancelled");
    }
  }
  out = JobInfoOf(ValueOrThrow(std::move(job)), /*with_text=*/false);
  Wake();  // the orchestrator told the agents' long polls that the tasks must stop
}

void CoordinatorService::ReplanJob(rpc::JobInfo& out, const rpc::RequestHeader& header,
                                   int64_t job_id, const std::string& reason) {
  CheckHeader(header);
  RequireJobId(job_id);
  const JobRecord job = ValueOrThrow(store_->GetJob(job_id));
  const std::string id = "job " + std::to_string(job_id);
  if (job.state != JobState::kRunning) {
    Throw(rpc::ErrorCode::FAILED_PRECONDITION,
          id + " is " + std::string(JobStateName(job.state)) +
              "; only a RUNNING job re-plans (at its next checkpoint)");
  }
  const std::shared_ptr<const JobConfig> config = ValueOrThrow(store_->ParsedConfig(job));
  if (config->trainer.checkpoint_every <= 0 || config->trainer.checkpoint_dir.empty()) {
    Throw(rpc::ErrorCode::FAILED_PRECONDITION,
          id + " writes no checkpoints ([trainer] checkpoint_every and checkpoint_dir), so it has "
               "none to re-plan at; resubmit it with them");
  }
  if (reason.size() > 1024) {
    Throw(rpc::ErrorCode::INVALID_ARGUMENT,
          "the reason is " + std::to_string(reason.size()) + " bytes; at most 1024");
  }
  const std::string why = "asked by " + ClientName(header) + (reason.empty() ? "" : " (" + reason + ")");
  orchestrator_.ReplanAtCheckpoint(job_id, job.attempt, why);
  (void)ValueOrThrow(store_->AppendEvent(
      job_id, "replan",
      "attempt " + std::to_string(job.attempt) + " re-plans at its next checkpoint, " + why,
      clock_->NowMillis()));
  out = JobInfoOf(job, /*with_text=*/false);
}

void CoordinatorService::GetEvents(std::vector<rpc::Event>& out, const rpc::RequestHeader& header,
                                   int64_t job_id, int64_t after_seq, int32_t limit) {
  CheckHeader(header);
  if (job_id < 0) Throw(rpc::ErrorCode::INVALID_ARGUMENT, "job id must be >= 0");
  if (limit < 0) Throw(rpc::ErrorCode::INVALID_ARGUMENT, "limit must be >= 0");
  if (job_id > 0) ThrowIfError(store_->GetJob(job_id).status());  // unknown job: NOT_FOUND
  out.clear();
  for (const EventRecord& e : ValueOrThrow(store_->ListEvents(job_id, after_seq, limit))) {
    rpc::Event event;
    event.seq = e.seq;
    event.job_id = e.job_id;
    event.time = e.time;
    event.kind = e.kind;
    event.message = e.message;
    out.push_back(std::move(event));
  }
}

void CoordinatorService::RegisterAgent(const rpc::RequestHeader& header,
                                       const rpc::AgentInfo& agent) {
  CheckHeader(header);
  if (agent.name.empty() || agent.name.size() > 128) {
    Throw(rpc::ErrorCode::INVALID_ARGUMENT, "agent name must be 1 to 128 characters");
  }
  if (agent.address.empty()) {
    Throw(rpc::ErrorCode::INVALID_ARGUMENT, "agent \"" + agent.name + "\" has no address");
  }
  // The scheduler sums every agent's slots in an int: a bound per agent
  // keeps 100,000 agents' sums far from overflowing.
  constexpr int32_t kMaxSlots = 4096;
  if (agent.slots < 0 || agent.gpus < 0 || agent.slots > kMaxSlots || agent.gpus > kMaxSlots) {
    Throw(rpc::ErrorCode::INVALID_ARGUMENT,
          "agent \"" + agent.name + "\": slots and gpus must be from 0 to " +
              std::to_string(kMaxSlots) + ", got slots = " + std::to_string(agent.slots) +
              ", gpus = " + std::to_string(agent.gpus) + " (parallax-agent --slots)");
  }
  int64_t now = clock_->NowMillis();
  // A live agent of this name elsewhere: two daemons would fight over tasks.
  if (std::optional<AgentRecord> known = orchestrator_.Agent(agent.name);
      known && known->address != agent.address) {
    std::lock_guard<std::mutex> lock(agents_mu_);
    auto it = last_seen_.find(agent.name);
    int64_t seen = std::max(known->last_seen, it != last_seen_.end() ? it->second : 0);
    if (now - seen <= options_.agent_timeout_ms && !registry_.MayTakeOver(agent)) {
      Throw(rpc::ErrorCode::ALREADY_EXISTS,
            "agent \"" + agent.name + "\" is already registered from " + known->address +
                " and heartbeating; give this agent another --name (or stop the other one "
                "and retry after " + std::to_string(options_.agent_timeout_ms / 1000) + " s)");
    }
  }
  AgentRecord record;
  record.name = agent.name;
  record.address = agent.address;
  record.slots = agent.slots;
  record.gpus = agent.gpus;
  record.hostname = agent.__isset.hostname ? agent.hostname : "";
  record.version = agent.__isset.version ? agent.version : "";
  record.ps_host = agent.__isset.role && agent.role == rpc::AgentRole::PS;
  // The orchestrator keeps a drain across re-registrations.
  ThrowIfError(orchestrator_.RegisterAgent(record, now));
  if (std::string warning = registry_.Registered(agent); !warning.empty()) {
    PX_LOG(WARNING) << warning;
  }
  {
    std::lock_guard<std::mutex> lock(agents_mu_);
    last_seen_[agent.name] = now;
    unflushed_.erase(agent.name);
    fresh_.insert(agent.name);
  }
  Wake();
}

void CoordinatorService::PollAssignments(rpc::PollResponse& out, const rpc::RequestHeader& header,
                                         const rpc::PollRequest& request) {
  CheckHeader(header);
  bool after_register = false;
  {
    std::lock_guard<std::mutex> lock(agents_mu_);
    auto it = last_seen_.find(request.agent_name);
    out.known = it != last_seen_.end();
    if (!out.known) return;
    int64_t now = clock_->NowMillis();
    it->second = now;
    unflushed_[request.agent_name] = now;
    after_register = fresh_.erase(request.agent_name) > 0;
  }
  if (after_register) {
    // Reconcile what the agent runs with what the store expects, then let the
    // job lifecycle react (a task that vanished restarts its job).
    ValueOrThrow(orchestrator_.WorkFor(request.agent_name, request.running, true));
    Wake();
  }
  const int64_t timeout_ms = std::clamp<int64_t>(request.timeout_ms, 0, options_.max_wait_ms);
  AgentWork work =
      ValueOrThrow(orchestrator_.WaitForWork(request.agent_name, request.running, timeout_ms));
  out.start = std::move(work.start);
  out.stop = std::move(work.stop);
}

void CoordinatorService::ReportTasks(const rpc::RequestHeader& header,
                                     const std::string& agent_name,
                                     const std::vector<rpc::TaskReport>& reports) {
  CheckHeader(header);
  if (reports.size() > 10'000) {
    Throw(rpc::ErrorCode::INVALID_ARGUMENT, "report at most 10000 tasks per call");
  }
  for (const rpc::TaskReport& r : reports) {
    if (r.state < rpc::TaskState::ASSIGNED || r.state > rpc::TaskState::LOST ||
        (r.key.role != rpc::TaskRole::TRAINER && r.key.role != rpc::TaskRole::PS)) {
      Throw(rpc::ErrorCode::INVALID_ARGUMENT, "task report with an unknown state or role");
    }
  }
  // Recorded by the next pass (with every report that came meanwhile, in
  // one commit); the agent learns it is recorded when this returns.
  const uint64_t ticket = orchestrator_.QueueReports(agent_name, reports);
  Wake();
  ThrowIfError(orchestrator_.WaitReports(ticket, kReportWaitMs));
}

void CoordinatorService::DrainAgent(const rpc::RequestHeader& header, const std::string& agent_name,
                                    bool drain) {
  CheckHeader(header);
  ThrowIfError(orchestrator_.SetDraining(agent_name, drain, clock_->NowMillis()));
  Wake();
}

void CoordinatorService::ResumeJob(rpc::JobInfo& out, const rpc::RequestHeader& header,
                                   int64_t job_id, const rpc::ResumeOptions& options) {
  CheckHeader(header);
  RequireJobId(job_id);
  JobRecord job = ValueOrThrow(store_->GetJob(job_id));
  if (job.state != JobState::kFailed && job.state != JobState::kCancelled) {
    Throw(rpc::ErrorCode::FAILED_PRECONDITION,
          "job " + std::to_string(job_id) + " is " + std::string(JobStateName(job.state)) +
              "; only a FAILED or CANCELLED job can be resumed");
  }
  ResumeChange change;
  if (options.__isset.workers) change.workers = options.workers;
  if (options.__isset.shards) change.shards = options.shards;
  if (options.__isset.job_text) {
    if (options.job_text.size() > options_.max_job_text_bytes) {
      Throw(rpc::ErrorCode::INVALID_ARGUMENT,
            "job file is " + std::to_string(options.job_text.size()) + " bytes; the limit is " +
                std::to_string(options_.max_job_text_bytes));
    }
    change.job_text = options.job_text;
    change.job_path = options.__isset.job_path ? options.job_path : "";
  }
  CheckJobRoom();
  if (!change.empty()) {
    // The new attempt reads the edited file; a resume that then fails leaves
    // the job FAILED or CANCELLED with it.
    const ResumeEdit edit = ValueOrThrow(EditForResume(job, change));
    ThrowIfError(store_->ReplaceJobText(job_id, edit.job_text, edit.job_path, edit.workers,
                                        edit.what, clock_->NowMillis()));
  }
  ValueOrThrow(orchestrator_.Resume(job_id, "resumed by " + ClientName(header)));
  Wake();
  out = JobInfoOf(ValueOrThrow(store_->GetJob(job_id)), /*with_text=*/false);
}

void CoordinatorService::Heartbeat(rpc::HeartbeatResponse& out, const rpc::RequestHeader& header,
                                   const rpc::HeartbeatRequest& request) {
  CheckHeader(header);
  int64_t now = clock_->NowMillis();
  out.server_time = now;
  std::lock_guard<std::mutex> lock(agents_mu_);
  auto it = last_seen_.find(request.agent_name);
  out.known = it != last_seen_.end();
  if (out.known) {
    it->second = now;
    unflushed_[request.agent_name] = now;
  }
}

StatusOr<std::vector<rpc::AgentInfo>> CoordinatorService::Agents() {
  PX_ASSIGN_OR_RETURN(std::vector<AgentRecord> agents, store_->ListAgents());
  int64_t now = clock_->NowMillis();
  // Only the lookups hold agents_mu_ (heartbeats take it): a page or a scrape
  // listing many agents delays no heartbeat by building their records.
  std::vector<int64_t> heard(agents.size(), 0);
  {
    std::lock_guard<std::mutex> lock(agents_mu_);
    for (size_t i = 0; i < agents.size(); ++i) {
      auto it = last_seen_.find(agents[i].name);
      if (it != last_seen_.end()) heard[i] = it->second;
    }
  }
  std::vector<rpc::AgentInfo> out;
  out.reserve(agents.size());
  for (size_t i = 0; i < agents.size(); ++i) {
    const AgentRecord& a = agents[i];
    rpc::AgentInfo info;
    info.name = a.name;
    info.address = a.address;
    info.slots = a.slots;
    info.gpus = a.gpus;
    info.__set_hostname(a.hostname);
    info.__set_version(a.version);
    info.__set_registered(a.registered);
    int64_t seen = std::max(heard[i], a.last_seen);
    info.__set_last_seen(seen);
    info.__set_alive(now - seen <= options_.agent_timeout_ms);
    info.__set_draining(a.draining);
    info.__set_role(a.ps_host ? rpc::AgentRole::PS : rpc::AgentRole::WORKER);
    registry_.Describe(&info);
    out.push_back(std::move(info));
  }
  return out;
}

void CoordinatorService::ListAgents(std::vector<rpc::AgentInfo>& out,
                                    const rpc::RequestHeader& header) {
  CheckHeader(header);
  out = ValueOrThrow(Agents());
}

void CoordinatorService::DeregisterAgent(const rpc::RequestHeader& header,
                                         const std::string& agent_name,
                                         const std::string& workdir_id) {
  CheckHeader(header);
  if (registry_.Deregistered(agent_name, workdir_id)) {
    PX_LOG(INFO) << "agent \"" << agent_name << "\" stopped and deregistered (its tasks keep "
                 << "their attempt while it is back within the agent timeout)";
  }
}

void CoordinatorService::ListTasks(std::vector<rpc::TaskInfo>& out,
                                   const rpc::RequestHeader& header, int64_t job_id) {
  CheckHeader(header);
  RequireJobId(job_id);
  ThrowIfError(store_->GetJob(job_id).status());
  out.clear();
  for (const TaskRecord& t : ValueOrThrow(store_->ListTasks(job_id))) {
    rpc::TaskInfo info;
    info.job_id = t.job_id;
    info.attempt = t.attempt;
    info.role = static_cast<rpc::TaskRole::type>(t.role);
    info.index = t.index;
    info.agent_name = t.agent_name;
    info.state = static_cast<rpc::TaskState::type>(t.state);
    if (t.exit_code) info.__set_exit_code(*t.exit_code);
    if (t.signal) info.__set_signal(*t.signal);
    if (IsNotLaunched(t)) info.__set_not_launched(true);
    if (t.generation > 1) info.__set_generation(t.generation);
    info.updated = t.updated;
    out.push_back(std::move(info));
  }
}

void CoordinatorService::PutPlan(const rpc::RequestHeader& header,
                                 const rpc::PutPlanRequest& request) {
  CheckHeader(header);
  RequireJobId(request.job_id);
  if (request.attempt < 0) Throw(rpc::ErrorCode::INVALID_ARGUMENT, "attempt must be >= 0");
  if (request.plan_json.size() > options_.max_plan_bytes) {
    Throw(rpc::ErrorCode::INVALID_ARGUMENT, "plan is larger than the limit of " +
                                                std::to_string(options_.max_plan_bytes) + " bytes");
  }
  CheckAttempt(request.job_id, request.attempt);
  ThrowIfError(
      store_->PutPlan(request.job_id, request.attempt, request.plan_json, clock_->NowMillis()));
  Status replanned = replan_.PlanStored(request.job_id, request.attempt, clock_->NowMillis());
  if (!replanned.ok()) PX_LOG(WARNING) << "re-plan event: " << replanned.ToString();
  // The plan decides whether the attempt's PS shards start (Orchestrator).
  orchestrator_.PlanStored(request.job_id, request.attempt);
  Wake();
  NotifyWaiters();
}

void CoordinatorService::GetPlan(std::string& out, const rpc::RequestHeader& header,
                                 int64_t job_id, int32_t attempt, int64_t timeout_ms) {
  CheckHeader(header);
  RequireJobId(job_id);
  ThrowIfError(store_->GetJob(job_id).status());
  std::optional<std::string> plan;
  bool found = WaitFor(timeout_ms, [&] {
    plan = ValueOrThrow(store_->GetPlan(job_id, attempt));
    return plan.has_value();
  });
  if (!found) {
    Throw(rpc::ErrorCode::DEADLINE_EXCEEDED,
          "no plan for job " + std::to_string(job_id) + " attempt " + std::to_string(attempt) +
              " after " + std::to_string(timeout_ms) + " ms");
  }
  out = std::move(*plan);
}

void CoordinatorService::KvSet(const rpc::RequestHeader& header,
                               const rpc::KvSetRequest& request) {
  CheckHeader(header);
  if (request.key.empty() || request.key.size() > 512) {
    Throw(rpc::ErrorCode::INVALID_ARGUMENT, "key must be 1 to 512 bytes");
  }
  if (request.value.size() > options_.max_kv_value_bytes) {
    Throw(rpc::ErrorCode::INVALID_ARGUMENT,
          "value for key \"" + request.key + "\" is larger than the limit of " +
              std::to_string(options_.max_kv_value_bytes) +
              " bytes; raise the coordinator's --max-kv-value-bytes if this is expected");
  }
  const kv_keys::ParsedKey parsed = kv_keys::ParseKey(request.key);
  CheckKey(request.key, parsed);
  bool new_global = CheckKvRoom(request.key, parsed);
  ThrowIfError(store_->KvSet(request.key, request.value, clock_->NowMillis()));
  if (new_global) ++global_kv_keys_;
  NotifyWaiters();
  // A partition-search trial ends as soon as its time is published.
  if (parsed.scope == kv_keys::ParsedKey::Scope::kAttempt &&
      request.key == kv_keys::TrialStepSeconds(parsed.job_id, parsed.attempt)) {
    orchestrator_.JobChanged(parsed.job_id);
    Wake();
  }
}

void CoordinatorService::KvGet(std::vector<std::string>& out, const rpc::RequestHeader& header,
                               const rpc::KvGetRequest& request) {
  CheckHeader(header);
  if (request.keys.empty() || request.keys.size() > 4096) {
    Throw(rpc::ErrorCode::INVALID_ARGUMENT, "ask for 1 to 4096 keys");
  }
  std::vector<std::string> missing;
  bool found = WaitFor(request.timeout_ms, [&] {
    out.assign(request.keys.size(), std::string());
    missing.clear();
    for (size_t i = 0; i < request.keys.size(); ++i) {
      std::optional<std::string> v = ValueOrThrow(store_->KvGet(request.keys[i]));
      if (v) {
        out[i] = std::move(*v);
      } else {
        missing.push_back(request.keys[i]);
      }
    }
    return missing.empty();
  });
  if (!found) {
    std::string names;
    for (size_t i = 0; i < missing.size() && i < 8; ++i) {
      names += (i ? ", \"" : "\"") + missing[i] + "\"";
    }
    if (missing.size() > 8) names += ", ...";
    Throw(rpc::ErrorCode::DEADLINE_EXCEEDED,
          std::to_string(missing.size()) + " key(s) still missing after " +
              std::to_string(request.timeout_ms) + " ms: " + names);
  }
}

int64_t CoordinatorService::KvAdd(const rpc::RequestHeader& header,
                                  const rpc::KvAddRequest& request) {
  CheckHeader(header);
  if (request.key.empty() || request.key.size() > 512) {
    Throw(rpc::ErrorCode::INVALID_ARGUMENT, "key must be 1 to 512 bytes");
  }
  const kv_keys::ParsedKey parsed = kv_keys::ParseKey(request.key);
  CheckKey(request.key, parsed);
  bool new_global = CheckKvRoom(request.key, parsed);
  int64_t v = ValueOrThrow(store_->KvAdd(request.key, request.delta, clock_->NowMillis()));
  if (new_global) ++global_kv_keys_;
  NotifyWaiters();
  return v;
}

void CoordinatorService::ReportMetrics(const rpc::RequestHeader& header,
                                       const std::vector<rpc::MetricPoint>& points) {
  CheckHeader(header);
  if (points.size() > 10'000) {
    Throw(rpc::ErrorCode::INVALID_ARGUMENT, "report at most 10000 points per call");
  }
  std::vector<MetricRecord> records;
  records.reserve(points.size());
  for (const rpc::MetricPoint& p : points) {
    if (p.job_id <= 0 || p.rank < 0 || p.step < 0 || p.attempt < 0) {
      Throw(rpc::ErrorCode::INVALID_ARGUMENT,
            "metric point needs job_id > 0 and rank, step, attempt >= 0");
    }
    CheckAttempt(p.job_id, p.attempt);
    MetricRecord r;
    r.job_id = p.job_id;
    r.attempt = p.attempt;
    r.rank = p.rank;
    r.step = p.step;
    r.loss = p.loss;
    r.throughput = p.throughput;
    if (p.__isset.values) {
      if (p.values.size() > 64) {
        Throw(rpc::ErrorCode::INVALID_ARGUMENT, "at most 64 values per metric point");
      }
      r.values = std::map<std::string, double>(p.values.begin(), p.values.end());
    }
    records.push_back(r);
  }
  const int64_t now = clock_->NowMillis();
  ThrowIfError(store_->RecordMetrics(records, now));
  // A failure to compare loses no metric: it is logged, and the next
  // report compares again.
  StatusOr<std::vector<ReplanRequest>> replans = replan_.Observe(records, now);
  if (!replans.ok()) {
    PX_LOG(WARNING) << "re-plan monitor: " << replans.status().ToString();
    return;
  }
  for (const ReplanRequest& r : *replans) {
    orchestrator_.ReplanAtCheckpoint(r.job_id, r.attempt, r.reason);
  }
}

void CoordinatorService::GetMetrics(std::vector<rpc::MetricPoint>& out,
                                    const rpc::RequestHeader& header,
                                    const rpc::GetMetricsRequest& request) {
  CheckHeader(header);
  RequireJobId(request.job_id);
  ThrowIfError(store_->GetJob(request.job_id).status());
  int64_t after = request.__isset.after_step ? request.after_step : -1;
  int limit = request.__isset.limit ? request.limit : 0;
  if (limit < 0) Throw(rpc::ErrorCode::INVALID_ARGUMENT, "limit must be >= 0");
  out.clear();
  for (const MetricRecord& r : ValueOrThrow(store_->ListMetrics(request.job_id, after, limit))) {
    rpc::MetricPoint p;
    p.job_id = r.job_id;
    p.attempt = r.attempt;
    p.rank = r.rank;
    p.step = r.step;
    p.loss = r.loss;
    p.throughput = r.throughput;
    p.__set_time(r.time);
    if (!r.values.empty()) p.__set_values(r.values);
    out.push_back(std::move(p));
  }
}

void CoordinatorService::ReportShardStats(const rpc::RequestHeader& header,
                                          const rpc::ShardStatsReport& report) {
  CheckHeader(header);
  ThrowIfError(ShardStatsBoard::Validate(report));
  CheckAttempt(report.job_id, report.attempt);
  shard_stats_.Record(report);
  ThrowIfError(RecordLostUpdates(store_, report, clock_->NowMillis()));
}

void CoordinatorService::GetShardStats(std::vector<rpc::ShardStatsReport>& out,
                                       const rpc::RequestHeader& header, int64_t job_id) {
  CheckHeader(header);
  RequireJobId(job_id);
  ThrowIfError(store_->GetJob(job_id).status());
  out = shard_stats_.OfJob(job_id);
}

void CoordinatorService::CommitCheckpoint(const rpc::RequestHeader& header,
                                          const rpc::CheckpointInfo& checkpoint) {
  CheckHeader(header);
  RequireJobId(checkpoint.job_id);
  if (checkpoint.step < 0 || checkpoint.attempt < 0 || checkpoint.path.empty()) {
    Throw(rpc::ErrorCode::INVALID_ARGUMENT,
          "checkpoint needs step >= 0, attempt >= 0 and a path");
  }
  CheckpointRecord record;
  record.job_id = checkpoint.job_id;
  record.attempt = checkpoint.attempt;
  record.step = checkpoint.step;
  record.path = checkpoint.path;
  record.manifest_sha256 = checkpoint.manifest_sha256;
  ThrowIfError(store_->CommitCheckpoint(record, clock_->NowMillis()));
  orchestrator_.CheckpointCommitted(record.job_id, record.attempt, record.step);
  Wake();
}

void CoordinatorService::ListCheckpoints(std::vector<rpc::CheckpointInfo>& out,
                                         const rpc::RequestHeader& header, int64_t job_id) {
  CheckHeader(header);
  RequireJobId(job_id);
  ThrowIfError(store_->GetJob(job_id).status());
  out.clear();
  for (const CheckpointRecord& c : ValueOrThrow(store_->ListCheckpoints(job_id))) {
    rpc::CheckpointInfo info;
    info.job_id = c.job_id;
    info.attempt = c.attempt;
    info.step = c.step;
    info.path = c.path;
    info.manifest_sha256 = c.manifest_sha256;
    info.__set_created(c.created);
    out.push_back(std::move(info));
  }
}

}  // namespace parallax::coordinator
