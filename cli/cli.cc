#include "cli/cli.h"

#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <thread>
#include <utility>

#include "cli/export.h"
#include "cli/job_file.h"
#include "cli/job_metrics.h"
#include "cli/plan_command.h"
#include "core/plan/plan_view.h"
#include "cli/run.h"
#include "cli/set_command.h"
#include "cli/slurm_command.h"
#include "cli/task_log.h"
#include "core/calibration/host_calibration.h"
#include "core/base/secret.h"
#include "core/base/time_format.h"
#include "core/config/job_config.h"
#include "core/plan/job_plan.h"
#include "core/rpc/coordinator_client.h"
#include "core/rpc/tls.h"
#include "schemas/coordinator_constants.h"

namespace parallax::cli {
namespace {

constexpr char kDefaultCoordinator[] = "127.0.0.1:7070";

std::string StateName(rpc::JobState::type s) {
  auto it = rpc::_JobState_VALUES_TO_NAMES.find(s);
  return it == rpc::_JobState_VALUES_TO_NAMES.end() ? "UNKNOWN" : it->second;
}

// Where the coordinator address came from, for messages.
struct Target {
  std::string address;
  std::string source;  // "--coordinator", "PARALLAX_COORDINATOR", "the default"
};

// Prints a table with columns padded to their widest cell.
void PrintTable(std::ostream& out, const std::vector<std::vector<std::string>>& rows) {
  std::vector<size_t> widths;
  for (const auto& row : rows) {
    widths.resize(std::max(widths.size(), row.size()));
    for (size_t i = 0; i < row.size(); ++i) widths[i] = std::max(widths[i], row[i].size());
  }
  for (const auto& row : rows) {
    std::string line;
    for (size_t i = 0; i < row.size(); ++i) {
      line += row[i];
      if (i + 1 < row.size()) line += std::string(widths[i] - row[i].size() + 2, ' ');
    }
    out << line << "\n";
  }
}

nlohmann::json JobJson(const rpc::JobInfo& j) {
  nlohmann::json o = {
      {"id", j.id},
      {"name", j.name},
      {"state", StateName(j.state)},
      {"workers", j.workers},
      {"step", j.step},
      {"attempt", j.attempt},
      {"created", FormatRfc3339(j.created)},
      {"updated", FormatRfc3339(j.updated)},
  };
  if (j.__isset.reason) o["reason"] = j.reason;
  if (j.__isset.job_path) o["job_path"] = j.job_path;
  if (j.__isset.submitted_by) o["submitted_by"] = j.submitted_by;
  if (j.__isset.waiting_for) o["waiting_for"] = j.waiting_for;
  if (j.__isset.shard_restarts) {
    o["shard_restarts"] = j.shard_restarts;
    o["lost_updates"] = j.lost_updates;
    o["lost_updates_unknown"] = j.lost_updates_unknown;
  }
  return o;
}

// The rows of `parallax status JOB`'s first table.
std::vector<std::vector<std::string>> JobRows(const rpc::JobInfo& j) {
  std::vector<std::vector<std::string>> rows = {
      {"id:", std::to_string(j.id)},          {"name:", j.name},
      {"state:", StateName(j.state)},         {"workers:", std::to_string(j.workers)},
      {"step:", std::to_string(j.step)},      {"attempt:", std::to_string(j.attempt)},
      {"created:", FormatRfc3339(j.created)}, {"updated:", FormatRfc3339(j.updated)},
  };
  if (j.__isset.waiting_for) rows.push_back({"waiting for:", j.waiting_for});
  if (j.__isset.shard_restarts) {
    // PS shards started again alone (async, ssp) and what they lost.
    std::string lost = std::to_string(j.lost_updates) + " updates lost";
    if (j.lost_updates_unknown > 0) {
      lost += ", and an unknown number for " + std::to_string(j.lost_updates_unknown) +
              " restart(s)";
    }
    rows.push_back({"shard restarts:", std::to_string(j.shard_restarts) + " (" + lost + ")"});
  }
  if (j.__isset.reason) rows.push_back({"reason:", j.reason});
  if (j.__isset.job_path) rows.push_back({"job file:", j.job_path});
  if (j.__isset.submitted_by) rows.push_back({"submitted by:", j.submitted_by});
  return rows;
}

class Cli {
 public:
  Cli(const CliEnvironment& env, std::ostream& out, std::ostream& err)
      : env_(env), out_(out), err_(err) {}

  int Run(const std::vector<std::string>& args);

 private:
  Target ResolveTarget() const {
    if (!coordinator_flag_.empty()) return {coordinator_flag_, "--coordinator"};
    if (!env_.coordinator.empty()) return {env_.coordinator, "PARALLAX_COORDINATOR"};
    return {kDefaultCoordinator, "the default"};
  }

  // Connects or prints why not; returns the exit code to use on failure via `code`.
  std::unique_ptr<CoordinatorClient> ConnectOrReport(int* code);
  bool LoadSecret(std::string* secret);
  // The CA file from --tls-ca or $PARALLAX_TLS_CA ("" for plaintext); false
  // (after saying why) when it cannot be used.
  bool LoadTlsCa(std::string* ca_file);
  // Maps a failed Status to an exit code and prints it.
  int Report(const Status& status);

  int Submit();
  // The text and config of --job / JOB.toml, or nullopt after saying what is
  // wrong and that `not_done`.
  std::optional<std::pair<std::string, JobConfig>> ReadValidJobFile(const char* not_done);
  int Status_();
  // `status --json`: {"jobs": [...]}, with a JOB its metrics, plan (and
  // with --points every metric point of its attempt) too.
  int StatusJson(CoordinatorClient& client, const std::vector<rpc::JobInfo>& jobs);
  // The plan of the job's current attempt, when rank 0 has put it.
  void PrintPlan(CoordinatorClient& client, const rpc::JobInfo& job);
  int Cancel();
  int Replan();
  int Agents();
  int Events();
  int Drain();
  int Resume();
  int Set();
  int Logs();
  int RunCommand();
  int SlurmCommand();
  int Export();
  int Plan();

