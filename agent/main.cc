// parallax-agent: the per-host daemon that runs tasks. See docs/OPERATIONS.md.
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <thread>

#include "agent/agent.h"
#include "agent/agent_service.h"
#include "agent/coordinator_link.h"
#include "agent/exec_policy.h"
#include "agent/gpu_probe.h"
#include "agent/process_launcher.h"
#include "agent/python_package.h"
#include "core/base/daemon.h"
#include "core/base/logging.h"
#include "core/calibration/host_calibration.h"
#include "core/daemon/daemon_flags.h"
#include "core/daemon/local_address.h"
#include "schemas/coordinator_constants.h"

extern char** environ;

namespace {

// Everything the command line sets besides the daemon flags.
struct Flags {
  parallax::agent::AgentOptions options;
  std::string advertise;
  std::string port_file;
  bool calibrate = true;
  std::string role = "worker";
  int slots = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
};

void AddFlags(CLI::App* app, Flags* f) {
  app->add_option("--coordinator", f->options.coordinator, "coordinator HOST:PORT")->required();
  app->add_option("--name", f->options.name, "this agent's name, unique in the cluster")
      ->required();
  app->add_option("--workdir", f->options.workdir, "directory for task directories and logs")
      ->required();
  app->add_option("--role", f->role,
                  "what this agent takes: 'worker' (trainer ranks, and the PS shards of their "
                  "jobs) or 'ps' (PS shards only, of jobs with [ps] hosts = \"ps\"; no trainer "
                  "rank)")
      ->capture_default_str()
      ->check(CLI::IsMember({"worker", "ps"}));
  app->add_option("--slots", f->slots, "CPU slots when the host has no GPU (default: CPUs)")
      ->check(CLI::Range(1, 4096));
  app->add_option("--advertise", f->advertise,
                  "host the coordinator and CLI reach the log service at (default: the listen "
                  "host, or, listening on all interfaces, this host's address toward the "
                  "coordinator)");
  app->add_option("--bind-addr", f->options.bind_addr,
                  "PARALLAX_BIND_ADDR given to tasks: where PS shards and ranks bind (default: this "
                  "host's address toward the coordinator, as its routing table picks it)");
  app->add_option(
      "--bin-dir", f->options.bin_dir,
      "where parallax-trainer and parallax-ps are (default: this executable's directory)");
  app->add_option("--python-path", f->options.python_path,
                  "directory of the parallax Python package, first on Python trainers' PYTHONPATH "
                  "(default: found next to --bin-dir)");
  app->add_option("--allow-exec", f->options.allow_exec,
                  "a directory whose programs tasks may run, besides the --bin-dir (repeatable; a "
                  "task whose executable's real path is elsewhere fails without running): a custom "
                  "trainer needs its directory here");
  app->add_option(
      "--allow-env", f->options.allow_env,
      "a name, or a shell-style pattern (PX_TEST_*), that a job's [trainer.env] may set "
      "besides the safe set (thread counts, locale, time zone: docs/OPERATIONS.md); "
      "repeatable. A task whose job sets any other name ends at once, unrun");
  app->add_option("--grace-ms", f->options.grace_ms,
                  "SIGTERM to SIGKILL delay when stopping a task")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  app->add_option("--heartbeat-ms", f->options.heartbeat_ms, "heartbeat period")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  app->add_option("--max-log-bytes", f->options.max_log_bytes,
                  "rotate a task's log past this size, in bytes or with a unit (64MiB); keeps 3 "
                  "old files")
      ->capture_default_str()
      ->transform(CLI::AsSizeValue(false))
      ->check(CLI::PositiveNumber);
  app->add_flag("--stop-tasks-on-exit", f->options.stop_tasks_on_exit,
                "stop every task when the agent exits, and let tasks die with it (for `parallax "
                "run`; a cluster agent leaves tasks running across restarts)");
  app->add_flag("!--no-report-on-stop", f->options.report_on_stop,
                "once stopped by a signal, do not report the ends of tasks (they stay saved in "
                "their task directories): for a launcher that records the job's outcome itself "
                "(parallax slurm, whose allocation's ranks Slurm signals with the agents)");
  app->add_option("--port-file", f->port_file, "write the log service's port here once listening");
  app->add_option("--calibrate", f->calibrate,
                  "measure this host's loopback and shared-memory rates at start (well under a "
                  "second) and leave them with the coordinator for the planner; false: keep the "
                  "defaults (tests)")
      ->capture_default_str();
}

// Completes the agent's options from the daemon settings and this host;
// false after saying what is wrong.
bool Complete(const parallax::DaemonSettings& settings, Flags* f) {
  using namespace parallax;
  using namespace parallax::agent;
  AgentOptions& options = f->options;
  std::string& advertise = f->advertise;
  std::error_code ec;
  options.token = settings.secret;
  options.ps_host = f->role == "ps";
  options.tls_ca_file = settings.tls_ca_file;
  options.allow_exec = AllowedExecDirectories(options.bin_dir, options.allow_exec);
  if (options.python_path.empty())
    options.python_path = FindPythonPackage(options.bin_dir, PARALLAX_PYTHON_INSTALL_DIR);
  options.cpu_cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  for (const std::string& dir : options.allow_exec) {
    if (!std::filesystem::is_directory(dir, ec)) {
      std::cerr << "parallax-agent: --allow-exec '" << dir << "' is not a directory\n";
      return false;
    }
  }
  char host[HOST_NAME_MAX + 1] = {0};
  gethostname(host, sizeof(host) - 1);
  options.hostname = host;
  // Tasks bind and advertise an address, never a name (ZeroMQ cannot bind
  // one, and peers may resolve it differently): the one this host reaches
  // the coordinator from, which the other hosts of the cluster reach too.
  const std::string& h = settings.listen_host;
  const bool wildcard = h.empty() || h == "0.0.0.0" || h == "::";
  if (options.bind_addr.empty() || (advertise.empty() && wildcard)) {
    StatusOr<std::string> local = LocalAddressToward(options.coordinator);
    if (!local.ok()) {
      std::cerr << "parallax-agent: cannot find this host's address toward the coordinator "
                << options.coordinator << " (" << local.status().message()
                << "); give --bind-addr (and --advertise) an address of this host\n";
      return false;
    }
    if (options.bind_addr.empty()) options.bind_addr = *local;
    if (advertise.empty()) advertise = *local;
  }
  if (advertise.empty()) advertise = h;
  PX_LOG(INFO) << "tasks bind " << options.bind_addr << "; log service advertised at "
               << advertise;
  std::string why;
  options.gpus = CountCudaDevices(&why);
  options.slots = options.gpus > 0 ? options.gpus : f->slots;
  PX_LOG(INFO) << "GPUs: " << why << "; " << options.slots << " slots";
  for (char** e = environ; *e; ++e) options.inherited_env.emplace_back(*e);
  return true;
}

// Probes this host and leaves its figures with the coordinator
// (core/calibration/host_calibration.h). A coordinator that cannot take them
// now costs the planner this host's figures, not the agent its start.
void Calibrate(const parallax::agent::AgentOptions& options) {
  using namespace parallax;
  CoordinatorClientOptions copts;
  copts.address = options.coordinator;
  copts.auth_token = options.token;
  copts.tls_ca_file = options.tls_ca_file;
  copts.client_name = "agent " + options.name;
  copts.connect_timeout_ms = 2'000;
  copts.rpc_timeout_ms = 5'000;
  copts.retry_deadline_ms = 0;
  StatusOr<std::unique_ptr<CoordinatorClient>> coord = CoordinatorClient::Connect(copts);
  StatusOr<plan::HostFigures> h =
      coord.ok() ? calibration::CalibrateHost(coord->get(), options.hostname, {})
                 : StatusOr<plan::HostFigures>(coord.status());
  if (!h.ok()) {
    PX_LOG(WARNING) << "host figures not measured or not stored: " << h.status().ToString()
                    << "; the planner keeps its defaults for this host";
    return;
  }
  PX_LOG(INFO) << "host figures of " << h->host << ": loopback " << h->loopback_bytes_per_s / 1e9
               << " GB/s, shared memory " << h->shm_bytes_per_s / 1e9 << " GB/s";
}

// Serves until a termination signal or until the agent stops by itself; the
// exit code.
int Serve(Flags& f, const parallax::DaemonSettings& settings) {
  using namespace parallax;
  using namespace parallax::agent;
  AgentOptions& options = f.options;
  AgentServerOptions server_options = settings.ServerOptions("agent log service");
  const std::pair<std::string, int> address = {settings.listen_host, settings.listen_port};
  // Signals are taken by one thread with sigwait; every other thread (and,
  // until they reset it, tasks) starts with them blocked. SIGUSR1 wakes that
  // thread when the agent stops by itself.
  sigset_t signals = BlockTerminationSignals({SIGUSR1});

  std::unique_ptr<ProcessLauncher> launcher = NewProcessLauncher();
  CoordinatorLinkOptions link_options;
  link_options.address = options.coordinator;
  link_options.auth_token = options.token;
  link_options.tls_ca_file = options.tls_ca_file;
  link_options.agent_name = options.name;
  std::unique_ptr<CoordinatorLink> link = NewCoordinatorLink(link_options);
  Agent agent(options, link.get(), launcher.get(), RealClock());
  if (Status s = agent.Init(); !s.ok()) {
    std::cerr << "parallax-agent: " << s.message() << "\n";
    return 1;
  }
  if (f.calibrate) Calibrate(options);

  AgentServiceOptions service_options;
  service_options.auth_token = options.token;
  service_options.version = options.version;
  auto service = std::make_shared<AgentService>(&agent, RealClock(), service_options);
  // With port 0, a restarted agent first tries the port it had, so it comes
  // back at the address the coordinator knows (which accepts a re-registration
  // of a live name only from the same address).
  std::string last_port_path = options.workdir + "/agent.port";
  StatusOr<std::unique_ptr<AgentServer>> server = Unavailable("not started");
  int last_port = 0;
  if (address.second == 0 && (std::ifstream(last_port_path) >> last_port) && last_port > 0 &&
      last_port <= 65535) {
    server_options.port = last_port;
    server = StartAgentServer(server_options, service);
  }
  if (!server.ok()) {
    server_options.port = address.second;
    server = StartAgentServer(server_options, service);
  }
  if (!server.ok()) {
    std::cerr << "parallax-agent: " << server.status().message() << "\n";
    return 1;
  }
  int port = (*server)->port();
  agent.set_address(f.advertise + ":" + std::to_string(port));
  if (address.second == 0) std::ofstream(last_port_path) << port << "\n";
  if (!f.port_file.empty()) {
    if (Status s = WriteFileAtomically(f.port_file, std::to_string(port) + "\n"); !s.ok()) {
      std::cerr << "parallax-agent: --port-file: " << s.message() << "\n";
      return 1;
    }
  }
  std::cout << "parallax-agent '" << options.name << "' serving logs on " << address.first << ":"
            << port << (server_options.tls_cert_file.empty() ? "" : " (TLS)") << ", coordinator "
            << options.coordinator << (options.tls_ca_file.empty() ? "" : " (TLS)") << std::endl;

  std::thread signal_thread([&] {
    int sig = 0;
    sigwait(&signals, &sig);
    if (sig != SIGUSR1) {
      PX_LOG(INFO) << "signal " << sig << ": stopping"
                   << (options.stop_tasks_on_exit ? " and stopping tasks"
                                                  : " (tasks keep running)");
    }
    agent.Stop();
  });
  Status result = agent.Run();
  pthread_kill(signal_thread.native_handle(), SIGUSR1);
  signal_thread.join();
  (*server)->Stop();
  if (!result.ok()) {
    std::cerr << "parallax-agent: " << result.message() << "\n";
    return 1;
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace parallax;
  Flags flags;
  std::error_code ec;
  flags.options.bin_dir =
      std::filesystem::read_symlink("/proc/self/exe", ec).parent_path().string();

  CLI::App app{
      "Parallax agent: registers this host's slots with the coordinator, launches the "
      "tasks it assigns and keeps their logs"};
  app.set_version_flag("--version",
                       std::string("parallax-agent ") + flags.options.version + " (protocol " +
                           std::to_string(rpc::g_coordinator_constants.PROTOCOL_VERSION) + ")");
  DaemonFlagsSpec spec;
  spec.program = "parallax-agent";
  spec.default_listen = "127.0.0.1:0";
  spec.listen_help = "HOST:PORT of the log service (port 0 picks a free one)";
  spec.tls_cert_help_suffix = " (the log service; `parallax logs` then needs --tls-ca)";
  spec.calls_coordinator = true;
  spec.tls_ca_help_suffix = "; given to tasks as $PARALLAX_TLS_CA";
  spec.raise_open_file_limit = false;  // tasks inherit the limit the agent was given
  spec.secret_help_suffix =
      "; sent to the coordinator, required from log readers, given to tasks as $PARALLAX_TOKEN";
  DaemonFlags daemon_flags(spec);
  daemon_flags.AddTo(&app);
  AddFlags(&app, &flags);
  DaemonSettings settings;
  if (std::optional<int> code = daemon_flags.ParseCommandLine(&app, argc, argv, &settings)) {
    return *code;
  }
  if (!Complete(settings, &flags)) return 2;
  return Serve(flags, settings);
}
