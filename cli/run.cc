#include "cli/run.h"

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>
#include <thread>

#include "cli/cli.h"
#include "cli/job_file.h"
#include "cli/job_watch.h"
#include "core/config/job_config.h"
#include "core/config/job_edit.h"
#include "core/rpc/coordinator_client.h"

namespace parallax::cli {
namespace {

// The embedded coordinator's web flags for `options` (none without --http).
std::vector<std::string> HttpArgs(const RunOptions& options, const std::string& port_file) {
  if (options.http.empty()) return {};
  std::vector<std::string> args = {"--http", options.http, "--http-port-file", port_file};
  if (!options.http_token_file.empty()) {
    args.insert(args.end(),
                {"--http-token-file", std::filesystem::absolute(options.http_token_file).string()});
  }
  // Task logs come from the agent, which serves TLS when the coordinator does.
  if (!options.tls_ca_file.empty()) {
    args.insert(args.end(),
                {"--agent-tls-ca", std::filesystem::absolute(options.tls_ca_file).string()});
  }
  return args;
}

// "http://HOST:PORT/" once the coordinator wrote the port it serves its web
// pages on; "" if it did not within a few seconds.
std::string WebAddress(const RunOptions& options, const std::string& port_file) {
  std::string host = "127.0.0.1";
  const size_t colon = options.http.rfind(':');
  if (colon != std::string::npos && colon > 0) host = options.http.substr(0, colon);
  for (int i = 0; i < 400; ++i) {
    std::ifstream in(port_file);
    int port = 0;
    if (in >> port && port > 0) {
      return (options.tls_cert_file.empty() ? "http://" : "https://") + host + ":" +
             std::to_string(port) + "/";
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(25));
  }
  return "";
}

// An agent of the embedded cluster: the one that runs the job's ranks, and
// for a job with [ps] hosts = "ps" a PS host (`--role ps`) beside it on this
// machine.
struct LocalAgent {
  // A fixed name: the agent comes back at the address it saved in its
  // workdir, so a later `run` on the same state directory re-registers it at
  // once.
  std::string name;
  std::string file;  // its workdir STATE_DIR/<file>/ and log STATE_DIR/<file>.log
  bool ps_host = false;
  std::unique_ptr<Daemon> daemon;

  std::string What() const { return ps_host ? "PS agent" : "agent"; }
};

// The embedded cluster: its files, the flags its daemons share, the daemons.
struct Embedded {
  std::string dir, db, port_file, http_port_file;
  std::vector<std::string> secret_args, server_tls_args, ca_args;
  std::unique_ptr<Daemon> coordinator;
  std::vector<LocalAgent> agents;  // after the coordinator: they stop first
  std::string address;             // the coordinator's, once it listens

