#include "core/rpc/thrift_log.h"

#include <string>  // thrift/TOutput.h uses std::string without including it

#include <thrift/TOutput.h>

#include <cstring>
#include <mutex>

#include "core/base/log_limiter.h"
#include "core/base/logging.h"

namespace parallax {

// Thrift reports dropped connections (garbage, oversized frames, clients
// that vanish) and failed connects through its GlobalOutput.
// A failed TLS accept is most often a client without TLS: say so once, and
// keep the closing noise that follows it (and Thrift's SSL_shutdown
// complaint about a connection that never finished its handshake) at debug.
// A client that went away without a TLS close_notify (a CLI that exits, a
// killed agent), or reset its connection: routine, not worth a warning.
bool IsClientDisconnect(const char* error) {
  for (const char* sign : {"unexpected eof", "Connection reset by peer", "Broken pipe",
                           "ECONNRESET", "EPIPE"}) {
    if (std::strstr(error, sign) != nullptr) return true;
  }
  return false;
}

void ThriftOutputToLog(const char* message) {
  if (IsClientDisconnect(message)) {
    PX_LOG(DEBUG) << "thrift: " << message;
  } else if (std::strstr(message, "died: SSL_accept") != nullptr) {
    PX_LOG(WARNING) << "thrift: " << message
                    << " (a client that does not speak TLS, or does not trust this server's "
                       "certificate, was refused; it needs --tls-ca or $PARALLAX_TLS_CA with the "
                       "CA that signed --tls-cert)";
  } else if (std::strstr(message, "close failed: SSL_accept") != nullptr ||
             std::strstr(message, "shutdown while in init") != nullptr) {
    PX_LOG(DEBUG) << "thrift: " << message;
  } else if (std::strstr(message, "TSocket::open()") != nullptr) {
    // A client's connect that failed: the caller reports it in its Status,
    // and CoordinatorClient's retry loop says once that it keeps trying.
    PX_LOG(DEBUG) << "thrift: " << message;
  } else if (std::strstr(message, "oversized frame") != nullptr) {
    PX_LOG(WARNING) << "thrift: " << message
                    << " (a request over the frame limit, or a TLS client of this plaintext "
                       "server; the connection was closed)";
  } else {
    PX_LOG(WARNING) << "thrift: " << message;
  }
}

void LogDroppedConnection(const std::string& server, const std::string& peer,
                          const std::string& error) {
  static LogLimiter tls_log(RealClock(), 10'000);
  static LogLimiter oversized_log(RealClock(), 10'000);
  static LogLimiter other_log(RealClock(), 10'000);
  std::string hint;
  LogLimiter* limiter = &other_log;
  if (error.find("SSL_accept") != std::string::npos) {
    limiter = &tls_log;
    hint = " (a client that does not speak TLS, or does not trust this server's certificate, "
           "was refused; it needs --tls-ca or $PARALLAX_TLS_CA with the CA that signed "
           "--tls-cert)";
  } else if (error.find("oversized frame") != std::string::npos) {
    limiter = &oversized_log;
    hint = " (a request over the frame limit, or a TLS client of this plaintext server)";
  }
  if (IsClientDisconnect(error.c_str())) {
    PX_LOG(DEBUG) << server << ": the client at " << peer << " went away: " << error;
    return;
  }
  int64_t held = 0;
  if (!limiter->Allow(&held)) return;
  PX_LOG(WARNING) << server << ": dropped the connection from " << peer << ": " << error << hint
                  << (held > 0 ? " (and " + std::to_string(held) + " more in the last 10 s)" : "");
}

void RouteThriftOutputToLog() {
  static std::once_flag once;
  std::call_once(once, [] { apache::thrift::GlobalOutput.setOutputFunction(ThriftOutputToLog); });
}

}  // namespace parallax
