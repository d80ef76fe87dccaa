#include "core/rpc/connection_guard.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <algorithm>

#include "core/base/logging.h"

namespace parallax {
namespace {

constexpr int64_t kLogIntervalMs = 10'000;

std::string Held(int64_t held) {
  return held > 0 ? " (and " + std::to_string(held) + " more like it in the last 10 s)" : "";
}

}  // namespace

std::string PeerName(int fd) {
  sockaddr_storage addr{};
  socklen_t len = sizeof(addr);
  if (getpeername(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) return "?";
  char host[INET6_ADDRSTRLEN] = "?";
  if (addr.ss_family == AF_INET) {
    const auto* in = reinterpret_cast<const sockaddr_in*>(&addr);
    inet_ntop(AF_INET, &in->sin_addr, host, sizeof(host));
    return std::string(host) + ":" + std::to_string(ntohs(in->sin_port));
  }
  if (addr.ss_family == AF_INET6) {
    const auto* in6 = reinterpret_cast<const sockaddr_in6*>(&addr);
    inet_ntop(AF_INET6, &in6->sin6_addr, host, sizeof(host));
    return "[" + std::string(host) + "]:" + std::to_string(ntohs(in6->sin6_port));
  }
  return addr.ss_family == AF_UNIX ? "a local socket" : "?";
}

int DefaultMaxConnections(int64_t open_file_limit) {
  const int64_t reserve = std::max<int64_t>(32, open_file_limit / 8);
  return static_cast<int>(std::clamp<int64_t>(open_file_limit - reserve, 16, 16'384));
}

ConnectionGuard::ConnectionGuard(ConnectionLimits limits, Clock* clock, std::string what,
                                 Closer closer)
    : limits_(limits),
      clock_(clock),
      what_(std::move(what)),
      closer_(closer ? std::move(closer) : Closer([](int fd) { shutdown(fd, SHUT_RDWR); })),
      evicted_log_(clock, kLogIntervalMs),
      refused_log_(clock, kLogIntervalMs),
      expired_log_(clock, kLogIntervalMs) {
  PX_CHECK(limits_.max_connections > 0) << "max_connections must be positive";
}

std::map<ConnectionGuard::Id, ConnectionGuard::Connection>::iterator ConnectionGuard::Victim() {
  auto talking = connections_.end();  // the oldest that has not authenticated
  auto idlest = connections_.end();   // the authenticated one idle the longest
  for (auto it = connections_.begin(); it != connections_.end(); ++it) {
    const Connection& c = it->second;
    if (c.closed) continue;
    if (!c.authenticated && !c.spoke) return it;  // never sent a byte; map order: oldest first
    if (!c.authenticated) {
      if (talking == connections_.end()) talking = it;
    } else if (c.phase == ConnectionPhase::kIdle &&
               (idlest == connections_.end() || c.phase_ms < idlest->second.phase_ms)) {
      idlest = it;
    }
  }
  return talking != connections_.end() ? talking : idlest;
}

void ConnectionGuard::Close(Connection& c) {
  if (c.closed) return;
  c.closed = true;
  --open_;
  ++closing_;
  closer_(c.fd);
}

std::optional<ConnectionGuard::Id> ConnectionGuard::Admit(int fd, const std::string& peer,
                                                          bool spoke) {
  std::lock_guard<std::mutex> lock(mu_);
  const int64_t now = clock_->NowMillis();
  if (open_ >= limits_.max_connections) {
    const int max_closing = std::max(8, limits_.max_connections / 8);
    if (!spoke && closing_ >= max_closing) {
      if (int64_t held; refused_log_.Allow(&held)) {
        PX_LOG(WARNING) << what_ << ": refused a connection from " << peer
                        << " that had sent nothing: " << limits_.max_connections
                        << " connections are open (the limit, " << limits_.limit_flag << ") and " << closing_
                        << " closed ones are still being released" << Held(held);
      }
      ++refused_;
      return std::nullopt;
    }
    auto victim = Victim();
    if (victim == connections_.end()) {
      if (int64_t held; refused_log_.Allow(&held)) {
        PX_LOG(WARNING) << what_ << ": refused a connection from " << peer << ": "
                        << limits_.max_connections
                        << " connections are open (the limit) and every one is authenticated "
                           "and in a request; raise "
                        << limits_.limit_flag << " if this is a real load"
                        << Held(held);
      }
      ++refused_;
      return std::nullopt;
    }
    const Connection& v = victim->second;
    if (int64_t held; evicted_log_.Allow(&held)) {
      PX_LOG(WARNING) << what_ << ": " << limits_.max_connections
                      << " connections are open (the limit, " << limits_.limit_flag << "); closed "
                      << (v.authenticated ? "the longest idle connection, from "
                          : v.spoke       ? "the oldest connection that had not authenticated, "
                                            "from "
                                          : "the oldest connection that had sent nothing, from ")
                      << v.peer << ", to admit one from " << peer << Held(held);
    }
    Close(victim->second);
    ++evicted_;
  }
  const Id id = next_id_++;
  Connection& c = connections_[id];
  c.fd = fd;
  c.peer = peer;
  c.accepted_ms = now;
  c.phase_ms = now;
  c.spoke = spoke;
  ++open_;
  return id;
}

void ConnectionGuard::SetPhase(Id id, ConnectionPhase phase) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = connections_.find(id);
  if (it == connections_.end() || it->second.phase == phase) return;
  if (phase == ConnectionPhase::kReading) it->second.spoke = true;
  it->second.phase = phase;
  it->second.phase_ms = clock_->NowMillis();
}

void ConnectionGuard::SetAuthenticated(Id id) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = connections_.find(id);
  if (it != connections_.end()) it->second.authenticated = true;
}

void ConnectionGuard::Remove(Id id) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = connections_.find(id);
  if (it == connections_.end()) return;
  if (it->second.closed) {
    --closing_;
  } else {
    --open_;
  }
  connections_.erase(it);
}

std::string ConnectionGuard::Expired(const Connection& c, int64_t now) const {
  if (c.closed || c.phase == ConnectionPhase::kHandling) return "";
  if (!c.authenticated && now - c.accepted_ms > limits_.auth_timeout_ms) {
    return "had not authenticated " + std::to_string(limits_.auth_timeout_ms) +
           " ms after connecting";
  }
  if (c.phase == ConnectionPhase::kReading && now - c.phase_ms > limits_.request_timeout_ms) {
    return "had not sent its whole request " + std::to_string(limits_.request_timeout_ms) +
           " ms after it began";
  }
  if (c.authenticated && c.phase == ConnectionPhase::kIdle && limits_.idle_timeout_ms > 0 &&
      now - c.phase_ms > limits_.idle_timeout_ms) {
    return "was idle for " + std::to_string(limits_.idle_timeout_ms) + " ms";
  }
  return "";
}

int ConnectionGuard::CloseExpired() {
  std::lock_guard<std::mutex> lock(mu_);
  const int64_t now = clock_->NowMillis();
  int closed = 0;
  for (auto& [id, c] : connections_) {
    std::string why = Expired(c, now);
    if (why.empty()) continue;
    if (int64_t held; expired_log_.Allow(&held)) {
      PX_LOG(WARNING) << what_ << ": closed the connection from " << c.peer << ": it " << why
                      << Held(held);
    }
    Close(c);
    ++closed;
    ++expired_;
  }
  return closed;
}

void ConnectionGuard::CloseAll() {
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& [id, c] : connections_) Close(c);
}

ConnectionGuard::Counts ConnectionGuard::counts() const {
  std::lock_guard<std::mutex> lock(mu_);
  Counts counts;
  counts.refused = refused_;
  counts.evicted = evicted_;
  counts.expired = expired_;
  for (const auto& [id, c] : connections_) {
    if (c.closed) {
      ++counts.closing;
      continue;
    }
    ++counts.open;
    if (!c.authenticated) ++counts.unauthenticated;
  }
  return counts;
}

}  // namespace parallax
