#include "agent/agent.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <random>
#include <sstream>

#include "agent/exec_policy.h"
#include "agent/task_env.h"
#include "agent/task_log.h"
#include "core/base/daemon.h"
#include "core/base/env_allow_list.h"
#include "core/config/job_config.h"
#include "core/base/logging.h"

namespace parallax::agent {
namespace {

namespace fs = std::filesystem;

constexpr char kPidFile[] = "pid";
// A task's final report until the coordinator has it, so that a report
// survives an agent restart: "STATE EXIT_CODE SIGNAL\nMESSAGE".
constexpr char kResultFile[] = "result";
constexpr char kAdoptedMessage[] = "exit status unknown (task adopted after an agent restart)";
// How a task ended, written by its supervisor (ProcessLauncher), so that an
// adopted task's exit is known to the agent that adopted it.
constexpr char kExitStatusFile[] = "exit-status";

// The final report of a task that ended while no agent was waiting for it:
// what its supervisor recorded, else LOST with `unknown_message`.
rpc::TaskReport ReportOfUnwatchedExit(const rpc::TaskKey& key, const std::string& dir,
                                      const std::string& unknown_message) {
  rpc::TaskReport report;
  report.key = key;
  std::optional<ProcessExit> exit = ReadExitStatus(dir + "/" + kExitStatusFile);
  if (exit && exit->signal > 0) {
    report.state = rpc::TaskState::KILLED;
    report.__set_signal(exit->signal);
  } else if (exit && exit->exit_code >= 0) {
    report.state = rpc::TaskState::EXITED;
    report.__set_exit_code(exit->exit_code);
  } else {
    report.state = rpc::TaskState::LOST;
    report.__set_message(unknown_message);
  }
  return report;
}

// `text` with every occurrence of `secret` replaced: a task that prints its
// PARALLAX_TOKEN must not get it into the coordinator's database through
// the log lines attached to its final report.
std::string Redact(std::string text, const std::string& secret) {
  if (secret.empty()) return text;
  const std::string mark = "[secret redacted]";
  for (size_t at = text.find(secret); at != std::string::npos;
       at = text.find(secret, at + mark.size())) {
    text.replace(at, secret.size(), mark);
  }
  return text;
}

bool IsFatalRegistrationError(const Status& s) {
  switch (s.code()) {
    case StatusCode::kAlreadyExists:
    case StatusCode::kFailedPrecondition:
    case StatusCode::kPermissionDenied:
    case StatusCode::kInvalidArgument: return true;
    default: return false;
  }
}

Status WriteFile(const std::string& path, const std::string& text) {
  std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::trunc | std::ios::binary);
    out << text;
    if (!out.flush()) return IoError("cannot write '" + tmp + "'");
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    return IoError("cannot rename '" + tmp + "' to '" + path + "': " + strerror(errno));
  }
  return Status::Ok();
}

void SaveResult(const std::string& dir, const rpc::TaskReport& r) {
  std::string text = std::to_string(static_cast<int>(r.state)) + " " +
                     std::to_string(r.__isset.exit_code ? r.exit_code : -1) + " " +
                     std::to_string(r.__isset.signal ? r.signal : 0) + "\n" + r.message;
  if (Status s = WriteFile(dir + "/" + kResultFile, text); !s.ok()) {
    PX_LOG(WARNING) << s.message() << "; the report is kept in memory only";
  }
}

