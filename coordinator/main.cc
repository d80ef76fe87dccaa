// parallax-coordinator: the control-plane service. See docs/OPERATIONS.md.
#include <fcntl.h>
#include <signal.h>
#include <sys/file.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cerrno>
#include <cstring>
#include <iostream>

#include "coordinator/service/rpc_stats.h"
#include "coordinator/service/server.h"
#include "coordinator/service/service.h"
#include "coordinator/store/state_file.h"
#include "coordinator/web/http_endpoint.h"
#include "core/base/daemon.h"
#include "core/base/logging.h"
#include "core/daemon/daemon_flags.h"
#include "schemas/coordinator_constants.h"

namespace {

// One coordinator per database: two would each believe they own every job.
// The lock is released by the kernel however this process ends. Returns
// false after saying why.
bool LockDatabase(const std::string& db) {
  std::string lock_path = db + ".lock";
  int lock_fd = open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (lock_fd < 0) {
    std::cerr << "parallax-coordinator: cannot create lock file '" << lock_path
              << "': " << std::strerror(errno)
              << "; check that the directory exists and is writable\n";
    return false;
  }
  if (flock(lock_fd, LOCK_EX | LOCK_NB) != 0) {
    char owner[32] = {0};
    ssize_t n = pread(lock_fd, owner, sizeof(owner) - 1, 0);
    std::string pid = n > 0 ? std::string(owner, static_cast<size_t>(n)) : "?";
    while (!pid.empty() && (pid.back() == '\n' || pid.back() == ' ')) pid.pop_back();
    std::cerr << "parallax-coordinator: database '" << db
              << "' is in use by another parallax-coordinator (pid " << pid
              << "); stop it first or use another --db\n";
    return false;
  }
  std::string pid_text = std::to_string(getpid()) + "\n";
  if (ftruncate(lock_fd, 0) != 0 || pwrite(lock_fd, pid_text.data(), pid_text.size(), 0) < 0) {
    PX_LOG(WARNING) << "cannot write pid to '" << lock_path << "'";
  }
  return true;  // lock_fd stays open for the life of the process
}

// Everything the command line sets besides the daemon flags.
struct Flags {
  std::string db = "parallax.db";
  std::string port_file;
  int64_t agent_timeout_ms = 10'000;
  uint32_t max_request_bytes = 24 << 20;
  parallax::coordinator::ServiceOptions service;
  parallax::coordinator::StateFileOptions state;
  parallax::coordinator::HttpEndpointFlags http;  // --http, --http-token-file, ...
};

void AddFlags(CLI::App* app, Flags* f) {
  using namespace parallax::coordinator;
  app->add_option("--db", f->db, "SQLite state database; created if missing")
      ->capture_default_str();
  app->add_flag("--new-state", f->state.new_state,
                "when --db is an empty (0-byte) file, not a Parallax database, or fails its check: "
                "rename it to <db>.set-aside-<time> and start a new, empty state");
  app->add_flag(
      "--skip-db-check", [f](int64_t) { f->state.check = false; },
      "serve --db without running PRAGMA quick_check on it first");
  app->add_option("--db-check-timeout-ms", f->state.check_timeout_ms,
                  "longest PRAGMA quick_check at start; a longer one is stopped and the database "
                  "served unchecked")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  app->add_option("--max-request-bytes", f->max_request_bytes,
                  "largest request frame accepted; a bigger one closes its connection")
      ->capture_default_str()
      ->check(CLI::Range(uint32_t{1} << 16, uint32_t{1} << 30));
  app->add_option("--max-active-jobs", f->service.max_active_jobs,
                  "pending and running jobs at most; a submit past it is refused (0: no limit)")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  app->add_option("--max-kv-entries-per-job", f->service.max_kv_entries_per_job,
                  "rendezvous keys per job (under job/<id>/) at most (0: no limit)")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  app->add_option("--max-kv-global-entries", f->service.max_kv_global_entries,
                  "rendezvous keys outside any job's job/<id>/ prefix at most (0: no limit)")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  app->add_option("--max-kv-value-bytes", f->service.max_kv_value_bytes,
                  "largest rendezvous value accepted")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  app->add_option("--agent-timeout-ms", f->agent_timeout_ms,
                  "an agent silent for longer than this is lost: its tasks are LOST and their jobs "
                  "restart or fail (docs/RELIABILITY.md, \"Lost agents\")")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  app->add_option("--port-file", f->port_file, "write the bound port to this file once listening");
  AddHttpEndpointFlags(app, &f->http);
}

// Runs the service on `settings` until a termination signal; the exit code.
int Serve(const Flags& f, const parallax::DaemonSettings& settings) {
  using namespace parallax;
  using namespace parallax::coordinator;
  // Signals are taken by one thread with sigwait, so every other thread
  // (the server's included) runs with them blocked.
  sigset_t signals = BlockTerminationSignals();
  if (Status s = MakeStateDirectory(f.db); !s.ok()) {
    std::cerr << "parallax-coordinator: " << s.message() << "\n";
    return 1;
  }
  if (!LockDatabase(f.db)) return 1;

  SqliteStateStoreOptions store_options;
  store_options.path = f.db;
  StatusOr<std::unique_ptr<StateStore>> store = OpenCoordinatorState(store_options, f.state);
  if (!store.ok()) {
    std::cerr << "parallax-coordinator: " << store.status().message() << "\n";
    return 1;
  }
  ServiceOptions service_options = f.service;
  service_options.auth_token = settings.secret;
  service_options.agent_timeout_ms = f.agent_timeout_ms;
  service_options.listens_on_loopback = parallax::IsLoopbackHost(settings.listen_host);
  auto service = std::make_shared<CoordinatorService>(store->get(), RealClock(), service_options);
  if (Status s = service->Init(); !s.ok()) {
    std::cerr << "parallax-coordinator: " << s.message() << "\n";
    return 1;
  }
  service->StartBackground();

  ServerOptions server_options = settings.ServerOptions("coordinator");
  // One budget of connections for the service and the web pages together.
  StatusOr<int> http_connections =
      HttpConnectionShare(f.http, server_options.limits.max_connections);
  if (!http_connections.ok()) {
    std::cerr << "parallax-coordinator: " << http_connections.status().message() << "\n";
    return 2;
  }
  server_options.limits.max_connections -= *http_connections;
  server_options.max_frame_bytes = f.max_request_bytes;
  server_options.max_string_bytes = f.max_request_bytes;
  RpcStats rpc_stats;  // every call counted and timed, for /metrics
  StatusOr<std::unique_ptr<Server>> server = StartServer(server_options, service, &rpc_stats);
  if (!server.ok()) {
    std::cerr << "parallax-coordinator: " << server.status().message() << "\n";
    return 1;
  }
  int port = (*server)->port();
  if (!f.port_file.empty()) {
    if (Status s = WriteFileAtomically(f.port_file, std::to_string(port) + "\n"); !s.ok()) {
      std::cerr << "parallax-coordinator: --port-file: " << s.message() << "\n";
      return 1;
    }
  }
  std::cout << "parallax-coordinator listening on " << settings.listen_host << ":" << port
            << " (db " << f.db << ", "
            << (settings.secret.empty() ? "no authentication"
                                        : "requests authenticated by the shared secret")
            << (settings.tls_cert_file.empty() ? ", plaintext" : ", TLS") << ")" << std::endl;

  // The web pages and /metrics (--http), read-only, with their own token.
  StatusOr<std::unique_ptr<HttpEndpoint>> http =
      StartHttpEndpoint(f.http, {store->get(), service.get(), &rpc_stats, settings.secret,
                                 server_options.tls_cert_file, server_options.tls_key_file,
                                 *http_connections});
  if (!http.ok()) {
    std::cerr << "parallax-coordinator: " << http.status().message() << "\n";
    return http.status().code() == StatusCode::kInvalidArgument ||
                   http.status().code() == StatusCode::kFailedPrecondition
               ? 2
               : 1;
  }

  int sig = 0;
  sigwait(&signals, &sig);
  PX_LOG(INFO) << "signal " << sig << ": shutting down";
  if (*http) (*http)->Stop();
  service->Stop();
  (*server)->Stop();
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace parallax;
  CLI::App app{
      "Parallax coordinator: accepts jobs, tracks agents, serves rendezvous; "
      "state is kept in a SQLite database"};
  app.set_version_flag("--version",
                       std::string("parallax-coordinator 0.1.0 (protocol ") +
                           std::to_string(rpc::g_coordinator_constants.PROTOCOL_VERSION) + ")");
  DaemonFlagsSpec spec;
  spec.program = "parallax-coordinator";
  spec.default_listen = "127.0.0.1:7070";
  spec.secret_help_suffix = "; every request must carry this secret (none set: no authentication)";
  DaemonFlags daemon_flags(spec);
  daemon_flags.AddTo(&app);
  Flags flags;
  AddFlags(&app, &flags);
  DaemonSettings settings;
  if (std::optional<int> code = daemon_flags.ParseCommandLine(&app, argc, argv, &settings)) {
    return *code;
  }
  return Serve(flags, settings);
}
