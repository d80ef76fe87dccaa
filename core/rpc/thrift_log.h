// Thrift reports socket trouble through its process-wide GlobalOutput, which
// prints to stderr by default. RouteThriftOutputToLog() sends it to PX_LOG
// instead, at a level that fits: a refused connect is DEBUG (the caller
// turns it into a Status and the client's retry loop logs once per outage),
// a client that does not speak TLS is one explained WARNING.
#ifndef PARALLAX_CORE_RPC_THRIFT_LOG_H_
#define PARALLAX_CORE_RPC_THRIFT_LOG_H_

#include <string>

namespace parallax {

// Idempotent and thread-safe; every Thrift client and server calls it.
void RouteThriftOutputToLog();

// Logs why `server` ("coordinator") dropped the connection from `peer`:
// a client that does not speak TLS and a request over the frame limit get a
// hint saying so. At most one line per 10 s per kind, with the count of
// those held back (a flood of garbage must not flood the log). A client
// that went away (a TLS connection closed without close_notify, a reset)
// is routine: logged at debug level only.
void LogDroppedConnection(const std::string& server, const std::string& peer,
                          const std::string& error);

// What RouteThriftOutputToLog() installs (for tests).
void ThriftOutputToLog(const char* message);

}  // namespace parallax

#endif  // PARALLAX_CORE_RPC_THRIFT_LOG_H_
