#include "cli/run.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>
#include <sstream>
#include <thread>

#include "cli/cli.h"
#include "cli/job_file.h"
#include "core/config/job_config.h"
#include "core/config/job_edit.h"
#include "core/rpc/coordinator_client.h"

namespace parallax::cli {
namespace {

using SteadyClock = std::chrono::steady_clock;

std::atomic<int> g_signal{0};

void OnSignal(int sig) { g_signal.store(sig); }

// A daemon started by `run`: killed with SIGTERM when this process dies for
// any reason (PR_SET_PDEATHSIG), and by Stop() on the way out.
class Daemon {
 public:
  Daemon(const std::vector<std::string>& argv, const std::string& log_path) {
    std::vector<std::string> args = argv;
    std::vector<char*> ptrs;
    for (auto& a : args) ptrs.push_back(a.data());
    ptrs.push_back(nullptr);
    pid_t parent = getpid();
    pid_ = fork();
    if (pid_ == 0) {
      prctl(PR_SET_PDEATHSIG, SIGTERM);
      if (getppid() != parent) _exit(1);  // the parent died before prctl
      int fd = open(log_path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
      if (fd >= 0) {
        dup2(fd, 1);
        dup2(fd, 2);
      }
      int null = open("/dev/null", O_RDONLY);
      if (null >= 0) dup2(null, 0);
      sigset_t none;
      sigemptyset(&none);
      sigprocmask(SIG_SETMASK, &none, nullptr);
      signal(SIGINT, SIG_IGN);  // Ctrl-C is for `run` to handle, not its daemons
      execv(ptrs[0], ptrs.data());
      std::fprintf(stderr, "cannot execute %s: %s\n", ptrs[0], std::strerror(errno));
      _exit(127);
    }
  }
  ~Daemon() { Stop(); }

  bool Exited() {
    if (pid_ <= 0) return true;
    int status;
    if (waitpid(pid_, &status, WNOHANG) == pid_) {
      pid_ = -1;
      return true;
    }
    return false;
  }

  void Stop() {
    if (pid_ <= 0) return;
    kill(pid_, SIGTERM);
    for (int i = 0; i < 200 && !Exited(); ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(25));
    }
    if (pid_ > 0) {
      kill(pid_, SIGKILL);
      int status;
      waitpid(pid_, &status, 0);
      pid_ = -1;
    }
  }

 private:
  pid_t pid_ = -1;
};

std::string Tail(const std::string& path, size_t bytes = 2000) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  std::string text = s.str();
  return text.size() > bytes ? text.substr(text.size() - bytes) : text;
}

std::string Duration(double seconds) {
  int s = static_cast<int>(seconds + 0.5);
  char buf[32];
  if (s >= 3600) {
    std::snprintf(buf, sizeof(buf), "%d:%02d:%02d", s / 3600, s / 60 % 60, s % 60);
  } else {
    std::snprintf(buf, sizeof(buf), "%d:%02d", s / 60, s % 60);
  }
  return buf;
}

std::string StateName(rpc::JobState::type s) {
  auto it = rpc::_JobState_VALUES_TO_NAMES.find(s);
  return it == rpc::_JobState_VALUES_TO_NAMES.end() ? "UNKNOWN" : it->second;
}

bool Terminal(rpc::JobState::type s) {
  return s == rpc::JobState::SUCCEEDED || s == rpc::JobState::FAILED ||
         s == rpc::JobState::CANCELLED;
}

// Tasks of the job that an agent still runs (or was told to start).
int LiveTasks(CoordinatorClient& client, int64_t job_id) {
  std::vector<rpc::TaskInfo> tasks;
  Status s =
      client.Call([&](rpc::CoordinatorClient& c) { c.ListTasks(tasks, client.Header(), job_id); });
  if (!s.ok()) return -1;
  int live = 0;
  for (const auto& t : tasks) {
    live += t.state == rpc::TaskState::ASSIGNED || t.state == rpc::TaskState::RUNNING;
  }
  return live;
}

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
  struct sigaction sa {};
  sa.sa_handler = OnSignal;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);

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
        << Tail(e->Log("coordinator")) << "\n";
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
  e->agents.push_back({.name = "local", .file = "agent"});
  if (config.ps.hosts == PsHosts::kPs) {
    e->agents.push_back({.name = "local-ps", .file = "ps-agent", .ps_host = true});
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
        << Tail(e.Log(agent.file)) << "\n";
    return kExitFailed;
  }
  return std::nullopt;
}