std::optional<rpc::TaskReport> LoadResult(const std::string& dir, const rpc::TaskKey& key) {
  std::ifstream in(dir + "/" + kResultFile);
  int state = 0, exit_code = -1, signal = 0;
  if (!(in >> state >> exit_code >> signal) || state < rpc::TaskState::RUNNING ||
      state > rpc::TaskState::LOST) {
    return std::nullopt;
  }
  in.get();  // the newline
  rpc::TaskReport r;
  r.key = key;
  r.state = static_cast<rpc::TaskState::type>(state);
  if (exit_code >= 0) r.__set_exit_code(exit_code);
  if (signal > 0) r.__set_signal(signal);
  std::string message((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (!message.empty()) r.__set_message(message);
  return r;
}

void AppendToLog(const std::string& dir, const std::string& line) {
  std::ofstream out(TaskLogPath(dir), std::ios::app);
  out << "parallax-agent: " << line << "\n";
}

}  // namespace

Agent::Agent(AgentOptions options, CoordinatorLink* link, ProcessLauncher* launcher, Clock* clock)
    : options_(std::move(options)),
      link_(link),
      launcher_(launcher),
      clock_(clock),
      address_(options_.address) {}

Agent::~Agent() {
  Stop();
  if (lock_fd_ >= 0) close(lock_fd_);
}

Status Agent::Init() {
  std::error_code ec;
  fs::path workdir = fs::absolute(options_.workdir, ec).lexically_normal();
  auto unwritable = [&](const std::string& why) {
    return FailedPrecondition("workdir '" + options_.workdir + "' is not writable: " + why);
  };
  if (ec) return unwritable(ec.message());
  fs::create_directories(workdir / "tasks", ec);
  if (ec) return unwritable("cannot create '" + (workdir / "tasks").string() + "': " + ec.message());
  workdir_ = workdir.string();
  // Also the writability probe: one agent per workdir, or two would adopt
  // (and report) each other's tasks. O_CLOEXEC so tasks never hold the lock.
  std::string lock_path = workdir_ + "/agent.lock";
  lock_fd_ = open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (lock_fd_ < 0) return unwritable("cannot create '" + lock_path + "': " + strerror(errno));
  if (flock(lock_fd_, LOCK_EX | LOCK_NB) != 0) {
    char owner[32] = {0};
    ssize_t n = pread(lock_fd_, owner, sizeof(owner) - 1, 0);
    std::string pid = n > 0 ? std::string(owner, static_cast<size_t>(n)) : "?";
    while (!pid.empty() && (pid.back() == '\n' || pid.back() == ' ')) pid.pop_back();
    return FailedPrecondition("workdir '" + options_.workdir +
                              "' is in use by another parallax-agent (pid " + pid +
                              "); give each agent its own --workdir");
  }
  std::string pid_text = std::to_string(getpid()) + "\n";
  if (ftruncate(lock_fd_, 0) != 0 || pwrite(lock_fd_, pid_text.data(), pid_text.size(), 0) < 0) {
    return unwritable("cannot write '" + lock_path + "': " + strerror(errno));
  }
  PX_RETURN_IF_ERROR(LoadWorkdirId());
  Adopt();
  return Status::Ok();
}

Status Agent::LoadWorkdirId() {
  const std::string path = workdir_ + "/agent.id";
  std::ifstream(path) >> workdir_id_;
  if (workdir_id_.size() == 32) return Status::Ok();
  std::random_device random;
  std::ostringstream id;
  for (int i = 0; i < 4; ++i) id << std::hex << std::setw(8) << std::setfill('0') << random();
  workdir_id_ = id.str();
  if (Status s = WriteFileAtomically(path, workdir_id_ + "\n"); !s.ok()) {
    return FailedPrecondition("workdir '" + options_.workdir + "' is not writable: " +
                              s.message());
  }
  return Status::Ok();
}

void Agent::Adopt() {
  std::error_code ec;
  std::lock_guard<std::mutex> lock(mu_);
  for (const fs::directory_entry& entry : fs::directory_iterator(workdir_ + "/tasks", ec)) {
    std::optional<rpc::TaskKey> key = ParseTaskDirName(entry.path().filename().string());
    if (!key) continue;
    std::string name = TaskDirName(*key);
    // A final report the coordinator may not have yet: send it again.
    if (std::optional<rpc::TaskReport> result = LoadResult(entry.path().string(), *key)) {
      ended_.insert(name);
      reports_.push_back(std::move(*result));
      continue;
    }
    std::string pid_path = (entry.path() / kPidFile).string();
    if (!fs::exists(pid_path, ec)) continue;
    std::ifstream in(pid_path);
    int pid = 0;
    int64_t start_time = -1;
    if (!(in >> pid >> start_time) || pid <= 1 || start_time < 0 ||
        launcher_->StartTime(pid) != start_time) {
      // Ended while no agent watched: report how (the coordinator still
      // counts it running), before the first poll lists what runs here.
      rpc::TaskReport report = ReportOfUnwatchedExit(
          *key, entry.path().string(), "ended while no agent was running; exit status unknown");
      PX_LOG(INFO) << DescribeTask(*key) << " ended while the agent was away";
      SaveResult(entry.path().string(), report);
      fs::remove(pid_path, ec);
      ended_.insert(name);
      reports_.push_back(std::move(report));
      continue;
    }
    Task task;
    task.key = *key;
    task.dir = entry.path().string();
    task.pid = pid;
    task.start_time = start_time;
    task.adopted = true;
    PX_LOG(INFO) << "adopted " << DescribeTask(task.key) << " (pid " << pid << ")";
    tasks_[name] = std::move(task);
  }
}

std::string Agent::TaskDir(const rpc::TaskKey& key) const {
  return workdir_ + "/tasks/" + TaskDirName(key);
}

Status Agent::Register() {
  rpc::AgentInfo info;
  info.name = options_.name;
  info.address = address_;
  info.slots = options_.slots;
  info.gpus = options_.gpus;
  info.__set_hostname(options_.hostname);
  info.__set_version(options_.version);
  info.__set_workdir_id(workdir_id_);
  info.__set_bind_addr(options_.bind_addr);
  info.__set_role(options_.ps_host ? rpc::AgentRole::PS : rpc::AgentRole::WORKER);
  Status s = link_->Register(info);
  if (s.ok()) {
    registered_ = true;
    PX_LOG(INFO) << "registered as agent '" << options_.name << "' ("
                 << (options_.ps_host ? "PS shards only, " : "") << options_.slots << " slots, "
                 << options_.gpus << " GPUs, log service " << address_ << ")";
  }
  return s;
}

Status Agent::EnsureRegistered() {
  std::lock_guard<std::mutex> lock(register_mu_);
  if (registered_) return Status::Ok();
  Status s = Register();
  if (s.ok() || !IsFatalRegistrationError(s)) return s;
  return s.WithContext("the coordinator refused to register agent '" + options_.name + "'");
}

rpc::PollRequest Agent::MakePollRequest() const {
  rpc::PollRequest request;
  request.agent_name = options_.name;
  request.timeout_ms = options_.poll_timeout_ms;
  request.running = RunningTasks();
  return request;
}

std::vector<rpc::TaskKey> Agent::RunningTasks() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<rpc::TaskKey> keys;
  for (const auto& [name, task] : tasks_) keys.push_back(task.key);
  return keys;
}