  // The subcommands, each calling back into the function above that sets
  // `result_`.
  void AddClusterCommands(
      CLI::App* app);  // submit, status, cancel, agents, events, drain, resume, logs
  void AddLocalCommands(CLI::App* app);  // run, export, plan
  void AddSlurmCommands(CLI::App* app);  // slurm (and its per-node slurm-agent)
  // A subcommand's JOB argument.
  CLI::Option* AddJobId(CLI::App* sub);

  int result_ = 0;  // the exit code of the subcommand that ran

  const CliEnvironment& env_;
  std::ostream& out_;
  std::ostream& err_;

  std::string coordinator_flag_;
  std::string token_flag_;
  std::string secret_file_flag_;
  std::string tls_ca_flag_;
  std::string tls_cert_;  // run: the embedded daemons' certificate
  std::string tls_key_;
  std::string job_file_;
  int64_t job_id_ = 0;
  bool json_ = false;
  bool points_ = false;  // status --points
  std::string reason_;
  int limit_ = 0;
  std::string agent_;
  bool undo_ = false;
  std::string task_ = "trainer/0";
  int attempt_ = 0;
  bool follow_ = false;
  std::string db_;
  std::string state_dir_ = ".parallax";
  std::string timeline_dir_;
  std::string http_;             // run: the embedded coordinator's --http
  std::string http_token_file_;  // run: and its --http-token-file
  int64_t export_step_ = -1;
  std::string export_out_;
  PlanCommandOptions plan_;
  bool plan_from_coordinator_ = false;  // parallax plan --from-coordinator
  std::vector<std::string> settings_;  // set: NAME=VALUE words
  int64_t export_chunk_rows_ = 65536;
  int resume_workers_ = 0;   // resume --workers (0: the job's own)
  int resume_shards_ = -1;   // resume --shards (-1: the job's own)
  SlurmOptions slurm_;
  SlurmAgentOptions slurm_agent_;
};

// The shared secret from --secret-file, --token, $PARALLAX_SECRET_FILE or
// $PARALLAX_TOKEN; false (after saying why) when the file is unusable.
bool Cli::LoadSecret(std::string* secret) {
  std::string warning;
  StatusOr<std::string> s =
      ResolveSecret({secret_file_flag_, token_flag_, env_.secret_file, env_.token}, &warning);
  if (!warning.empty()) err_ << "parallax: warning: " << warning << "\n";
  if (!s.ok()) {
    err_ << "parallax: " << s.status().message() << "\n";
    return false;
  }
  *secret = std::move(s).value();
  return true;
}

bool Cli::LoadTlsCa(std::string* ca_file) {
  const bool from_flag = !tls_ca_flag_.empty();
  *ca_file = from_flag ? tls_ca_flag_ : env_.tls_ca;
  if (Status s = CheckTlsCaFile(*ca_file, from_flag ? "--tls-ca" : "PARALLAX_TLS_CA"); !s.ok()) {
    err_ << "parallax: " << s.message() << "\n";
    return false;
  }
  return true;
}

std::unique_ptr<CoordinatorClient> Cli::ConnectOrReport(int* code) {
  Target target = ResolveTarget();
  CoordinatorClientOptions options;
  options.address = target.address;
  if (!LoadSecret(&options.auth_token) || !LoadTlsCa(&options.tls_ca_file)) {
    *code = kExitUsage;
    return nullptr;
  }
  options.client_name = "cli";
  StatusOr<std::unique_ptr<CoordinatorClient>> client = CoordinatorClient::Connect(options);
  if (client.ok()) return std::move(client).value();
  const Status& s = client.status();
  if (s.code() == StatusCode::kUnavailable && s.message().find("--tls-ca") != std::string::npos) {
    // It answered the connection: a TLS mismatch, explained in the message.
    err_ << "parallax: " << s.message() << "\n";
    *code = kExitUnreachable;
  } else if (s.code() == StatusCode::kUnavailable) {
    err_ << "parallax: " << s.message() << "\n"
         << "  (address from " << target.source
         << "; start one with `parallax-coordinator --listen " << target.address
         << "`, or point --coordinator / PARALLAX_COORDINATOR at a running one)\n";
    *code = kExitUnreachable;
  } else if (s.code() == StatusCode::kInvalidArgument) {
    err_ << "parallax: " << s.message() << " (from " << target.source << ")\n";
    *code = kExitUsage;
  } else {
    err_ << "parallax: " << s.message() << "\n";
    *code = kExitFailed;
  }
  return nullptr;
}

int Cli::Report(const Status& status) {
  err_ << "parallax: " << status.message() << "\n";
  switch (status.code()) {
    case StatusCode::kUnavailable:
      return kExitUnreachable;
    case StatusCode::kInvalidArgument:
      return kExitUsage;
    default:
      return kExitFailed;
  }
}

std::optional<std::pair<std::string, JobConfig>> Cli::ReadValidJobFile(const char* not_done) {
  // Validate here first: nothing is sent from an invalid file, and the user
  // sees every problem with its file:line:column.
  StatusOr<std::string> text = ReadJobFile(job_file_);
  if (!text.ok()) {
    err_ << "parallax: " << text.status().message() << "\n";
    return std::nullopt;
  }
  // The data and checkpoint directory are read on the agents' hosts, which
  // check them when a task is placed: one missing here is only a warning.
  std::vector<std::string> missing;
  StatusOr<JobConfig> config = ParseJobConfig(*text, job_file_, {.missing_paths = &missing});
  if (!config.ok()) {
    err_ << config.status().message() << "\n";
    err_ << "parallax: " << job_file_ << " is not a valid job file; " << not_done << "\n";
    return std::nullopt;
  }
  for (const std::string& line : missing) {
    err_ << "parallax: warning: " << line
         << " on this host; submitting anyway: the agents' hosts check it when they start the "
            "job's tasks (it must be at this absolute path on every host)\n";
  }
  return std::make_pair(std::move(text).value(), std::move(config).value());
}

int Cli::Submit() {
  auto valid = ReadValidJobFile("nothing was submitted");
  if (!valid) return kExitUsage;
  const std::string& text = valid->first;
  for (const std::string& line : EnvWarnings(valid->second, job_file_)) {
    err_ << "parallax: warning: " << line << "\n";
  }
  int code = kExitOk;
  std::unique_ptr<CoordinatorClient> client = ConnectOrReport(&code);
  if (!client) return code;
  std::error_code ec;
  std::string abs = std::filesystem::absolute(job_file_, ec).lexically_normal().string();
  StatusOr<rpc::JobInfo> job = client->SubmitJob(text, ec ? job_file_ : abs);
  if (!job.ok()) return Report(job.status());
  err_ << "submitted job " << job->id << " (" << job->name << ", " << job->workers
       << " workers) to " << client->options().address << "\n";
  out_ << job->id << "\n";
  return kExitOk;
}

int Cli::Status_() {
  if (points_ && job_id_ <= 0) {
    err_ << "parallax: status --points needs a JOB: `parallax status JOB --json --points`\n";
    return kExitUsage;
  }
  int code = kExitOk;
  std::unique_ptr<CoordinatorClient> client = ConnectOrReport(&code);
  if (!client) return code;
  std::vector<rpc::JobInfo> jobs;
  if (job_id_ > 0) {
    StatusOr<rpc::JobInfo> job = client->GetJob(job_id_);
    if (!job.ok()) return Report(job.status());
    jobs.push_back(*job);
  } else {
    rpc::ListJobsRequest request;
    if (limit_ > 0) request.__set_limit(limit_);
    StatusOr<std::vector<rpc::JobInfo>> list = client->ListJobs(request);
    if (!list.ok()) return Report(list.status());
    jobs = std::move(list).value();
  }
  if (json_) return StatusJson(*client, jobs);
  if (job_id_ > 0) {
    const rpc::JobInfo& j = jobs.front();
    PrintTable(out_, JobRows(j));
    std::vector<rpc::TaskInfo> tasks;
    Status st = client->Call(
        [&](rpc::CoordinatorClient& c) { c.ListTasks(tasks, client->Header(), j.id); });
    if (st.ok() && !tasks.empty()) {
      std::vector<std::vector<std::string>> trows = {{"TASK", "ATTEMPT", "AGENT", "STATE", "EXIT"}};
      for (const auto& t : tasks) {
        if (t.attempt != j.attempt) continue;
        auto state = rpc::_TaskState_VALUES_TO_NAMES.find(t.state);
        std::string state_name =
            state == rpc::_TaskState_VALUES_TO_NAMES.end() ? "?" : state->second;
        std::string exit = t.__isset.exit_code ? std::to_string(t.exit_code)
                           : t.__isset.signal  ? "signal " + std::to_string(t.signal)
                                               : "";
        if (t.__isset.not_launched && t.not_launched) {
          // Never started: the plan put nothing on the PS.
          state_name = "NOT LAUNCHED";
          exit = "";
        }
        // A shard started again alone: its generation.
        const std::string generation = t.__isset.generation && t.generation > 1
                                           ? " (generation " + std::to_string(t.generation) + ")"
                                           : "";
        trows.push_back({std::string(t.role == rpc::TaskRole::TRAINER ? "trainer/" : "ps/") +
                             std::to_string(t.index) + generation,
                         std::to_string(t.attempt), t.agent_name, state_name, exit});
      }
      out_ << "\n";
      PrintTable(out_, trows);
    }
    PrintPlan(*client, j);
    auto metrics = LatestMetricsTable(client.get(), j.id, j.attempt, j.step, j.workers);
    if (metrics.ok() && !metrics->empty()) {
      out_ << "\nnewest metrics per rank (times and bytes per step, sent/received):\n";
      PrintTable(out_, *metrics);
    }
    auto dynamic = DynamicTablesTable(client.get(), j.id);
    if (dynamic.ok() && !dynamic->empty()) {
      out_ << "\ndynamic tables (every shard together; counters since each shard started):\n";
      PrintTable(out_, *dynamic);
    }
    return kExitOk;
  }
  if (jobs.empty()) {
    out_ << "no jobs (submit one with `parallax submit JOB.toml`)\n";
    return kExitOk;
  }
  std::vector<std::vector<std::string>> rows = {
      {"ID", "NAME", "STATE", "WORKERS", "STEP", "ATTEMPT", "CREATED", "UPDATED"}};
  for (const auto& j : jobs) {
    rows.push_back({std::to_string(j.id), j.name, StateName(j.state), std::to_string(j.workers),
                    std::to_string(j.step), std::to_string(j.attempt), FormatRfc3339(j.created),
                    FormatRfc3339(j.updated)});
  }
  PrintTable(out_, rows);
  return kExitOk;
}

int Cli::StatusJson(CoordinatorClient& client, const std::vector<rpc::JobInfo>& jobs) {
  nlohmann::json arr = nlohmann::json::array();
  for (const auto& j : jobs) arr.push_back(JobJson(j));
  if (job_id_ > 0) {
    auto m = LatestMetricsJson(&client, job_id_, jobs[0].attempt, jobs[0].step, jobs[0].workers);
    if (m.ok()) arr[0]["metrics"] = nlohmann::json::parse(*m);
    auto dynamic = DynamicTablesJson(&client, job_id_);
    if (dynamic.ok() && *dynamic != "{}") arr[0]["dynamic_tables"] = nlohmann::json::parse(*dynamic);
    if (points_) {
      // Asked for: no "points" would read as a job without any.
      StatusOr<std::string> points = AttemptPointsJson(&client, job_id_, jobs[0].attempt);
      if (!points.ok()) return Report(points.status());
      arr[0]["points"] = nlohmann::json::parse(*points);
    }
    std::string plan;
    if (jobs[0].attempt > 0 && client
                                   .Call([&](rpc::CoordinatorClient& c) {
                                     c.GetPlan(plan, client.Header(), job_id_, jobs[0].attempt, 0);
                                   })
                                   .ok()) {
      arr[0]["plan"] = nlohmann::json::parse(plan, nullptr, /*allow_exceptions=*/false);
    }
  }
  out_ << nlohmann::json{{"jobs", arr}}.dump() << "\n";
  return kExitOk;
}

void Cli::PrintPlan(CoordinatorClient& client, const rpc::JobInfo& job) {
  if (job.attempt <= 0) return;
  std::string plan;
  Status st = client.Call(
      [&](rpc::CoordinatorClient& c) { c.GetPlan(plan, client.Header(), job.id, job.attempt, 0); });
  if (!st.ok()) return;  // rank 0 has not put it yet
  out_ << "\nplan of attempt " << job.attempt << ":\n";
  StatusOr<plan::JobPlan> parsed = plan::ParseJobPlan(plan);
  if (!parsed.ok()) {
    out_ << "  the stored plan is not a valid plan: " << parsed.status().message() << "\n";
    return;
  }
  if (parsed->has_ps()) {
    out_ << "local aggregation: "
         << (parsed->local_aggregation
                 ? "on (each host's ranks sum their sparse gradients, exchanged within the host "
                   "as LOCAL AGG bytes, and one rank per host pushes them)"
                 : "off (every rank pushes its own sparse gradients)")
         << "\n";
  }
  const plan::PlanTable table = plan::PlanTableOf(*parsed);
  std::vector<std::vector<std::string>> rows = {table.columns};
  rows.insert(rows.end(), table.rows.begin(), table.rows.end());
  PrintTable(out_, rows);
  out_ << "machine figures:\n";
  for (const std::string& line : plan::PlanFigureLines(*parsed)) out_ << "  " << line << "\n";
}

int Cli::Plan() {
  std::unique_ptr<CoordinatorClient> client;  // outlives RunPlanCommand (straggler_of)
  if (plan_from_coordinator_) {
    int code = kExitOk;
    client = ConnectOrReport(&code);
    if (!client) return code;
    StatusOr<std::vector<plan::HostFigures>> figures = calibration::FetchHostFigures(client.get());
    if (!figures.ok()) return Report(figures.status());
    plan_.host_figures = std::move(figures).value();
    CoordinatorClient* coord = client.get();
    plan_.straggler_of = [this, coord](int workers) -> std::optional<plan::MeasuredStraggler> {
      StatusOr<std::optional<plan::MeasuredStraggler>> s =
          calibration::FetchStraggler(coord, workers);
      if (s.ok()) return *s;
      err_ << "parallax plan: the measured wait for the slowest rank is not available: "
           << s.status().ToString() << "\n";
      return std::nullopt;
    };
  }
  Status st = RunPlanCommand(plan_, out_);
  return st.ok() ? kExitOk : Report(st);
}

int Cli::Export() {
  int code = kExitOk;
  std::unique_ptr<CoordinatorClient> client = ConnectOrReport(&code);
  if (!client) return code;
  ExportOptions o;
  o.job_id = job_id_;
  if (export_step_ >= 0) o.step = export_step_;
  o.out_dir = export_out_;
  o.chunk_rows = export_chunk_rows_;
  Status st = ExportCheckpoint(client.get(), o, out_);
  return st.ok() ? kExitOk : Report(st);
}

int Cli::Cancel() {
  int code = kExitOk;
  std::unique_ptr<CoordinatorClient> client = ConnectOrReport(&code);
  if (!client) return code;
  StatusOr<rpc::JobInfo> job = client->CancelJob(job_id_, reason_);
  if (!job.ok()) return Report(job.status());
  out_ << "job " << job->id << " " << StateName(job->state) << "\n";
  return kExitOk;
}

int Cli::Replan() {
  int code = kExitOk;
  std::unique_ptr<CoordinatorClient> client = ConnectOrReport(&code);
  if (!client) return code;
  StatusOr<rpc::JobInfo> job = client->ReplanJob(job_id_, reason_);
  if (!job.ok()) return Report(job.status());
  out_ << "job " << job->id << " attempt " << job->attempt << " re-plans at its next checkpoint\n";
  return kExitOk;
}

namespace {

// "worker" or "ps", as parallax-agent's --role spells it.
const char* AgentRoleName(const rpc::AgentInfo& a) {
  return a.__isset.role && a.role == rpc::AgentRole::PS ? "ps" : "worker";
}

}  // namespace

int Cli::Agents() {
  int code = kExitOk;
  std::unique_ptr<CoordinatorClient> client = ConnectOrReport(&code);
  if (!client) return code;
  StatusOr<std::vector<rpc::AgentInfo>> agents = client->ListAgents();
  if (!agents.ok()) return Report(agents.status());
  if (json_) {
    nlohmann::json arr = nlohmann::json::array();
    for (const auto& a : *agents) {
      arr.push_back({{"name", a.name},
                     {"address", a.address},
                     {"slots", a.slots},
                     {"gpus", a.gpus},
                     {"role", AgentRoleName(a)},
                     {"hostname", a.hostname},
                     {"version", a.version},
                     {"registered", FormatRfc3339(a.registered)},
                     {"last_seen", FormatRfc3339(a.last_seen)},
                     {"alive", a.alive},
                     {"draining", a.draining},
                     {"stopped", a.stopped},
                     {"warning", a.warning}});
    }
    out_ << nlohmann::json{{"agents", arr}}.dump() << "\n";
    return kExitOk;
  }
  if (agents->empty()) {
    out_ << "no agents registered (start one with `parallax-agent --coordinator "
         << client->options().address << " ...`)\n";
    return kExitOk;
  }
  std::vector<std::vector<std::string>> rows = {
      {"NAME", "ADDRESS", "ROLE", "SLOTS", "GPUS", "ALIVE", "LAST SEEN"}};
  for (const auto& a : *agents) {
    rows.push_back({a.name, a.address, AgentRoleName(a), std::to_string(a.slots),
                    std::to_string(a.gpus),
                    a.alive ? (a.draining ? "draining" : "yes") : (a.stopped ? "stopped" : "no"),
                    FormatRfc3339(a.last_seen)});
  }
  PrintTable(out_, rows);
  for (const auto& a : *agents) {
    if (!a.warning.empty()) out_ << "warning: " << a.warning << "\n";
  }
  return kExitOk;
}

int Cli::Events() {
  int code = kExitOk;
  std::unique_ptr<CoordinatorClient> client = ConnectOrReport(&code);
  if (!client) return code;
  StatusOr<std::vector<rpc::Event>> events = client->GetEvents(job_id_, 0, limit_);
  if (!events.ok()) return Report(events.status());
  if (json_) {
    nlohmann::json arr = nlohmann::json::array();
    for (const auto& e : *events) {
      arr.push_back({{"seq", e.seq},
                     {"job_id", e.job_id},
                     {"time", FormatRfc3339Millis(e.time)},
                     {"kind", e.kind},
                     {"message", e.message}});
    }
    out_ << nlohmann::json{{"events", arr}}.dump() << "\n";
    return kExitOk;
  }
  std::vector<std::vector<std::string>> rows = {{"TIME", "KIND", "MESSAGE"}};
  for (const auto& e : *events) rows.push_back({FormatRfc3339Millis(e.time), e.kind, e.message});
  PrintTable(out_, rows);
  return kExitOk;
}

int Cli::Drain() {
  int code = kExitOk;
  std::unique_ptr<CoordinatorClient> client = ConnectOrReport(&code);
  if (!client) return code;
  Status s = client->Call(
      [&](rpc::CoordinatorClient& c) { c.DrainAgent(client->Header(), agent_, !undo_); });
  if (!s.ok()) return Report(s);
  out_ << "agent " << agent_
       << (undo_ ? " takes new tasks again" : " is draining: running tasks stay, no new ones")
       << "\n";
  return kExitOk;
}

int Cli::Resume() {
  rpc::ResumeOptions options;
  if (resume_workers_ > 0) options.__set_workers(resume_workers_);
  if (resume_shards_ >= 0) options.__set_shards(resume_shards_);
  if (!job_file_.empty()) {
    // An edited job file: checked here first, as a submit is.
    auto valid = ReadValidJobFile("nothing was resumed");
    if (!valid) return kExitUsage;
    std::error_code ec;
    std::string abs = std::filesystem::absolute(job_file_, ec).lexically_normal().string();
    options.__set_job_text(valid->first);
    options.__set_job_path(ec ? job_file_ : abs);
  }
  int code = kExitOk;
  std::unique_ptr<CoordinatorClient> client = ConnectOrReport(&code);
  if (!client) return code;
  rpc::JobInfo job;
  Status s = client->Call(
      [&](rpc::CoordinatorClient& c) { c.ResumeJob(job, client->Header(), job_id_, options); });
  if (!s.ok()) return Report(s);
  out_ << "job " << job.id << " " << StateName(job.state) << " (attempt " << job.attempt << ", "
       << job.workers << " workers)\n";
  return kExitOk;
}

int Cli::Set() {
  StatusOr<std::string> consistency = ParseSetArguments(settings_);
  if (!consistency.ok()) {
    err_ << "parallax: set: " << consistency.status().message() << "\n";
    return kExitUsage;
  }
  int code = kExitOk;
  std::unique_ptr<CoordinatorClient> client = ConnectOrReport(&code);
  if (!client) return code;
  Status s = RunSetConsistency(*client, job_id_, *consistency, std::chrono::seconds(30), out_);
  return s.ok() ? kExitOk : Report(s);
}

int Cli::Logs() {
  // --task ROLE/INDEX
  size_t slash = task_.find('/');
  std::string role = task_.substr(0, slash);
  std::string index = slash == std::string::npos ? "" : task_.substr(slash + 1);
  if ((role != "trainer" && role != "ps") || index.empty() ||
      index.find_first_not_of("0123456789") != std::string::npos || index.size() > 6) {
    err_ << "parallax: --task must be trainer/N or ps/N, got '" << task_ << "'\n";
    return kExitUsage;
  }
  int code = kExitOk;
  std::unique_ptr<CoordinatorClient> client = ConnectOrReport(&code);
  if (!client) return code;
  StatusOr<rpc::JobInfo> job = client->GetJob(job_id_);
  if (!job.ok()) return Report(job.status());
  std::vector<rpc::TaskInfo> tasks;
  Status s = client->Call(
      [&](rpc::CoordinatorClient& c) { c.ListTasks(tasks, client->Header(), job_id_); });
  if (!s.ok()) return Report(s);
  int attempt = attempt_ > 0 ? attempt_ : job->attempt;
  const rpc::TaskInfo* task = nullptr;
  for (const auto& t : tasks) {
    if (t.attempt == attempt && (t.role == rpc::TaskRole::TRAINER) == (role == "trainer") &&
        t.index == std::stoi(index)) {
      task = &t;
    }
  }
  if (task == nullptr) {
    err_ << "parallax: job " << job_id_ << " has no task " << task_ << " in attempt " << attempt
         << (job->attempt == 0
                 ? " (it has not started: see `parallax status " + std::to_string(job_id_) + "`)"
                 : "")
         << "\n";
    return kExitFailed;
  }
  TaskLogOptions log;
  if (!LoadSecret(&log.secret) || !LoadTlsCa(&log.tls_ca)) return kExitUsage;
  log.key.job_id = job_id_;
  log.key.attempt = attempt;
  log.key.role = role == "trainer" ? rpc::TaskRole::TRAINER : rpc::TaskRole::PS;
  log.key.index = task->index;
  log.agent_name = task->agent_name;
  log.follow = follow_;
  if (Status printed = PrintTaskLog(client.get(), log, out_, err_); !printed.ok()) {
    if (printed.code() != StatusCode::kNotFound) return Report(printed);
    err_ << "parallax: " << printed.message() << "\n";
    return kExitFailed;
  }
  return kExitOk;
}

int Cli::RunCommand() {
  RunOptions options;
  options.job_file = job_file_;
  options.db = db_;
  options.state_dir = state_dir_;
  options.timeline_dir = timeline_dir_;
  options.http = http_;
  options.http_token_file = http_token_file_;
  if (!LoadSecret(&options.token) || !LoadTlsCa(&options.tls_ca_file)) return kExitUsage;
  options.secret_file = secret_file_flag_;
  if (!tls_cert_.empty() && options.tls_ca_file.empty()) {
    err_ << "parallax: run --tls-cert needs --tls-ca (or $PARALLAX_TLS_CA): the CA that signed "
            "the certificate, for the agent and this command to trust the embedded coordinator\n";
    return kExitUsage;
  }
  if (Status s = CheckTlsServerFiles(tls_cert_, tls_key_); !s.ok()) {
    err_ << "parallax: " << s.message() << "\n";
    return kExitUsage;
  }
  options.tls_cert_file = tls_cert_;
  options.tls_key_file = tls_key_;
  // Without a certificate the embedded daemons serve plaintext, whatever CA
  // a cluster user has in $PARALLAX_TLS_CA.
  if (tls_cert_.empty()) options.tls_ca_file.clear();
  std::error_code ec;
  std::filesystem::path self = std::filesystem::canonical("/proc/self/exe", ec);
  options.bin_dir = ec ? "." : self.parent_path().string();
  options.progress_bar = isatty(STDOUT_FILENO) && &out_ == &std::cout;
  return RunJob(options, out_, err_);
}

int Cli::SlurmCommand() {
  SlurmOptions options = slurm_;
  options.job_file = job_file_;
  if (!LoadSecret(&options.token)) return kExitUsage;
  std::error_code ec;
  std::filesystem::path self = std::filesystem::canonical("/proc/self/exe", ec);
  options.bin_dir = ec ? "." : self.parent_path().string();
  options.progress_bar = isatty(STDOUT_FILENO) && &out_ == &std::cout;
  return RunSlurm(options, out_, err_);
}

CLI::Option* Cli::AddJobId(CLI::App* sub) {
  static const CLI::Validator job_id_check(
      [](std::string& text) -> std::string {
        bool digits = !text.empty() && text.size() <= 18 &&
                      text.find_first_not_of("0123456789") == std::string::npos;
        if (digits && std::stoll(text) > 0) return "";
        return "must be a job id, a positive integer as printed by `parallax submit` (got '" +
               text + "')";
      },
      "ID");

  return sub->add_option("JOB", job_id_, "job id (as printed by `parallax submit`)")
      ->check(job_id_check);
}

void Cli::AddClusterCommands(CLI::App* app) {
  CLI::App* submit = app->add_subcommand("submit",
                                         "validate JOB.toml and submit it; prints the "
                                         "job id as the last line of stdout");
  submit->add_option("JOB.toml", job_file_, "job file")->required();
  submit->callback([this] { result_ = Submit(); });

  CLI::App* status = app->add_subcommand("status", "show all jobs, or one job in detail");
  AddJobId(status);
  CLI::Option* status_json = status->add_flag(
      "--json", json_,
      "print {\"jobs\": [...]} for scripts (times in RFC 3339 UTC; with a JOB, its "
      "newest metrics and the plan of its attempt too, and, once a PS shard was "
      "started again alone, shard_restarts, lost_updates and lost_updates_unknown)");
  status
      ->add_flag("--points", points_,
                 "with --json and a JOB: also \"points\", every metric point of its current "
                 "attempt in step order, each as in \"metrics\" (all of them: thousands per "
                 "rank for a long job with a point every step)")
      ->needs(status_json);
  status->add_option("--limit", limit_, "show only the newest N jobs")
      ->check(CLI::NonNegativeNumber);
  status->callback([this] { result_ = Status_(); });

  CLI::App* cancel = app->add_subcommand("cancel", "cancel a live job");
  AddJobId(cancel)->required();
  cancel->add_option("--reason", reason_, "why (recorded in the job's events)");
  cancel->callback([this] { result_ = Cancel(); });

  CLI::App* replan = app->add_subcommand(
      "replan",
      "re-plan a running job at its next checkpoint: the attempt stops there and a new one (not "
      "a restart) resumes from it with a new plan, hot rows chosen from what it measured");
  AddJobId(replan)->required();
  replan->add_option("--reason", reason_, "why (recorded in the job's events)");
  replan->callback([this] { result_ = Replan(); });

  CLI::App* agents =
      app->add_subcommand("agents", "list the agents registered with the coordinator");
  agents->add_flag("--json", json_, "print {\"agents\": [...]} for scripts");
  agents->callback([this] { result_ = Agents(); });

  CLI::App* events = app->add_subcommand("events", "show a job's events, oldest first");
  AddJobId(events)->required();
  events->add_flag("--json", json_, "print {\"events\": [...]} for scripts");
  events->add_option("--limit", limit_, "show at most N events")->check(CLI::NonNegativeNumber);
  events->callback([this] { result_ = Events(); });

  CLI::App* drain =
      app->add_subcommand("drain", "stop placing new tasks on an agent (running ones stay)");
  drain->add_option("AGENT", agent_, "agent name (see `parallax agents`)")->required();
  drain->add_flag("--undo", undo_, "let the agent take new tasks again");
  drain->callback([this] { result_ = Drain(); });

  CLI::App* resume =
      app->add_subcommand("resume", "start a new attempt of a FAILED or CANCELLED job");
  AddJobId(resume)->required();
  resume
      ->add_option("--workers", resume_workers_,
                   "resume on M workers (sets [job] workers; data positions and PS "
                   "partitions are re-split from the checkpoint)")
      ->check(CLI::PositiveNumber);
  resume
      ->add_option("--shards", resume_shards_,
                   "resume with S PS shards (sets [ps] shards; 0: one per host)")
      ->check(CLI::NonNegativeNumber);
  resume->add_option("--job", job_file_,
                     "resume with this edited job file instead of the stored one");
  resume->callback([this] { result_ = Resume(); });

  CLI::App* set =
      app->add_subcommand("set",
                          "switch a running job's consistency at a step the coordinator picks: "
                          "consistency=async|ssp|sync [staleness=K]");
  AddJobId(set)->required();
  set->add_option("SETTING", settings_, "consistency=async|ssp|sync, and staleness=K with ssp")
      ->required();
  set->callback([this] { result_ = Set(); });

  CLI::App* logs =
      app->add_subcommand("logs", "print a task's output (stdout and stderr), read from its agent");
  AddJobId(logs)->required();
  logs->add_option("--task", task_, "trainer/N or ps/N")->capture_default_str();
  logs->add_option("--attempt", attempt_, "attempt (default: the newest)")
      ->check(CLI::PositiveNumber);
  logs->add_flag("-f,--follow", follow_, "keep printing until the task ends");
  logs->callback([this] { result_ = Logs(); });
}

void Cli::AddLocalCommands(CLI::App* app) {
  CLI::App* run = app->add_subcommand(
      "run",
      "run a job on this machine: embedded coordinator and agent (and, for a job with [ps] "
      "hosts = \"ps\", a second agent with --role ps for its PS shards: the PS hosts are then "
      "a second agent process on this machine), progress until it ends; exits 0 only if the "
      "job SUCCEEDED, 130 on Ctrl-C");
  run->add_option("JOB.toml", job_file_, "job file")->required();
  run->add_option("--state-dir", state_dir_, "database, daemon logs and task directories")
      ->capture_default_str();
  run->add_option("--db", db_, "SQLite database (default: STATE_DIR/state.db)");
  run->add_option("--timeline", timeline_dir_,
                  "every rank writes its step timeline (a Chrome trace for Perfetto) to "
                  "DIR/rank-<r>.trace.json; sets trainer.timeline (docs/PERFORMANCE.md)");
  run->add_option("--tls-cert", tls_cert_,
                  "the embedded coordinator and agent serve TLS with this PEM certificate, which "
                  "must name 127.0.0.1 (subjectAltName IP); needs --tls-key and --tls-ca");
  run->add_option("--tls-key", tls_key_, "PEM private key of --tls-cert");
  run->add_option("--http", http_,
                  "the embedded coordinator serves its web pages and /metrics on HOST:PORT (:PORT "
                  "or PORT: loopback; port 0 picks one, printed at start)");
  run->add_option("--http-token-file", http_token_file_,
                  "a read-only token the web pages require (see parallax-coordinator --help)");
  run->callback([this] { result_ = RunCommand(); });

  CLI::App* exp =
      app->add_subcommand("export",
                          "write a committed checkpoint as one .npy per variable and manifest.json "
                          "(docs/EXPORT.md)");
  AddJobId(exp)->required();
  exp->add_option("--checkpoint", export_step_, "step of the checkpoint (default: the newest)")
      ->check(CLI::NonNegativeNumber);
  exp->add_option("--out", export_out_, "output directory (created)")->required();
  exp->add_option("--chunk-rows", export_chunk_rows_, "rows of a PS table held in memory at a time")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  exp->callback([this] { result_ = Export(); });

  CLI::App* plan = app->add_subcommand(
      "plan",
      "print the plan a job with a built-in model gets, without running it: per "
      "variable its measured alpha, path, reason and bytes per step on each path");
  plan->add_option("JOB.toml", plan_.job_file, "job file")->required();
  plan->add_option("--workers", plan_.workers, "workers (default: the job's [job] workers)")
      ->check(CLI::PositiveNumber);
  plan->add_option("--hosts", plan_.hosts, "hosts the workers are spread over")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  plan->add_option("--ps-hosts", plan_.ps_hosts,
                   "PS hosts a job with [ps] hosts = \"ps\" gets (its shards = \"auto\": one "
                   "per PS host; default: as many as --hosts)")
      ->check(CLI::PositiveNumber);
  plan->add_option("--sample-batches", plan_.sample_batches,
                   "batches of rank 0 sampled to measure alpha and hot rows (default: what "
                   "the job itself samples, 4, or 16 with [ps] hot_rows: another number may "
                   "predict another plan than the job records)")
      ->check(CLI::PositiveNumber);
  plan->add_flag("--measure", plan_.measure,
                 "measure this machine's loopback and shared-memory rates first (well under a "
                 "second) and plan with them where the job's [plan] sets none");
  plan->add_flag("--from-coordinator", plan_from_coordinator_,
                 "plan with the figures the agents measured on their hosts, as the job's rank 0 "
                 "does (read from the coordinator)");
  plan->add_flag("--json", plan_.json, "print JSON instead of a table");
  plan->callback([this] { result_ = Plan(); });
}

void Cli::AddSlurmCommands(CLI::App* app) {
  CLI::App* slurm = app->add_subcommand(
      "slurm",
      "run a job inside a Slurm allocation (a batch script, or a shell on an allocated node): "
      "a coordinator on this node (its SQLite state on node-local disk), one agent per "
      "allocated node started by one srun step, [job] workers from the allocation (nodes x "
      "--ntasks-per-node, else x GPUs per node, else one per node) unless the job file sets it; "
      "progress until the job ends, then exits 0 only if it SUCCEEDED. SIGTERM (scancel, the "
      "time limit) cancels the job with that reason and stops everything it started (exit 143). "
      "docs/OPERATIONS.md, \"Under Slurm\"");
  slurm->add_option("JOB.toml", job_file_, "job file")->required();
  slurm->add_option("--ps-nodes", slurm_.ps_nodes,
                    "give the job's PS shards K nodes of their own (the last K of the "
                    "allocation, never this one), agents there run with --role ps; the job "
                    "must set [ps] hosts = \"ps\"")
      ->check(CLI::NonNegativeNumber);
  slurm->add_option("--state-dir", slurm_.state_dir,
                    "the coordinator's, srun's and each node's agent log, and a copy of the "
                    "database when it ends; every node must see it (default: "
                    "./parallax-slurm-<SLURM_JOB_ID>, in the batch script's directory)");
  slurm->add_option("--local-dir", slurm_.local_dir,
                    "node-local directory, the same path on every node: the SQLite database "
                    "(on this node) and the agents' task directories, each node under "
                    "DIR/<node> (default: $TMPDIR/parallax-slurm-<SLURM_JOB_ID>, /tmp without "
                    "$TMPDIR). Never on NFS: SQLite's locking breaks there");
  slurm->add_option("--resume", slurm_.resume_dir,
                    "DIR: the --state-dir of an earlier run of this job (in an earlier "
                    "allocation): its database is copied to this node and the newest job there "
                    "that FAILED or was CANCELLED resumes from its newest checkpoint, with this "
                    "allocation's workers, instead of a new job");
  slurm->add_option("--agent-timeout", slurm_.agent_timeout_s,
                    "seconds the agents have to register before the run stops, naming the "
                    "nodes whose agent did not, with their logs")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  slurm->callback([this] { result_ = SlurmCommand(); });

  // The per-node half, run by the srun step of `parallax slurm`: not for
  // people, so not in --help.
  CLI::App* agent = app->add_subcommand("slurm-agent", "")->group("");
  agent->add_option("--nodes", slurm_agent_.nodes, "NAME=ADDR of every node, comma-separated")
      ->required();
  agent->add_option("--ps-nodes", slurm_agent_.ps_nodes,
                    "nodes whose agent is --role ps, comma-separated");
  agent->add_option("--local-dir", slurm_agent_.local_dir, "node-local directory")->required();
  agent->add_option("--log-dir", slurm_agent_.log_dir, "where agent-<node>.log goes")->required();
  agent->add_option("AGENT", slurm_agent_.agent_argv, "parallax-agent and its flags")
      ->required();
  agent->callback([this] { result_ = RunSlurmAgent(slurm_agent_, err_); });
}

int Cli::Run(const std::vector<std::string>& args) {
  CLI::App app{"parallax: submit and watch sparsity-aware distributed training jobs", "parallax"};
  app.set_version_flag("--version",
                       "parallax 0.1.0 (protocol " +
                           std::to_string(rpc::g_coordinator_constants.PROTOCOL_VERSION) + ")");
  app.require_subcommand(1);
  app.fallthrough();
  app.add_option("--coordinator", coordinator_flag_,
                 "coordinator HOST:PORT (default: $PARALLAX_COORDINATOR, else " +
                     std::string(kDefaultCoordinator) + ")");
  app.add_option("--secret-file", secret_file_flag_, kSecretFileHelp);
  app.add_option("--token", token_flag_, kTokenHelp);
  app.add_option("--tls-ca", tls_ca_flag_, kTlsCaHelp);

  AddClusterCommands(&app);
  AddLocalCommands(&app);
  AddSlurmCommands(&app);

  std::vector<std::string> reversed(args.rbegin(), args.rend());  // CLI11 wants them reversed
  try {
    app.parse(reversed);
  } catch (const CLI::ParseError& e) {
    int code = app.exit(e, out_, err_);
    return code == 0 ? kExitOk : kExitUsage;
  }
  return result_;
}

}  // namespace

CliEnvironment CliEnvironmentFromProcess() {
  CliEnvironment env;
  if (const char* c = std::getenv("PARALLAX_COORDINATOR")) env.coordinator = c;
  if (const char* t = std::getenv("PARALLAX_TOKEN")) env.token = t;
  if (const char* f = std::getenv("PARALLAX_SECRET_FILE")) env.secret_file = f;
  if (const char* ca = std::getenv("PARALLAX_TLS_CA")) env.tls_ca = ca;
  return env;
}

int RunCli(const std::vector<std::string>& args, const CliEnvironment& env, std::ostream& out,
           std::ostream& err) {
  Cli cli(env, out, err);
  return cli.Run(args);
}

}  // namespace parallax::cli
