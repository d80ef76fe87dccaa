// ShardConnections: the connection cap of a PS shard's ZeroMQ ROUTER socket.
//
// ZeroMQ accepts TCP connections on its own I/O thread and has no limit on
// how many it keeps, so a flood of idle connections would take every
// descriptor of the shard. ShardConnections watches the socket's monitor
// (ZMQ_EVENT_ACCEPTED, ZMQ_EVENT_DISCONNECTED, each with the connection's
// descriptor) and keeps a ConnectionGuard (core/rpc/connection_guard.h) of
// them: a connection counts as authenticated once a message arrived on it
// (ZMQ_SRCFD), which with CURVE means it passed the shard's ZAP check. At
// the cap the oldest connection that never sent a message is shut down
// (ZeroMQ then drops it). A connection that does not finish ZeroMQ's
// handshake (with CURVE: its authentication) within the socket's
// ZMQ_HANDSHAKE_IVL is closed by ZeroMQ itself; there is no other deadline,
// as a worker may connect long before its first push. When the process runs
// out of descriptors ZeroMQ keeps serving the connections it has and retries
// the accept; the monitor's ZMQ_EVENT_ACCEPT_FAILED is logged once per 10 s.
//
// Loop thread only (the thread that owns the router socket).
#ifndef PARALLAX_PS_SHARD_CONNECTIONS_H_
#define PARALLAX_PS_SHARD_CONNECTIONS_H_

#include <map>
#include <memory>
#include <set>
#include <string>

#include <zmq.hpp>

#include "core/base/log_limiter.h"
#include "core/rpc/connection_guard.h"

namespace parallax::ps {

class ShardConnections {
 public:
  // Starts monitoring `router` (which must outlive this object) through an
  // inproc socket of `ctx`. max_connections 0: DefaultMaxConnections of the
  // process's open-file limit.
  ShardConnections(zmq::context_t& ctx, zmq::socket_t& router, int max_connections);
  ~ShardConnections();

  // The socket to poll for monitor events.
  zmq::socket_t& monitor() { return monitor_; }
  // Handles every monitor event waiting.
  void OnMonitorEvents();
  // A message arrived on the connection with descriptor `fd`.
  void Spoke(int fd);

  int max_connections() const { return guard_->max_connections(); }

 private:
  zmq::socket_t& router_;
  zmq::socket_t monitor_;
  std::unique_ptr<ConnectionGuard> guard_;
  std::map<int, ConnectionGuard::Id> ids_;  // open connections by descriptor
  std::set<int> spoke_;                     // descriptors that sent a message
  LogLimiter accept_failed_log_;
};

}  // namespace parallax::ps

#endif  // PARALLAX_PS_SHARD_CONNECTIONS_H_