size_t Agent::PendingReports() const {
  std::lock_guard<std::mutex> lock(mu_);
  return reports_.size();
}

void Agent::HandlePoll(const rpc::PollResponse& response) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (const rpc::TaskAssignment& a : response.start) StartTask(a);
    for (const rpc::TaskKey& key : response.stop) StopTask(key);
  }
  FlushReports();
}

void Agent::QueueReport(rpc::TaskReport report) {
  reports_.push_back(std::move(report));
  next_flush_at_ = 0;  // a new state change goes out now, backoff or not
}

std::string Agent::PreviousGenerationDir(const rpc::TaskKey& key) const {
  if (!key.__isset.generation || key.generation <= 1) return "";
  // A shard's next generation reads what its predecessor left here.
  rpc::TaskKey previous = key;
  if (key.generation == 2) {
    previous.__isset.generation = false;
  } else {
    previous.generation = key.generation - 1;
  }
  std::error_code ec;
  return fs::is_directory(TaskDir(previous), ec) ? TaskDir(previous) : "";
}

void Agent::StartTask(const rpc::TaskAssignment& a) {
  const std::string name = TaskDirName(a.key);
  if (tasks_.count(name) || ended_.count(name)) return;  // idempotent
  const std::string dir = TaskDir(a.key);
  auto lost = [&](const std::string& message) {
    PX_LOG(WARNING) << DescribeTask(a.key) << " not started: " << message;
    ended_.insert(name);
    rpc::TaskReport report;
    report.key = a.key;
    report.state = rpc::TaskState::LOST;
    report.__set_message(message);
    SaveResult(dir, report);
    QueueReport(std::move(report));
  };
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) return lost("cannot create task directory '" + dir + "': " + ec.message());
  std::vector<std::string> env_names;
  for (const auto& [env_name, value] : a.env) {
    if (env_name.rfind("PARALLAX_", 0) != 0) env_names.push_back(env_name);
  }
  if (std::vector<std::string> refused = EnvAllowList(options_.allow_env).Refused(env_names);
      !refused.empty()) {
    return RefuseTask(a.key, dir, RefusedEnvMessage(refused));
  }
  if (options_.ps_host && a.key.role == rpc::TaskRole::TRAINER) {
    return RefuseTask(a.key, dir,
                      "refused to start on agent '" + options_.name +
                          "': it hosts PS shards only (--role ps); its coordinator predates "
                          "agent roles: upgrade it, or start this agent without --role ps");
  }
  if (std::string missing = MissingPaths(a); !missing.empty()) {
    return RefuseTask(a.key, dir, missing);
  }
  std::string job_file = dir + "/job.toml";
  if (Status s = WriteFile(job_file, a.job_text); !s.ok()) return lost(s.message());

  TaskEnvContext context;
  context.coordinator = options_.coordinator;
  context.bind_addr = options_.bind_addr;
  context.token = options_.token;
  context.tls_ca_file = options_.tls_ca_file;
  context.job_file = job_file;
  context.task_dir = dir;
  context.previous_task_dir = PreviousGenerationDir(a.key);
  context.python_path = options_.python_path;
  context.cpu_cores = options_.cpu_cores;
  std::vector<std::string> ignored;
  LaunchSpec spec;
  spec.env = BuildTaskEnv(a, context, options_.inherited_env, &ignored);
  spec.argv = ResolveCommand(a, options_.bin_dir);
  if (!options_.allow_exec.empty()) {
    std::string path_env;
    for (const std::string& e : spec.env) {
      if (e.rfind("PATH=", 0) == 0) path_env = e.substr(5);
    }
    StatusOr<std::string> program =
        ResolveAllowedExecutable(spec.argv[0], options_.allow_exec, path_env);
    if (program.status().code() == StatusCode::kPermissionDenied) {
      return RefuseTask(a.key, dir, program.status().message());
    }
    if (!program.ok()) {
      AppendToLog(dir, program.status().message());
      return lost(program.status().message());
    }
    spec.argv[0] = *program;  // execute exactly what was checked
  }
  spec.cwd = dir;
  spec.log_path = TaskLogPath(dir);
  spec.exit_status_path = dir + "/" + kExitStatusFile;
  spec.die_with_parent = options_.stop_tasks_on_exit;
  for (const std::string& var : ignored) {
    AppendToLog(dir, "ignoring job env '" + var + "': PARALLAX_* variables are set by the agent");
  }
  StatusOr<int> pid = launcher_->Launch(spec);
  if (!pid.ok()) {
    AppendToLog(dir, pid.status().message());
    return lost(pid.status().message());
  }
  Task task;
  task.key = a.key;
  task.dir = dir;
  task.pid = *pid;
  task.start_time = launcher_->StartTime(*pid);
  if (Status s = WriteFile(dir + "/" + kPidFile, std::to_string(task.pid) + " " +
                                                     std::to_string(task.start_time) + "\n");
      !s.ok()) {
    PX_LOG(WARNING) << DescribeTask(a.key) << ": " << s.message()
                    << "; it will not be adopted if the agent restarts";
  }
  PX_LOG(INFO) << "started " << DescribeTask(a.key) << " (pid " << task.pid << "): "
               << spec.argv[0];
  tasks_[name] = std::move(task);
  rpc::TaskReport report;
  report.key = a.key;
  report.state = rpc::TaskState::RUNNING;
  QueueReport(std::move(report));
}

