// ConnectionGuard: the bookkeeping and the policy that keep a server
// answering its own clients while someone floods it with connections.
//
// Every accepted connection is registered (Admit) and tells the guard what it
// is doing (SetPhase) and when it has proved itself (SetAuthenticated: a
// request carried the service's shared secret, or, on a server without one,
// a request header could be read). The guard
//   - caps the open connections at ConnectionLimits::max_connections. When a
//     new connection arrives at the cap it closes, in this order, the oldest
//     connection that has not authenticated and never sent a byte, else the
//     oldest that has not authenticated, else the authenticated connection
//     idle (between requests) the longest; if every connection is
//     authenticated and busy in a request, the new one is refused. A real
//     client sends its request as soon as it connects, so an idle flood never
//     pushes it out, and a slow one only if the flood opens more connections
//     than the cap while the client's first request is in flight. A closed
//     connection holds its descriptor until its thread runs; while
//     max_connections / 8 (at least 8) of them are still being released, a
//     new connection that has sent nothing is refused at once rather than
//     admitted, so that a flood faster than the threads cannot run the
//     process out of descriptors;
//   - closes a connection that has not authenticated within
//     auth_timeout_ms of being accepted (idle floods, slow senders and slow
//     TLS handshakes alike), a request that has not arrived whole
//     request_timeout_ms after its first byte, and, when idle_timeout_ms is
//     set, an authenticated connection idle that long.
// A connection in a request (kHandling: a long poll, a key-value wait) is
// never closed for a deadline: blocking calls carry their own.
//
// "Close" is shutdown(fd, SHUT_RDWR) by default: the connection's own thread
// sees end-of-file, calls Remove() and then closes the descriptor, so the
// guard never touches a descriptor number that was reused. Each kind of
// closing is logged at most once per 10 s with the count held back.
//
// Thread-safe.
#ifndef PARALLAX_CORE_RPC_CONNECTION_GUARD_H_
#define PARALLAX_CORE_RPC_CONNECTION_GUARD_H_

#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <string>

#include "core/base/clock.h"
#include "core/base/log_limiter.h"

namespace parallax {

struct ConnectionLimits {
  // Open connections at most; 0: DefaultMaxConnections() of the process's
  // open-file limit when the server starts.
  int max_connections = 0;
  // A connection that has not authenticated this long after it was accepted
  // is closed.
  int64_t auth_timeout_ms = 10'000;
  // A request must arrive whole within this long of its first byte; also
  // the send timeout of a reply to a client that does not read it.
  int64_t request_timeout_ms = 60'000;
  // An authenticated connection idle between requests this long is closed
  // (0: never; at the cap the idlest one is closed anyway).
  int64_t idle_timeout_ms = 0;
  // Bytes of a request read before its header's secret is checked: a bigger
  // request from a connection that has not authenticated yet is refused
  // without reading (or allocating) the rest.
  uint32_t unauthenticated_request_bytes = 64 << 10;
  // The flag that sets max_connections, as log lines name it.
  std::string limit_flag = "--max-connections";
};

// "10.0.0.5:41234" or "[::1]:41234": the peer of connected socket `fd`, as
// the guard's log lines name it ("?" when it cannot be told; "a local
// socket" for a Unix socket).
std::string PeerName(int fd);

// The cap used when ConnectionLimits::max_connections is 0: the open-file
// limit less a reserve for the process's other descriptors (an eighth, at
// least 32), at most 16384 and at least 16.
int DefaultMaxConnections(int64_t open_file_limit);

enum class ConnectionPhase {
  kIdle,      // waiting for a request (also before the first)
  kReading,   // a request has started to arrive
  kHandling,  // a request is being handled or answered
};

class ConnectionGuard {
 public:
  using Id = uint64_t;
  // Closes a connection's socket so that its thread wakes up and ends.
  using Closer = std::function<void(int fd)>;

  // `what` names the server in log lines ("coordinator"). `clock` must
  // outlive the guard. `closer` null: shutdown(fd, SHUT_RDWR).
  // REQUIRES: limits.max_connections > 0.
  ConnectionGuard(ConnectionLimits limits, Clock* clock, std::string what, Closer closer = nullptr);

  // Registers a connection accepted on `fd` from `peer` ("10.0.0.5:41234"),
  // first closing what the cap requires (see above); `spoke`: bytes were
  // already waiting on it. nullopt when the cap is reached and nothing may
  // be closed: the caller closes `fd` itself.
  std::optional<Id> Admit(int fd, const std::string& peer, bool spoke = false);
  void SetPhase(Id id, ConnectionPhase phase);
  void SetAuthenticated(Id id);
  // Forgets `id`: from now on the guard never touches its descriptor. Call
  // before closing it.
  void Remove(Id id);

  // Closes every connection past one of its deadlines; returns how many.
  int CloseExpired();
  // Closes every connection (a server stopping).
  void CloseAll();

  int max_connections() const { return limits_.max_connections; }
  const ConnectionLimits& limits() const { return limits_; }
  struct Counts {
    int open = 0;
    int unauthenticated = 0;
    int closing = 0;  // closed by the guard, their threads not yet done
    // Since construction: connections refused at the cap (Admit returned
    // nullopt), closed to make room for a new one, and closed for a deadline.
    int64_t refused = 0;
    int64_t evicted = 0;
    int64_t expired = 0;
  };
  Counts counts() const;

 private:
  struct Connection {
    int fd = -1;
    std::string peer;
    int64_t accepted_ms = 0;
    ConnectionPhase phase = ConnectionPhase::kIdle;
    int64_t phase_ms = 0;  // when `phase` began
    bool authenticated = false;
    bool spoke = false;    // has sent a byte
    bool closed = false;   // closer called; waiting for Remove
  };
  // The connection to close to make room, or connections_.end().
  // REQUIRES: mu_ held.
  std::map<Id, Connection>::iterator Victim();
  // REQUIRES: mu_ held.
  void Close(Connection& c);
  // Why `c` is past a deadline at `now` ("" when it is not). REQUIRES: mu_ held.
  std::string Expired(const Connection& c, int64_t now) const;

  // Constant after construction.
  const ConnectionLimits limits_;
  Clock* const clock_;
  const std::string what_;
  const Closer closer_;

  mutable std::mutex mu_;
  std::map<Id, Connection> connections_;  // GUARDED_BY(mu_), by id = accept order
  int open_ = 0;                          // GUARDED_BY(mu_): not yet closed by the guard
  int closing_ = 0;                       // GUARDED_BY(mu_): closed, not yet removed
  Id next_id_ = 1;                        // GUARDED_BY(mu_)
  int64_t refused_ = 0;                   // GUARDED_BY(mu_)
  int64_t evicted_ = 0;                   // GUARDED_BY(mu_)
  int64_t expired_ = 0;                   // GUARDED_BY(mu_)

  LogLimiter evicted_log_;
  LogLimiter refused_log_;
  LogLimiter expired_log_;
};

}  // namespace parallax

#endif  // PARALLAX_CORE_RPC_CONNECTION_GUARD_H_