  std::string Log(const std::string& file) const { return dir + "/" + file + ".log"; }
};

// The state directory, the daemons' shared flags and the signal handlers;
// nullopt, or the exit code after saying why not.
std::optional<int> Prepare(const RunOptions& options, Embedded* e, std::ostream& err) {
  std::error_code ec;
  std::filesystem::create_directories(options.state_dir, ec);
  if (ec) {
    err << "parallax: cannot create '" << options.state_dir << "': " << ec.message() << "\n";
    return kExitFailed;
  }
  e->dir = std::filesystem::absolute(options.state_dir).string();
  e->db = options.db.empty() ? e->dir + "/state.db" : options.db;
  e->port_file = e->dir + "/coordinator.port";
  std::filesystem::remove(e->port_file, ec);
  e->http_port_file = e->dir + "/coordinator.http-port";
  std::filesystem::remove(e->http_port_file, ec);

  // Signals: Ctrl-C and SIGTERM cancel the job instead of killing us.
  CatchStopSignals();

  if (!options.secret_file.empty()) {
    e->secret_args = {"--secret-file", std::filesystem::absolute(options.secret_file).string()};
  }
  // The daemons take TLS settings from these flags only, not from a
  // $PARALLAX_TLS_CA meant for a cluster.
  unsetenv("PARALLAX_TLS_CA");
  if (!options.tls_cert_file.empty()) {
    e->server_tls_args = {"--tls-cert", std::filesystem::absolute(options.tls_cert_file).string(),
                          "--tls-key", std::filesystem::absolute(options.tls_key_file).string()};
  }
  if (!options.tls_ca_file.empty()) {
    e->ca_args = {"--tls-ca", std::filesystem::absolute(options.tls_ca_file).string()};
  }
  return std::nullopt;
}

void Append(std::vector<std::string>* argv, const std::vector<std::string>& more) {
  argv->insert(argv->end(), more.begin(), more.end());
}

// Starts the coordinator and waits for its port; nullopt, or the exit code
// after saying why not.
std::optional<int> StartCoordinator(const RunOptions& options, Embedded* e, std::ostream& err) {
  std::vector<std::string> argv = {options.bin_dir + "/parallax-coordinator",
                                   "--listen",
                                   "127.0.0.1:0",
                                   "--db",
                                   e->db,
                                   "--port-file",
                                   e->port_file};
  Append(&argv, e->secret_args);
  Append(&argv, e->server_tls_args);
  Append(&argv, HttpArgs(options, e->http_port_file));
  e->coordinator = std::make_unique<Daemon>(argv, e->Log("coordinator"));
  for (int i = 0; i < 400 && e->address.empty(); ++i) {
    std::ifstream in(e->port_file);
    int port = 0;
    if (in >> port && port > 0) {
      e->address = "127.0.0.1:" + std::to_string(port);
    } else if (e->coordinator->Exited()) {
      break;
    } else {
      std::this_thread::sleep_for(std::chrono::milliseconds(25));
    }
  }
  if (e->address.empty()) {
    err << "parallax: the embedded coordinator did not start; its log (" << e->Log("coordinator")
        << ") ends with:\n"
        << LogTail(e->Log("coordinator")) << "\n";
    return kExitFailed;
  }
  return std::nullopt;
}

void StartAgent(const RunOptions& options, const JobConfig& config, Embedded* e,
                LocalAgent* agent) {
  // A custom trainer lives next to its job file (schemas/job.md).
  std::string job_dir =
      std::filesystem::absolute(options.job_file).lexically_normal().parent_path().string();
  std::vector<std::string> argv = {options.bin_dir + "/parallax-agent",
                                   "--coordinator",
                                   e->address,
                                   "--name",
                                   agent->name,
                                   "--workdir",
                                   e->dir + "/" + agent->file,
                                   "--slots",
                                   std::to_string(config.job.workers),
                                   "--grace-ms",
                                   "2000",
                                   "--stop-tasks-on-exit",
                                   "--allow-exec",
                                   options.bin_dir,
                                   "--allow-exec",
                                   job_dir};
  // The private agent runs the user's own job on the user's own machine:
  // the names its [trainer.env] sets are the user's to choose.
  for (const auto& [name, value] : config.trainer.env) {
    argv.insert(argv.end(), {"--allow-env", name});
  }
  // The PS host takes the job's shards only. It is on the worker agent's
  // host, whose figures that agent measures already.
  if (agent->ps_host) Append(&argv, {"--role", "ps", "--calibrate", "false"});
  Append(&argv, e->secret_args);
  Append(&argv, e->server_tls_args);
  Append(&argv, e->ca_args);
  agent->daemon = std::make_unique<Daemon>(argv, e->Log(agent->file));
}

// Starts the agent that runs the job's ranks and, when the job's shards go on
// PS hosts, a PS agent beside it.
void StartAgents(const RunOptions& options, const JobConfig& config, Embedded* e) {
  e->agents.push_back({.name = "local", .file = "agent", .ps_host = false, .daemon = nullptr});
  if (config.ps.hosts == PsHosts::kPs) {
    e->agents.push_back({.name = "local-ps", .file = "ps-agent", .ps_host = true, .daemon = nullptr});
  }
  for (LocalAgent& agent : e->agents) StartAgent(options, config, e, &agent);
}

// Waits for every agent to register; nullopt, or the exit code after saying
// why not.
std::optional<int> WaitForAgents(CoordinatorClient& client, Embedded& e, std::ostream& err) {
  for (const LocalAgent& agent : e.agents) {
    bool registered = false;
    for (int i = 0; i < 400 && !registered && !agent.daemon->Exited(); ++i) {
      StatusOr<std::vector<rpc::AgentInfo>> agents = client.ListAgents();
      if (agents.ok()) {
        for (const auto& a : *agents) registered |= a.name == agent.name && a.alive;
      }
      if (!registered) std::this_thread::sleep_for(std::chrono::milliseconds(25));
    }
    if (registered) continue;
    err << "parallax: the local " << agent.What() << " '" << agent.name
        << "' did not register; its log (" << e.Log(agent.file) << ") ends with:\n"
        << LogTail(e.Log(agent.file)) << "\n";
    return kExitFailed;
  }
  return std::nullopt;
}

// The job file's text as submitted: with [trainer] timeline set by
// --timeline.
StatusOr<std::string> JobText(const RunOptions& options, std::string text, std::ostream& err) {
  if (options.timeline_dir.empty()) return text;
  // Absolute: the job's paths resolve against the job file's directory, the
  // flag's against ours.
  const std::string dir =
      std::filesystem::absolute(options.timeline_dir).lexically_normal().string();
  PX_ASSIGN_OR_RETURN(text, SetTrainerString(text, options.job_file, "timeline", dir));
  err << "parallax: each rank writes its timeline to " << dir << "/rank-<r>.trace.json\n";
  return text;
}

}  // namespace

int RunJob(const RunOptions& options, std::ostream& out, std::ostream& err) {
  StatusOr<std::string> job_file_text = ReadJobFile(options.job_file);
  if (!job_file_text.ok()) {
    err << "parallax: " << job_file_text.status().message() << "\n";
    return kExitUsage;
  }
  StatusOr<JobConfig> config = ParseJobConfig(*job_file_text, options.job_file);
  if (!config.ok()) {
    err << config.status().message() << "\n";
    err << "parallax: " << options.job_file << " is not a valid job file; nothing was run\n";
    return kExitUsage;
  }
  Embedded e;
  if (std::optional<int> code = Prepare(options, &e, err)) return *code;
  if (std::optional<int> code = StartCoordinator(options, &e, err)) return *code;
  StartAgents(options, *config, &e);

  CoordinatorClientOptions copts;
  copts.address = e.address;
  copts.auth_token = options.token;
  copts.tls_ca_file = options.tls_ca_file;
  copts.client_name = "run";
  StatusOr<std::unique_ptr<CoordinatorClient>> connected = CoordinatorClient::Connect(copts);
  if (!connected.ok()) {
    err << "parallax: " << connected.status().message() << "\n";
    return kExitFailed;
  }
  CoordinatorClient& client = **connected;
  if (std::optional<int> code = WaitForAgents(client, e, err)) return *code;

  StatusOr<std::string> job_text = JobText(options, *job_file_text, err);
  if (!job_text.ok()) {
    err << "parallax: " << job_text.status().message() << "\n";
    return kExitUsage;
  }
  StatusOr<rpc::JobInfo> job = client.SubmitJob(
      *job_text, std::filesystem::absolute(options.job_file).lexically_normal().string());
  if (!job.ok()) {
    err << "parallax: " << job.status().message() << "\n";
    return job.status().code() == StatusCode::kInvalidArgument ? kExitUsage : kExitFailed;
  }
  const int64_t id = job->id;
  err << "parallax: job " << id << " (" << job->name << ", " << job->workers
      << " workers) on an embedded coordinator at " << e.address
      << "; logs: parallax --coordinator " << e.address << " logs " << id << "\n";
  for (const LocalAgent& agent : e.agents) {
    if (!agent.ps_host) continue;
    err << "parallax: its PS shards run under a second agent on this machine, '" << agent.name
        << "' (--role ps, for [ps] hosts = \"ps\"; log " << e.Log(agent.file) << ")\n";
  }
  if (!options.http.empty()) {
    std::string url = WebAddress(options, e.http_port_file);
    if (url.empty()) {
      err << "parallax: the embedded coordinator's web pages did not start; see " << e.dir
          << "/coordinator.log\n";
    } else {
      err << "parallax: web pages at " << url << "jobs/" << id << " (metrics at " << url
          << "metrics)\n";
    }
  }

  std::vector<WatchedDaemon> daemons = {
      {"embedded coordinator", e.Log("coordinator"), e.coordinator.get()}};
  for (LocalAgent& agent : e.agents) {
    daemons.push_back({"embedded " + agent.What() + " '" + agent.name + "'", e.Log(agent.file),
                       agent.daemon.get()});
  }
  const WatchResult watched =
      WatchJob(client, id, config->trainer.steps, daemons,
               {.progress_bar = options.progress_bar}, out, err);
  if (watched.end == WatchEnd::kDaemonExited) return StopSignal() != 0 ? 130 : kExitFailed;
  for (LocalAgent& agent : e.agents) agent.daemon->Stop();
  e.coordinator->Stop();
  if (watched.cancelled) return 130;
  return watched.state == "SUCCEEDED" ? kExitOk : kExitFailed;
}

}  // namespace parallax::cli