std::string Agent::MissingPaths(const rpc::TaskAssignment& a) const {
  // A trainer reads the data and writes checkpoint_dir; the coordinator
  // cannot check them (they need not exist on its host), so each host does.
  if (a.key.role != rpc::TaskRole::TRAINER) return "";
  std::vector<std::string> missing;
  StatusOr<JobConfig> job = ParseJobConfig(a.job_text, a.job_path, {.missing_paths = &missing});
  if (!job.ok() || missing.empty()) return "";  // the trainer reports anything else itself
  std::string message = "refused to start on agent '" + options_.name + "' (host " +
                        options_.hostname + "): paths the job names are missing here:";
  for (const std::string& line : missing) message += "\n  " + line;
  return message +
         "\nthe data and checkpoint_dir must be at the same absolute path on every host "
         "(docs/OPERATIONS.md, \"Data and checkpoints\")";
}

void Agent::RefuseTask(const rpc::TaskKey& key, const std::string& dir,
                       const std::string& message) {
  // Not executed: a final report, like a program that could not run (126).
  PX_LOG(WARNING) << DescribeTask(key) << ": " << message;
  AppendToLog(dir, message);
  ended_.insert(TaskDirName(key));
  rpc::TaskReport report;
  report.key = key;
  report.state = rpc::TaskState::EXITED;
  report.__set_exit_code(126);
  report.__set_message(message);
  SaveResult(dir, report);
  QueueReport(std::move(report));
}

