// DaemonFlags: the command-line flags every Parallax daemon shares, declared
// and checked in one place, so parallax-coordinator, parallax-agent and
// parallax-ps spell, document and validate them the same way:
//
//   --listen HOST:PORT       where the daemon's Thrift service listens
//   --secret-file FILE       the control-plane shared secret (--token, and
//                            $PARALLAX_SECRET_FILE / $PARALLAX_TOKEN, too)
//   --tls-cert, --tls-key    serve TLS (a daemon with a Thrift service)
//   --tls-ca FILE            trust this CA when calling the coordinator
//                            ($PARALLAX_TLS_CA)
//   --max-connections N      the Thrift service's connection cap
//   -v, --verbose            debug logging
//
// A main() declares which of them it has (DaemonFlagsSpec), adds them to its
// CLI11 app next to its own flags, parses, and calls Resolve(), which checks
// every one (a message naming the flag and file; main exits 2) and applies
// what is process-wide: the log level, the open-file limit raised to its
// hard limit (one descriptor per connection; DaemonFlagsSpec says whether),
// and a warning when the daemon listens beyond this host without a secret. The result, DaemonSettings,
// fills the ThriftServerOptions of the daemon's service.
//
//   DaemonFlagsSpec spec;
//   spec.program = "parallax-coordinator";
//   spec.default_listen = "127.0.0.1:7070";
//   DaemonFlags flags(spec);
//   CLI::App app{"..."};
//   flags.AddTo(&app);
//   app.add_option("--db", ...);          // the daemon's own flags
//   ... parse ...
//   StatusOr<DaemonSettings> settings = flags.Resolve(DaemonEnvironment::FromProcess());
//
// A flag every daemon needs belongs here; one only a daemon has (the
// coordinator's --db, or an --http listener) is added by that main next to
// these, and may use ParseListenAddress / ExposureWarning for its address.
#ifndef PARALLAX_CORE_DAEMON_DAEMON_FLAGS_H_
#define PARALLAX_CORE_DAEMON_DAEMON_FLAGS_H_

#include <cstdint>
#include <optional>
#include <string>

#include "core/base/secret.h"
#include "core/rpc/thrift_server.h"
#include "parallax/status.h"

namespace CLI {
class App;
}

namespace parallax {

// Which of the shared flags a daemon has, and its words in their help.
struct DaemonFlagsSpec {
  std::string program;  // "parallax-coordinator": in messages and warnings
  // --listen with this default ("" : the daemon has no --listen).
  std::string default_listen;
  std::string listen_help = "HOST:PORT to serve on (port 0 picks a free one)";
  // Serves Thrift: --tls-cert, --tls-key, --max-connections.
  bool serves = true;
  std::string tls_cert_help_suffix;  // appended to the --tls-cert help
  // Calls the coordinator: --tls-ca.
  bool calls_coordinator = false;
  std::string tls_ca_help_suffix;
  std::string secret_help_suffix;  // what the secret is for, in the --secret-file help
  // Raise the soft open-file limit to the hard one (a server holds one
  // descriptor per connection). Off for a daemon whose children should
  // inherit the limit it was given (the agent's tasks).
  bool raise_open_file_limit = true;
};

// The environment variables the shared flags fall back to.
struct DaemonEnvironment {
  std::string secret_file;  // $PARALLAX_SECRET_FILE
  std::string token;        // $PARALLAX_TOKEN
  std::string tls_ca;       // $PARALLAX_TLS_CA
  static DaemonEnvironment FromProcess();
};

// What the shared flags resolved to.
struct DaemonSettings {
  std::string secret;  // "" : no authentication
  std::string listen_host;
  int listen_port = 0;
  std::string tls_cert_file;
  std::string tls_key_file;
  std::string tls_ca_file;  // absolute, or "" (plaintext)
  ConnectionLimits limits;  // max_connections resolved (never 0)
  int64_t open_file_limit = 0;

  // The options of the daemon's Thrift service on --listen: address, TLS,
  // connection limits and the secret. `what` names it in logs.
  ThriftServerOptions ServerOptions(const std::string& what) const;
};

class DaemonFlags {
 public:
  explicit DaemonFlags(DaemonFlagsSpec spec);

  // Adds the flags `spec` asks for to `app`. The flags keep pointers into
  // this object: it must outlive parsing.
  void AddTo(CLI::App* app);

  // After parsing: checks every flag and applies the process-wide ones (see
  // the file comment). INVALID_ARGUMENT or FAILED_PRECONDITION naming the
  // flag (or variable) and what to do.
  StatusOr<DaemonSettings> Resolve(const DaemonEnvironment& env);

  // A daemon's main() in one call: parses the command line into `app` (which
  // has this object's flags and the daemon's own), then resolves the
  // settings from the process environment into `settings`. nullopt to go
  // on; otherwise the exit code, after printing help, the version or what is
  // wrong (0 for --help and --version, 2 for bad flags).
  std::optional<int> ParseCommandLine(CLI::App* app, int argc, char** argv,
                                      DaemonSettings* settings);

 private:
  const DaemonFlagsSpec spec_;
  std::string listen_;
  SecretSources secret_;
  std::string tls_cert_;
  std::string tls_key_;
  std::string tls_ca_;
  int max_connections_ = 0;
  bool verbose_ = false;
};

// Whether `host` is this machine only: "localhost", 127.0.0.0/8, ::1 (or a
// name that resolves to nothing else). "", "0.0.0.0" and "::" are every
// interface: not loopback.
bool IsLoopbackHost(const std::string& host);

// The warning a daemon logs when it serves `host` without a shared secret
// beyond this machine ("" when host is loopback or there is a secret).
// `address` is what it serves, as the operator wrote it.
std::string ExposureWarning(const std::string& program, const std::string& host,
                            const std::string& address, bool has_secret);

}  // namespace parallax

#endif  // PARALLAX_CORE_DAEMON_DAEMON_FLAGS_H_
