#include "core/daemon/daemon_flags.h"

#include <arpa/inet.h>
#include <netdb.h>

#include <CLI/CLI.hpp>
#include <cstdlib>
#include <filesystem>
#include <iostream>

#include "core/base/daemon.h"
#include "core/base/logging.h"
#include "core/rpc/tls.h"

namespace parallax {
namespace {

std::string Env(const char* name) {
  const char* value = std::getenv(name);
  return value != nullptr ? value : "";
}

bool IsLoopbackAddress(const sockaddr* addr) {
  if (addr->sa_family == AF_INET) {
    const auto* in = reinterpret_cast<const sockaddr_in*>(addr);
    return (ntohl(in->sin_addr.s_addr) >> 24) == 127;
  }
  if (addr->sa_family == AF_INET6) {
    const in6_addr& a = reinterpret_cast<const sockaddr_in6*>(addr)->sin6_addr;
    if (IN6_IS_ADDR_LOOPBACK(&a)) return true;
    return IN6_IS_ADDR_V4MAPPED(&a) && a.s6_addr[12] == 127;
  }
  return false;
}

}  // namespace

DaemonEnvironment DaemonEnvironment::FromProcess() {
  DaemonEnvironment env;
  env.secret_file = Env("PARALLAX_SECRET_FILE");
  env.token = Env("PARALLAX_TOKEN");
  env.tls_ca = Env("PARALLAX_TLS_CA");
  return env;
}

ThriftServerOptions DaemonSettings::ServerOptions(const std::string& what) const {
  ThriftServerOptions options;
  options.what = what;
  options.host = listen_host;
  options.port = listen_port;
  options.tls_cert_file = tls_cert_file;
  options.tls_key_file = tls_key_file;
  options.auth_token = secret;
  options.limits = limits;
  return options;
}

DaemonFlags::DaemonFlags(DaemonFlagsSpec spec)
    : spec_(std::move(spec)), listen_(spec_.default_listen) {}

void DaemonFlags::AddTo(CLI::App* app) {
  if (!spec_.default_listen.empty()) {
    app->add_option("--listen", listen_, spec_.listen_help)->capture_default_str();
  }
  app->add_option("--secret-file", secret_.secret_file_flag,
                  std::string(kSecretFileHelp) + spec_.secret_help_suffix);
  app->add_option("--token", secret_.token_flag, kTokenHelp);
  if (spec_.serves) {
    app->add_option("--tls-cert", tls_cert_,
                    std::string(kTlsCertHelp) + spec_.tls_cert_help_suffix);
    app->add_option("--tls-key", tls_key_, kTlsKeyHelp);
    app->add_option("--max-connections", max_connections_,
                    "connections the service keeps open at most; at the limit a new one closes "
                    "the oldest that has not authenticated (0: the open-file limit less an "
                    "eighth, at most 16384)")
        ->capture_default_str()
        ->check(CLI::NonNegativeNumber);
  }
  if (spec_.calls_coordinator) {
    app->add_option("--tls-ca", tls_ca_, std::string(kTlsCaHelp) + spec_.tls_ca_help_suffix);
  }
  app->add_flag("-v,--verbose", verbose_, "log debug messages");
}

std::optional<int> DaemonFlags::ParseCommandLine(CLI::App* app, int argc, char** argv,
                                                 DaemonSettings* settings) {
  try {
    app->parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int code = app->exit(e);
    return code == 0 ? 0 : 2;
  }
  StatusOr<DaemonSettings> resolved = Resolve(DaemonEnvironment::FromProcess());
  if (!resolved.ok()) {
    std::cerr << spec_.program << ": " << resolved.status().message() << "\n";
    return 2;
  }
  *settings = std::move(resolved).value();
  return std::nullopt;
}

StatusOr<DaemonSettings> DaemonFlags::Resolve(const DaemonEnvironment& env) {
  if (verbose_) SetMinLogLevel(LogLevel::kDebug);
  DaemonSettings settings;
  SecretSources sources = secret_;
  sources.secret_file_env = env.secret_file;
  sources.token_env = env.token;
  std::string warning;
  PX_ASSIGN_OR_RETURN(settings.secret, ResolveSecret(sources, &warning));
  if (!warning.empty()) PX_LOG(WARNING) << warning;

  if (spec_.serves) {
    PX_RETURN_IF_ERROR(CheckTlsServerFiles(tls_cert_, tls_key_));
    settings.tls_cert_file = tls_cert_;
    settings.tls_key_file = tls_key_;
  }
  if (spec_.calls_coordinator) {
    const bool from_flag = !tls_ca_.empty();
    const std::string ca = from_flag ? tls_ca_ : env.tls_ca;
    PX_RETURN_IF_ERROR(CheckTlsCaFile(ca, from_flag ? "--tls-ca" : "PARALLAX_TLS_CA"));
    // Tasks run in their own directories: hand them an absolute path.
    std::error_code ec;
    settings.tls_ca_file = ca.empty() ? "" : std::filesystem::absolute(ca, ec).string();
  }
  if (!spec_.default_listen.empty()) {
    StatusOr<std::pair<std::string, int>> address = ParseHostPort(listen_);
    if (!address.ok()) return InvalidArgument("--listen: " + address.status().message());
    settings.listen_host = address->first;
    settings.listen_port = address->second;
    std::string exposed =
        ExposureWarning(spec_.program, settings.listen_host, listen_, !settings.secret.empty());
    if (!exposed.empty()) PX_LOG(WARNING) << exposed;
  }
  settings.open_file_limit = spec_.raise_open_file_limit ? RaiseOpenFileLimit() : OpenFileLimit();
  settings.limits.max_connections =
      max_connections_ > 0 ? max_connections_ : DefaultMaxConnections(settings.open_file_limit);
  return settings;
}

bool IsLoopbackHost(const std::string& host) {
  if (host.empty() || host == "0.0.0.0" || host == "::" || host == "*") return false;
  if (host == "localhost") return true;
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  if (getaddrinfo(host.c_str(), nullptr, &hints, &found) != 0 || found == nullptr) return false;
  bool loopback = true;
  for (addrinfo* a = found; a != nullptr; a = a->ai_next) loopback &= IsLoopbackAddress(a->ai_addr);
  freeaddrinfo(found);
  return loopback;
}

std::string ExposureWarning(const std::string& program, const std::string& host,
                            const std::string& address, bool has_secret) {
  if (has_secret || IsLoopbackHost(host)) return "";
  return program + " serves " + address +
         ", beyond this machine, without a shared secret: anyone who can reach it may use it "
         "(submit jobs that agents run, read logs, write rendezvous keys). Give every daemon and "
         "client the same --secret-file (docs/OPERATIONS.md), or listen on 127.0.0.1";
}

}  // namespace parallax