void Agent::StopTask(const rpc::TaskKey& key) {
  auto it = tasks_.find(TaskDirName(key));
  if (it == tasks_.end() || it->second.stopping) return;
  Task& task = it->second;
  task.stopping = true;
  task.kill_at = clock_->NowMillis() + options_.grace_ms;
  PX_LOG(INFO) << "stopping " << DescribeTask(key) << " (pid " << task.pid << ")";
  if (options_.grace_ms <= 0) {
    launcher_->SignalGroup(task.pid, SIGKILL);
    task.killed = true;
  } else {
    launcher_->SignalGroup(task.pid, SIGTERM);
  }
}

void Agent::Tick() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    const int64_t now = clock_->NowMillis();
    for (auto it = tasks_.begin(); it != tasks_.end();) {
      Task& task = it->second;
      rpc::TaskReport report;
      report.key = task.key;
      bool ended = false;
      if (task.adopted) {
        if (launcher_->StartTime(task.pid) != task.start_time) {
          ended = true;
          report = ReportOfUnwatchedExit(task.key, task.dir, kAdoptedMessage);
        }
      } else if (std::optional<ProcessExit> exit = launcher_->Reap(task.pid)) {
        ended = true;
        if (exit->signal > 0) {
          report.state = rpc::TaskState::KILLED;
          report.__set_signal(exit->signal);
        } else if (exit->exit_code >= 0) {
          report.state = rpc::TaskState::EXITED;
          report.__set_exit_code(exit->exit_code);
        } else {
          report.state = rpc::TaskState::LOST;
          report.__set_message("exit status unknown");
        }
      }
      if (!ended) {
        if (task.stopping && !task.killed && now >= task.kill_at) {
          PX_LOG(WARNING) << DescribeTask(task.key) << " still running "
                          << options_.grace_ms << " ms after SIGTERM: sending SIGKILL";
          launcher_->SignalGroup(task.pid, SIGKILL);
          task.killed = true;
        }
        std::lock_guard<std::mutex> log_lock(log_mu_);
        StatusOr<bool> rotated = RotateIfNeeded(task.dir, options_.max_log_bytes, options_.keep_logs);
        if (!rotated.ok()) PX_LOG(WARNING) << "log rotation: " << rotated.status().message();
        ++it;
        continue;
      }
      // What is left of a stopped task's group (children that ignored
      // SIGTERM) goes with it.
      if (task.stopping) launcher_->SignalGroup(task.pid, SIGKILL);
      std::string tail = Redact(TaskLogTail(task.dir), options_.token);
      if (!tail.empty()) {
        report.__set_message(report.__isset.message ? report.message + "\n" + tail : tail);
      }
      PX_LOG(INFO) << DescribeTask(task.key) << " ended: "
                   << (report.__isset.exit_code ? "exit code " + std::to_string(report.exit_code)
                       : report.__isset.signal ? "signal " + std::to_string(report.signal)
                                               : std::string(kAdoptedMessage));
      SaveResult(task.dir, report);
      std::error_code ec;
      fs::remove(task.dir + "/" + kPidFile, ec);
      ended_.insert(it->first);
      QueueReport(std::move(report));
      it = tasks_.erase(it);
    }
  }
  FlushReports();
}

