#include "core/rpc/thrift_server.h"

#include <thrift/TProcessor.h>
#include <thrift/protocol/TBinaryProtocol.h>
#include <thrift/transport/TServerSocket.h>
#include <thrift/transport/TSocket.h>
#include <thrift/transport/TTransportException.h>
#include <unistd.h>

#include "core/base/daemon.h"
#include "core/base/logging.h"
#include "core/rpc/guarded_acceptor.h"
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

class GuardedServer : public ThriftServer {
 public:
  GuardedServer(const ThriftServerOptions& options, std::shared_ptr<TProcessor> processor,
                ThriftServerSocket socket, ConnectionLimits limits)
      : options_(options),
        processor_(std::move(processor)),
        socket_(std::move(socket)),
        limits_(limits),
        protocols_(std::make_shared<TBinaryProtocolFactory>()) {
    // Bound what a garbage or hostile frame can make us allocate.
    protocols_->setStringSizeLimit(static_cast<int32_t>(options.max_string_bytes));
    protocols_->setContainerSizeLimit(1'000'000);
    transport_options_.max_frame_bytes = options.max_frame_bytes;
    transport_options_.unauthenticated_bytes = limits.unauthenticated_request_bytes;
    transport_options_.auth_token = options.auth_token;
  }
  ~GuardedServer() override { Stop(); }

  // Binds, listens and starts accepting. UNAVAILABLE saying why when it
  // cannot.
  Status Start() {
    socket_.listener->setAcceptBacklog(4096);
    try {
      socket_.listener->listen();
    } catch (const TException& e) {
      return Unavailable("cannot listen on " + options_.host + ":" +
                         std::to_string(options_.port) + " for the " + options_.what + ": " +
                         e.what() + "; is another process using the port?");
    }
    // Stored before it starts: Serve reads it.
    acceptor_ = NewGuardedAcceptor(static_cast<int>(socket_.listener->getSocketFD()), limits_,
                                   options_.what,
                                   [this](int fd, ConnectionGuard::Id id, const std::string& peer) {
                                     Serve(fd, id, peer);
                                   });
    return acceptor_->Start();
  }

  int port() const override { return socket_.listener->getPort(); }
  int max_connections() const override { return limits_.max_connections; }

  void Stop() override {
    if (acceptor_) acceptor_->Stop();
    if (socket_.listener) socket_.listener->close();
  }

 private:
  void Serve(int fd, ConnectionGuard::Id id, const std::string& peer);

  // Constant after construction (the acceptor: set in Start before it starts
  // accepting, constant after).
  const ThriftServerOptions options_;
  const std::shared_ptr<TProcessor> processor_;
  ThriftServerSocket socket_;
  const ConnectionLimits limits_;
  std::shared_ptr<TBinaryProtocolFactory> protocols_;
  GuardedTransportOptions transport_options_;
  std::unique_ptr<GuardedAcceptor> acceptor_;
};

void GuardedServer::Serve(int fd, ConnectionGuard::Id id, const std::string& peer) {
  ConnectionGuard* guard = acceptor_->guard();
  std::shared_ptr<TSocket> socket;
  try {
    socket = socket_.wrap(fd);  // owns fd from here on
    socket->setNoDelay(true);
    socket->setSendTimeout(static_cast<int>(limits_.request_timeout_ms));
    auto transport =
        std::make_shared<GuardedFramedTransport>(socket, transport_options_, guard, id);
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
  guard->Remove(id);  // before the descriptor is closed: the guard never touches a reused one
  if (socket) {
    try {
      socket->close();
    } catch (const TException&) {
    }
  } else {
    close(fd);
  }
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
  PX_RETURN_IF_ERROR(server->Start());
  PX_LOG(INFO) << options.what << " listening on " << options.host << ":" << server->port()
               << (options.tls_cert_file.empty() ? "" : " (TLS)") << ", at most "
               << limits.max_connections << " connections";
  return std::unique_ptr<ThriftServer>(std::move(server));
}

}  // namespace parallax