// A daemon of the cluster that exited: what it is and its log's file name.
struct ExitedDaemon {
  std::string what, file;
};

// The first daemon of the cluster that exited; nullopt while all run.
std::optional<ExitedDaemon> FirstExited(Embedded& e) {
  if (e.coordinator->Exited()) return ExitedDaemon{"coordinator", "coordinator"};
  for (LocalAgent& agent : e.agents) {
    if (agent.daemon->Exited())
      return ExitedDaemon{agent.What() + " '" + agent.name + "'", agent.file};
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

// What the watch of a job saw.
struct Watched {
  rpc::JobInfo last;
  int64_t last_step = -1;
  double loss = 0;
  double steps_per_s = 0;
  bool cancelled = false;
};

// One line of progress: a bar while the job runs, its state otherwise.
std::string ProgressLine(const Watched& w, int64_t total_steps, double elapsed) {
  std::ostringstream line;
  const rpc::JobInfo& last = w.last;
  if (last.state == rpc::JobState::RUNNING && total_steps > 0) {
    double frac = std::min(1.0, static_cast<double>(last.step) / static_cast<double>(total_steps));
    int filled = static_cast<int>(frac * 30);
    line << "[" << std::string(filled, '#') << std::string(30 - filled, '-') << "] " << last.step
         << "/" << total_steps << " steps";
    if (w.last_step > 0) line << "  loss " << w.loss;
    if (w.steps_per_s > 0) {
      line << "  " << static_cast<int64_t>(w.steps_per_s * 10) / 10.0 << " steps/s  ETA "
           << Duration((total_steps - last.step) / w.steps_per_s);
    }
  } else {
    line << StateName(last.state);
    if (last.__isset.waiting_for) line << ": " << last.waiting_for;
    if (last.attempt > 1) line << " (attempt " << last.attempt << ")";
  }
  line << "  " << Duration(elapsed);
  return line.str();
}

// Reads the newest loss when the job's step moved, and the step rate.
void Sample(CoordinatorClient& client, int64_t id, Watched* w, int64_t* rate_step,
            SteadyClock::time_point* rate_time) {
  if (w->last.step == w->last_step) return;
  std::vector<rpc::MetricPoint> points;
  rpc::GetMetricsRequest req;
  req.job_id = id;
  req.__set_after_step(std::max<int64_t>(w->last_step, 0) - 1);
  if (client.Call([&](rpc::CoordinatorClient& c) { c.GetMetrics(points, client.Header(), req); })
          .ok() &&
      !points.empty()) {
    w->loss = points.back().loss;
  }
  double dt = std::chrono::duration<double>(SteadyClock::now() - *rate_time).count();
  if (dt > 0.5) {
    w->steps_per_s = (w->last.step - *rate_step) / dt;
    *rate_step = w->last.step;
    *rate_time = SteadyClock::now();
  }
  w->last_step = w->last.step;
}

// Shows the job's progress until it ends, cancelling it on a signal; nullopt
// once it ended, or the exit code when a daemon died under it.
std::optional<int> WatchJob(const RunOptions& options, Embedded& e, CoordinatorClient& client,
                            int64_t id, int64_t total_steps, SteadyClock::time_point start,
                            Watched* w, std::ostream& out, std::ostream& err) {
  std::string last_line;
  auto last_print = SteadyClock::now() - std::chrono::hours(1);
  int64_t rate_step = 0;
  auto rate_time = start;
  while (true) {
    // A daemon that dies under us (killed, crashed) ends the run: without it
    // the job can neither finish nor be cancelled.
    if (std::optional<ExitedDaemon> exited = FirstExited(e)) {
      err << (options.progress_bar ? "\n" : "") << "parallax: the embedded " << exited->what
          << " exited while job " << id << " was " << StateName(w->last.state) << "; its log ("
          << e.Log(exited->file) << ") ends with:\n"
          << Tail(e.Log(exited->file)) << "\n";
      return g_signal.load() != 0 ? 130 : kExitFailed;
    }
    if (g_signal.load() != 0 && !w->cancelled) {
      w->cancelled = true;
      err << (options.progress_bar ? "\n" : "") << "parallax: cancelling job " << id << "\n";
      (void)client.CancelJob(id, "interrupted (parallax run received a signal)");
    }
    StatusOr<rpc::JobInfo> now = client.GetJob(id);
    if (now.ok()) w->last = *now;
    Sample(client, id, w, &rate_step, &rate_time);
    double elapsed = std::chrono::duration<double>(SteadyClock::now() - start).count();
    const std::string s = ProgressLine(*w, total_steps, elapsed);
    if (options.progress_bar) {
      out << "\r" << s
          << std::string(last_line.size() > s.size() ? last_line.size() - s.size() : 0, ' ')
          << std::flush;
      last_line = s;
    } else if (s != last_line && (SteadyClock::now() - last_print > std::chrono::seconds(5) ||
                                  w->last.state != rpc::JobState::RUNNING)) {
      // Not a terminal: a plain line when something changed, at most every 5 s.
      if (s.substr(0, s.rfind("  ")) != last_line.substr(0, last_line.rfind("  "))) {
        out << s << "\n" << std::flush;
        last_print = SteadyClock::now();
      }
      last_line = s;
    }
    if (Terminal(w->last.state)) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  if (options.progress_bar) out << "\n";
  return std::nullopt;
}

// The job's end in one line, and the reason when it did not succeed.
void PrintSummary(int64_t id, const Watched& w, int64_t job_steps, double elapsed,
                  std::ostream& out) {
  const rpc::JobInfo& last = w.last;
  out << RunSummary({.id = id,
                     .state = StateName(last.state),
                     .succeeded = last.state == rpc::JobState::SUCCEEDED,
                     .job_steps = job_steps,
                     .last_reported_step = last.step,
                     .last_loss = w.loss,
                     .attempts = static_cast<int>(last.attempt),
                     .elapsed_s = elapsed});
  if (last.__isset.reason && last.state != rpc::JobState::SUCCEEDED) {
    out << "reason: " << last.reason << "\n";
  }
}

}  // namespace

std::string RunSummary(const RunOutcome& o) {
  std::ostringstream out;
  out << "job " << o.id << " " << o.state << " after " << Duration(o.elapsed_s);
  std::vector<std::string> facts;
  if (o.succeeded && o.job_steps > 0) {
    facts.push_back(std::to_string(o.job_steps) + " steps, last loss " + std::to_string(o.last_loss));
  } else if (o.last_reported_step > 0) {
    facts.push_back("last reported step " + std::to_string(o.last_reported_step) + ", loss " +
                    std::to_string(o.last_loss));
  }
  if (o.attempts > 1) facts.push_back(std::to_string(o.attempts) + " attempts");
  for (size_t i = 0; i < facts.size(); ++i) out << (i == 0 ? " (" : ", ") << facts[i];
  out << (facts.empty() ? "" : ")") << "\n";
  return out.str();
}

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

  const auto start = SteadyClock::now();
  Watched w;
  w.last = *job;
  if (std::optional<int> code =
          WatchJob(options, e, client, id, config->trainer.steps, start, &w, out, err)) {
    return *code;
  }
  // Wait for every task to be gone before the daemons go.
  for (int i = 0; i < 300 && LiveTasks(client, id) > 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  PrintSummary(id, w, config->trainer.steps,
               std::chrono::duration<double>(SteadyClock::now() - start).count(), out);
  for (LocalAgent& agent : e.agents) agent.daemon->Stop();
  e.coordinator->Stop();
  if (w.cancelled) return 130;
  return w.last.state == rpc::JobState::SUCCEEDED ? kExitOk : kExitFailed;
}

}  // namespace parallax::cli