bool Agent::ReadyToPoll() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (reports_.empty()) return true;
    next_flush_at_ = 0;
  }
  return FlushReports();
}

bool Agent::FlushReports() {
  std::lock_guard<std::mutex> flush_lock(flush_mu_);
  bool stopping = false;
  if (!options_.report_on_stop) {
    std::lock_guard<std::mutex> lock(stop_mu_);
    stopping = stopping_;
  }
  if (stopping) {
    std::lock_guard<std::mutex> lock(mu_);
    if (!reports_.empty() && !withheld_logged_) {
      PX_LOG(INFO) << "stopping: " << reports_.size()
                   << " task reports withheld (--no-report-on-stop; results saved in the task "
                      "directories)";
      withheld_logged_ = true;
    }
    return true;
  }
  std::vector<rpc::TaskReport> batch;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (reports_.empty()) return true;
    if (clock_->NowMillis() < next_flush_at_) return false;
    batch.assign(reports_.begin(), reports_.end());
  }
  Status s = link_->Report(options_.name, batch);
  std::lock_guard<std::mutex> lock(mu_);
  if (s.ok() || s.code() == StatusCode::kInvalidArgument ||
      s.code() == StatusCode::kFailedPrecondition) {
    if (!s.ok()) {
      PX_LOG(WARNING) << "coordinator refused " << batch.size()
                      << " task reports, dropping them: " << s.message();
    }
    // Only this thread removes reports, so the batch is still at the front.
    reports_.erase(reports_.begin(), reports_.begin() + static_cast<long>(batch.size()));
    for (const rpc::TaskReport& r : batch) {
      std::error_code ec;
      if (r.state != rpc::TaskState::RUNNING) fs::remove(TaskDir(r.key) + "/" + kResultFile, ec);
    }
    flush_backoff_ms_ = 0;
    return reports_.empty();
  }
  flush_backoff_ms_ =
      std::clamp<int64_t>(flush_backoff_ms_ * 2, 100, std::max<int64_t>(100, options_.max_backoff_ms));
  next_flush_at_ = clock_->NowMillis() + flush_backoff_ms_;
  PX_LOG(WARNING) << "cannot send " << reports_.size() << " task reports (will retry): "
                  << s.message();
  return false;
}

StatusOr<rpc::LogChunk> Agent::ReadLog(const rpc::TaskKey& key, int64_t offset,
                                       int32_t max_bytes) {
  std::string dir = TaskDir(key);
  bool ended;
  {
    std::lock_guard<std::mutex> lock(mu_);
    ended = tasks_.count(TaskDirName(key)) == 0;
  }
  std::error_code ec;
  if (!fs::exists(TaskLogPath(dir), ec)) {
    return NotFound("agent '" + options_.name + "' has no log of " + DescribeTask(key));
  }
  std::lock_guard<std::mutex> log_lock(log_mu_);
  return ReadTaskLog(dir, offset, max_bytes, ended);
}

bool Agent::WaitFor(int64_t millis) {
  std::unique_lock<std::mutex> lock(stop_mu_);
  cv_.wait_for(lock, std::chrono::milliseconds(millis), [&] { return stopping_; });
  return !stopping_;
}

