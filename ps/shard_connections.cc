#include "ps/shard_connections.h"

#include <sys/socket.h>

#include <cstring>
#include <vector>

#include <zmq_addon.hpp>

#include "core/base/daemon.h"
#include "core/base/logging.h"

namespace parallax::ps {
namespace {

constexpr char kMonitor[] = "inproc://px-shard-monitor";

}  // namespace

ShardConnections::ShardConnections(zmq::context_t& ctx, zmq::socket_t& router,
                                   int max_connections)
    : router_(router), accept_failed_log_(RealClock(), 10'000) {
  ConnectionLimits limits;
  limits.max_connections =
      max_connections > 0 ? max_connections : DefaultMaxConnections(OpenFileLimit());
  guard_ = std::make_unique<ConnectionGuard>(limits, RealClock(), "PS shard");
  const int events = ZMQ_EVENT_ACCEPTED | ZMQ_EVENT_DISCONNECTED | ZMQ_EVENT_ACCEPT_FAILED;
  if (zmq_socket_monitor(router_.handle(), kMonitor, events) != 0) {
    throw zmq::error_t();
  }
  monitor_ = zmq::socket_t(ctx, zmq::socket_type::pair);
  monitor_.set(zmq::sockopt::linger, 0);
  monitor_.connect(kMonitor);
}

ShardConnections::~ShardConnections() {
  zmq_socket_monitor(router_.handle(), nullptr, 0);
}

void ShardConnections::OnMonitorEvents() {
  std::vector<zmq::message_t> event;
  while (true) {
    event.clear();
    if (!zmq::recv_multipart(monitor_, std::back_inserter(event), zmq::recv_flags::dontwait)) {
      return;
    }
    if (event.empty() || event[0].size() < 6) continue;
    uint16_t kind = 0;
    uint32_t value = 0;
    std::memcpy(&kind, event[0].data(), sizeof(kind));
    std::memcpy(&value, static_cast<const char*>(event[0].data()) + 2, sizeof(value));
    const int fd = static_cast<int>(value);
    if (kind == ZMQ_EVENT_ACCEPTED) {
      const bool spoke = spoke_.count(fd) > 0;
      std::optional<ConnectionGuard::Id> id = guard_->Admit(fd, PeerName(fd), spoke);
      if (!id) {
        shutdown(fd, SHUT_RDWR);  // ZeroMQ drops it and reports it disconnected
        continue;
      }
      ids_[fd] = *id;
      if (spoke) guard_->SetAuthenticated(*id);
    } else if (kind == ZMQ_EVENT_DISCONNECTED) {
      auto it = ids_.find(fd);
      if (it != ids_.end()) {
        guard_->Remove(it->second);
        ids_.erase(it);
      }
      spoke_.erase(fd);
    } else if (kind == ZMQ_EVENT_ACCEPT_FAILED) {  // the value is an errno
      if (int64_t held; accept_failed_log_.Allow(&held)) {
        PX_LOG(WARNING) << "PS shard: cannot accept a connection: " << std::strerror(fd)
                        << " (the open-file limit is " << OpenFileLimit() << ", "
                        << guard_->counts().open << " connections open); ZeroMQ retries"
                        << (held > 0 ? " (" + std::to_string(held) + " more in the last 10 s)"
                                     : "");
      }
    }
  }
}

void ShardConnections::Spoke(int fd) {
  if (fd < 0 || !spoke_.insert(fd).second) return;
  auto it = ids_.find(fd);
  if (it != ids_.end()) guard_->SetAuthenticated(it->second);
}

}  // namespace parallax::ps
