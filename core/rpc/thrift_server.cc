#include "core/rpc/thrift_server.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <thrift/TProcessor.h>
#include <thrift/protocol/TBinaryProtocol.h>
#include <thrift/transport/TServerSocket.h>
#include <thrift/transport/TSocket.h>
#include <thrift/transport/TTransportException.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <map>
#include <mutex>
#include <system_error>
#include <thread>
#include <vector>

#include "core/base/daemon.h"
#include "core/base/log_limiter.h"
#include "core/base/logging.h"
#include "core/rpc/guarded_transport.h"
#include "core/rpc/thrift_log.h"
#include "core/rpc/tls.h"

namespace parallax {
namespace {

using apache::thrift::TException;
using apache::thrift::TProcessor;
using apache::thrift::protocol::TBinaryProtocolFactory;
using apache::thrift::transport::TSocket;
using apache::thrift::transport::TTransportException;

// How often deadlines are checked and finished connection threads joined.
constexpr int kReapPeriodMs = 200;

class GuardedServer : public ThriftServer {
 public:
  GuardedServer(const ThriftServerOptions& options, std::shared_ptr<TProcessor> processor,
                ThriftServerSocket socket, ConnectionLimits limits)
      : options_(options),
        processor_(std::move(processor)),
        socket_(std::move(socket)),
        guard_(limits, RealClock(), options.what),
        protocols_(std::make_shared<TBinaryProtocolFactory>()),
        emfile_log_(RealClock(), 10'000),
        accept_log_(RealClock(), 10'000),
        thread_log_(RealClock(), 10'000) {
    // Bound what a garbage or hostile frame can make us allocate.
    protocols_->setStringSizeLimit(static_cast<int32_t>(options.max_string_bytes));
    protocols_->setContainerSizeLimit(1'000'000);
    transport_options_.max_frame_bytes = options.max_frame_bytes;
    transport_options_.unauthenticated_bytes = limits.unauthenticated_request_bytes;
    transport_options_.auth_token = options.auth_token;
  }
  ~GuardedServer() override { Stop(); }

  // Binds and listens. UNAVAILABLE saying why when it cannot.
  Status Listen() {
    socket_.listener->setAcceptBacklog(4096);
    try {
      socket_.listener->listen();
    } catch (const TException& e) {
      return Unavailable("cannot listen on " + options_.host + ":" +
                         std::to_string(options_.port) + " for the " + options_.what + ": " +
                         e.what() + "; is another process using the port?");
    }
    listen_fd_ = static_cast<int>(socket_.listener->getSocketFD());
    fcntl(listen_fd_, F_SETFL, fcntl(listen_fd_, F_GETFL) | O_NONBLOCK);
    stop_fd_ = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    reserve_fd_ = open("/dev/null", O_RDONLY | O_CLOEXEC);
    if (stop_fd_ < 0 || reserve_fd_ < 0) {
      return Unavailable("cannot start the " + options_.what + ": " + std::strerror(errno));
    }
    return Status::Ok();
  }

  void Start() {
    accept_thread_ = std::thread([this] { AcceptLoop(); });
    reaper_thread_ = std::thread([this] { ReaperLoop(); });
  }

  int port() const override { return socket_.listener->getPort(); }
  int max_connections() const override { return guard_.max_connections(); }

  void Stop() override {
    if (stop_fd_ >= 0) {
      uint64_t one = 1;
      if (write(stop_fd_, &one, sizeof(one)) < 0) PX_LOG(WARNING) << "stop: " << strerror(errno);
    }
    if (accept_thread_.joinable()) accept_thread_.join();
    if (reaper_thread_.joinable()) reaper_thread_.join();
    guard_.CloseAll();
    std::map<ConnectionGuard::Id, std::thread> threads;
    {
      std::lock_guard<std::mutex> lock(threads_mu_);
      threads.swap(threads_);
      finished_.clear();
    }
    for (auto& [id, thread] : threads) thread.join();
    if (socket_.listener) socket_.listener->close();
    for (int* fd : {&stop_fd_, &reserve_fd_}) {
      if (*fd >= 0) close(*fd);
      *fd = -1;
    }
  }

 private:
  void AcceptLoop();
  // Accepts what is pending; returns false when the loop should back off.
  bool AcceptPending();
  // Out of descriptors: takes the oldest pending connection off the queue
  // with the reserve descriptor and closes it at once, so the loop does not
  // spin on a connection it cannot accept.
  void ShedPending(int error);
  void Admit(int fd);
  void Serve(int fd, ConnectionGuard::Id id, const std::string& peer);
  void ReaperLoop();
  void JoinFinished();
  // Waits up to `ms` for Stop(); true when stopping.
  bool StopRequested(int ms) const {
    pollfd p = {stop_fd_, POLLIN, 0};
    return poll(&p, 1, ms) > 0;
  }

  // Constant after construction (fds after Listen).
  const ThriftServerOptions options_;
  const std::shared_ptr<TProcessor> processor_;
  ThriftServerSocket socket_;
  ConnectionGuard guard_;
  std::shared_ptr<TBinaryProtocolFactory> protocols_;
  GuardedTransportOptions transport_options_;
  int listen_fd_ = -1;
  int stop_fd_ = -1;
  int reserve_fd_ = -1;  // accept loop only (and Stop, after it ended)

  LogLimiter emfile_log_;
  LogLimiter accept_log_;
  LogLimiter thread_log_;

  std::mutex threads_mu_;
  std::map<ConnectionGuard::Id, std::thread> threads_;  // GUARDED_BY(threads_mu_)
  std::vector<ConnectionGuard::Id> finished_;          // GUARDED_BY(threads_mu_)
  std::thread accept_thread_;
  std::thread reaper_thread_;
};

void GuardedServer::AcceptLoop() {
  while (true) {
    pollfd fds[2] = {{listen_fd_, POLLIN, 0}, {stop_fd_, POLLIN, 0}};
    if (poll(fds, 2, -1) < 0 && errno != EINTR) {
      if (StopRequested(50)) return;
      continue;
    }
    if (fds[1].revents != 0) return;
    if (fds[0].revents != 0 && !AcceptPending() && StopRequested(10)) return;
  }
}

bool GuardedServer::AcceptPending() {
  for (int i = 0; i < 256; ++i) {
    int fd = accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd >= 0) {
      Admit(fd);
      continue;
    }
    const int error = errno;
    switch (error) {
      case EAGAIN:
      case EINTR:
      case ECONNABORTED:
      case EPROTO:
        if (error == EAGAIN) return true;
        continue;
      case EMFILE:
      case ENFILE:
        ShedPending(error);
        return false;
      default:  // ENOBUFS, ENOMEM, ...: the kernel is short; try again soon
        if (int64_t held; accept_log_.Allow(&held)) {
          PX_LOG(WARNING) << options_.what << ": accept failed: " << std::strerror(error)
                          << "; retrying" << (held ? " (" + std::to_string(held) + " more)" : "");
        }
        return false;
    }
  }
  return true;
}

void GuardedServer::ShedPending(int error) {
  if (reserve_fd_ >= 0) {
    close(reserve_fd_);
    int fd = accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd >= 0) close(fd);
    reserve_fd_ = open("/dev/null", O_RDONLY | O_CLOEXEC);
  }
  if (int64_t held; emfile_log_.Allow(&held)) {
    PX_LOG(WARNING) << options_.what << ": out of file descriptors (" << std::strerror(error)
                    << ", the open-file limit is " << OpenFileLimit() << ", "
                    << guard_.counts().open << " connections open): closed a new connection "
                    << "unanswered" << (held ? " (and " + std::to_string(held) + " more)" : "")
                    << "; lower --max-connections or raise the limit (LimitNOFILE=)";
  }
}

void GuardedServer::Admit(int fd) {
  const std::string peer = PeerName(fd);
  // A client sends its request as soon as it connects: bytes already waiting
  // set it apart from a connection that only holds a descriptor.
  int waiting = 0;
  const bool spoke = ioctl(fd, FIONREAD, &waiting) == 0 && waiting > 0;
  std::optional<ConnectionGuard::Id> id = guard_.Admit(fd, peer, spoke);
  if (!id) {
    close(fd);
    return;
  }
  std::lock_guard<std::mutex> lock(threads_mu_);
  try {
    threads_.emplace(*id, std::thread([this, fd, id = *id, peer] { Serve(fd, id, peer); }));
  } catch (const std::system_error& e) {
    guard_.Remove(*id);
    close(fd);
    if (int64_t held; thread_log_.Allow(&held)) {
      PX_LOG(WARNING) << options_.what << ": cannot start a thread for the connection from "
                      << peer << " (" << e.what() << "); closed it"
                      << (held ? " (and " + std::to_string(held) + " more)" : "");
    }
  }
}

void GuardedServer::Serve(int fd, ConnectionGuard::Id id, const std::string& peer) {
  std::shared_ptr<TSocket> socket;
  try {
    socket = socket_.wrap(fd);  // owns fd from here on
    socket->setNoDelay(true);
    socket->setSendTimeout(static_cast<int>(guard_.limits().request_timeout_ms));
    auto transport =
        std::make_shared<GuardedFramedTransport>(socket, transport_options_, &guard_, id);
    auto protocol = protocols_->getProtocol(transport);
    while (processor_->process(protocol, protocol, nullptr)) {
    }
  } catch (const TTransportException& e) {
    switch (e.getType()) {
      case TTransportException::END_OF_FILE:
      case TTransportException::INTERRUPTED:
      case TTransportException::TIMED_OUT: break;  // the client left, or a deadline closed it
      default: LogDroppedConnection(options_.what, peer, e.what());
    }
  } catch (const TException& e) {
    LogDroppedConnection(options_.what, peer, e.what());
  }
  guard_.Remove(id);  // before the descriptor is closed: the guard never touches a reused one
  if (socket) {
    try {
      socket->close();
    } catch (const TException&) {
    }
  } else {
    close(fd);
  }
  std::lock_guard<std::mutex> lock(threads_mu_);
  finished_.push_back(id);
}

void GuardedServer::ReaperLoop() {
  while (!StopRequested(kReapPeriodMs)) {
    guard_.CloseExpired();
    JoinFinished();
  }
}

void GuardedServer::JoinFinished() {
  std::vector<std::thread> done;
  {
    std::lock_guard<std::mutex> lock(threads_mu_);
    for (ConnectionGuard::Id id : finished_) {
      auto it = threads_.find(id);
      if (it == threads_.end()) continue;
      done.push_back(std::move(it->second));
      threads_.erase(it);
    }
    finished_.clear();
  }
  for (std::thread& t : done) t.join();
}

}  // namespace

StatusOr<std::pair<std::string, int>> ParseHostPort(const std::string& address) {
  size_t colon = address.rfind(':');
  if (colon == std::string::npos || colon == 0) {
    return InvalidArgument("address '" + address + "' is not HOST:PORT");
  }
  std::string host = address.substr(0, colon);
  std::string port_text = address.substr(colon + 1);
  if (host.size() > 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  if (port_text.empty() || port_text.size() > 5 ||
      port_text.find_first_not_of("0123456789") != std::string::npos ||
      std::stoi(port_text) > 65535) {
    return InvalidArgument("address '" + address + "': port '" + port_text +
                           "' is not a number from 0 to 65535");
  }
  return std::make_pair(host, std::stoi(port_text));
}

StatusOr<std::unique_ptr<ThriftServer>> StartThriftServer(
    const ThriftServerOptions& options, std::shared_ptr<apache::thrift::TProcessor> processor) {
  RouteThriftOutputToLog();
  PX_ASSIGN_OR_RETURN(ThriftServerSocket socket,
                      NewThriftServerSocket(options.host, options.port, options.tls_cert_file,
                                            options.tls_key_file));
  ConnectionLimits limits = options.limits;
  if (limits.max_connections <= 0) limits.max_connections = DefaultMaxConnections(OpenFileLimit());
  auto server =
      std::make_unique<GuardedServer>(options, std::move(processor), std::move(socket), limits);
  PX_RETURN_IF_ERROR(server->Listen());
  server->Start();
  PX_LOG(INFO) << options.what << " listening on " << options.host << ":" << server->port()
               << (options.tls_cert_file.empty() ? "" : " (TLS)") << ", at most "
               << limits.max_connections << " connections";
  return std::unique_ptr<ThriftServer>(std::move(server));
}

}  // namespace parallax