void Agent::Stop() {
  {
    std::lock_guard<std::mutex> lock(stop_mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  link_->CancelPoll();
}

void Agent::HeartbeatLoop() {
  int64_t backoff = 0;
  while (WaitFor(backoff > 0 ? backoff : options_.heartbeat_ms)) {
    Status s = EnsureRegistered();
    if (s.ok()) {
      StatusOr<bool> known = link_->Heartbeat(options_.name);
      if (known.ok() && !*known) {
        PX_LOG(WARNING) << "the coordinator does not know agent '" << options_.name
                        << "': registering again";
        registered_ = false;
        s = EnsureRegistered();
      } else if (!known.ok()) {
        s = known.status();
      }
    }
    if (s.ok()) {
      backoff = 0;
      continue;
    }
    if (IsFatalRegistrationError(s) && !registered_) {
      {
        std::lock_guard<std::mutex> lock(stop_mu_);
        if (fatal_.ok()) fatal_ = s;
      }
      Stop();
      return;
    }
    backoff = std::clamp<int64_t>(backoff * 2, options_.heartbeat_ms,
                                   std::max(options_.heartbeat_ms, options_.max_backoff_ms));
    PX_LOG(WARNING) << "heartbeat: " << s.message() << " (retrying in " << backoff << " ms)";
  }
}

void Agent::SupervisorLoop() {
  while (WaitFor(options_.tick_ms)) Tick();
}

void Agent::StopAllTasks() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (tasks_.empty()) return;
    PX_LOG(INFO) << "stopping " << tasks_.size() << " tasks before exiting";
    std::vector<rpc::TaskKey> keys;
    for (const auto& [name, task] : tasks_) keys.push_back(task.key);
    for (const rpc::TaskKey& key : keys) StopTask(key);
  }
  // Real processes end in real time: tick until they are reaped. Tick sends
  // SIGKILL once grace_ms has passed on clock_.
  auto deadline = std::chrono::steady_clock::now() +
                  std::chrono::milliseconds(options_.grace_ms + 1'000);
  while (std::chrono::steady_clock::now() < deadline) {
    Tick();
    if (RunningTasks().empty()) return;
    std::this_thread::sleep_for(std::chrono::milliseconds(std::min<int64_t>(options_.tick_ms, 20)));
  }
  PX_LOG(WARNING) << "some tasks did not end after SIGKILL";
}

Status Agent::Run() {
  std::thread heartbeat([this] { HeartbeatLoop(); });
  std::thread supervisor([this] { SupervisorLoop(); });
  int64_t backoff = 0;
  while (WaitFor(backoff)) {
    Status s = EnsureRegistered();
    if (s.ok() && !ReadyToPoll()) {
      s = Unavailable("task reports not delivered yet; polling after them");
    }
    if (s.ok()) {
      StatusOr<rpc::PollResponse> response = link_->Poll(MakePollRequest());
      if (response.ok()) {
        if (!response->known) {
          PX_LOG(WARNING) << "the coordinator does not know agent '" << options_.name
                          << "': registering again";
          registered_ = false;
        } else {
          HandlePoll(*response);
        }
        backoff = 0;
        continue;
      }
      s = response.status();
    }
    if (IsFatalRegistrationError(s) && !registered_) {
      std::lock_guard<std::mutex> lock(stop_mu_);
      if (fatal_.ok()) fatal_ = s;
      break;
    }
    backoff = std::clamp<int64_t>(backoff * 2, 100, std::max<int64_t>(100, options_.max_backoff_ms));
    PX_LOG(WARNING) << "coordinator: " << s.message() << " (retrying in " << backoff << " ms)";
  }
  Stop();
  heartbeat.join();
  supervisor.join();
  if (options_.stop_tasks_on_exit) StopAllTasks();
  Tick();  // a last chance for reports already queued
  std::lock_guard<std::mutex> lock(stop_mu_);
  if (fatal_.ok() && registered_) {
    // A clean stop gives up the name, so a restart (or a replacement
    // elsewhere) registers at once.
    if (Status s = link_->Deregister(options_.name, workdir_id_); !s.ok()) {
      PX_LOG(WARNING) << "could not deregister from the coordinator: " << s.message();
    } else {
      PX_LOG(INFO) << "deregistered agent '" << options_.name << "'";
    }
  }
  return fatal_;
}

}  // namespace parallax::agent
