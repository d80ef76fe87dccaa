// GuardedAcceptor: the accept loop that every Parallax server on a TCP port
// shares (the Thrift services and the coordinator's web server): a
// ConnectionGuard (core/rpc/connection_guard.h) that registers each
// connection from the moment it is accepted, a thread per connection (so a
// slow or idle client holds its own thread, never one that another client
// waits for), a reaper that enforces the guard's deadlines every 200 ms and
// joins finished threads, and an accept loop that survives running out of
// descriptors (EMFILE, ENFILE: it sheds the pending connection unanswered,
// logs once per 10 s, backs off briefly and keeps serving).
//
// A deadline counted from accept is what keeps a server answering under
// slow clients: a connection waiting in a queue for a worker thread has no
// deadline running, and a full queue stops the accept loop, which is how a
// few dozen half-sent requests once made a fixed-pool server unreachable.
//
// Thread-safe.
#ifndef PARALLAX_CORE_RPC_GUARDED_ACCEPTOR_H_
#define PARALLAX_CORE_RPC_GUARDED_ACCEPTOR_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "core/rpc/connection_guard.h"
#include "parallax/status.h"

namespace parallax {

class GuardedAcceptor {
 public:
  // Serves one accepted connection on its own thread. It owns `fd`: it calls
  // guard()->Remove(id) and then closes `fd` before it returns (the guard
  // must never touch a descriptor number that was reused).
  using ServeFn = std::function<void(int fd, ConnectionGuard::Id id, const std::string& peer)>;

  virtual ~GuardedAcceptor() = default;

  // Starts accepting. Connections may be served before Start() returns, so
  // whatever `serve` reads (the acceptor's owner's members included) must be
  // set before it is called. UNAVAILABLE when the process cannot make the
  // descriptors the loop needs. Call once.
  virtual Status Start() = 0;

  // The guard every connection is registered with; constant for the
  // acceptor's life.
  virtual ConnectionGuard* guard() = 0;
  // Connections closed unanswered because the process was out of
  // descriptors (EMFILE, ENFILE) when they arrived.
  virtual int64_t shed() const = 0;
  // Stops accepting, closes every connection and joins every thread; the
  // caller closes the listening descriptor afterwards. Idempotent. Connections blocked in a handler
  // must be released by the caller first.
  virtual void Stop() = 0;
};

// An acceptor for `listen_fd` (bound and listening; the acceptor makes it
// non-blocking but does not own it: close it after Stop()) that serves each
// connection with `serve` once started. `what` names the server in log
// lines. Made and started in two steps so that its owner can store it
// before the first connection is served (a connection thread that read the
// owner's pointer to it while the owner was still starting it once crashed
// a restarted coordinator). REQUIRES: limits.max_connections > 0.
std::unique_ptr<GuardedAcceptor> NewGuardedAcceptor(int listen_fd, const ConnectionLimits& limits,
                                                    const std::string& what,
                                                    GuardedAcceptor::ServeFn serve);

}  // namespace parallax

#endif  // PARALLAX_CORE_RPC_GUARDED_ACCEPTOR_H_
