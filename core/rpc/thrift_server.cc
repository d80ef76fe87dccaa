#include "core/rpc/thrift_server.h"

#include <thrift/TConfiguration.h>
#include <thrift/TProcessor.h>
#include <thrift/protocol/TBinaryProtocol.h>
#include <thrift/server/TThreadedServer.h>
#include <thrift/transport/TBufferTransports.h>
#include <thrift/transport/TServerSocket.h>

#include <future>
#include <thread>

#include "core/base/logging.h"
#include "core/rpc/thrift_log.h"
#include "core/rpc/tls.h"

namespace parallax {
namespace {

using apache::thrift::TConfiguration;
using apache::thrift::TProcessor;
using apache::thrift::protocol::TBinaryProtocolFactory;
using apache::thrift::server::TServerEventHandler;
using apache::thrift::server::TThreadedServer;
using apache::thrift::transport::TFramedTransportFactory;
using apache::thrift::transport::TServerSocket;
using apache::thrift::transport::TTransport;

// Thrift's framed transport with our frame and message size limits (its
// factory always uses the 16 MB defaults).
class LimitedFramedTransportFactory : public TFramedTransportFactory {
 public:
  explicit LimitedFramedTransportFactory(uint32_t max_bytes)
      : config_(std::make_shared<TConfiguration>(static_cast<int>(max_bytes),
                                                 static_cast<int>(max_bytes))) {}
  std::shared_ptr<TTransport> getTransport(std::shared_ptr<TTransport> trans) override {
    return std::make_shared<apache::thrift::transport::TFramedTransport>(std::move(trans),
                                                                         config_);
  }

 private:
  std::shared_ptr<TConfiguration> config_;
};

// Tells the starting thread when the socket is listening.
class ReadySignal : public TServerEventHandler {
 public:
  explicit ReadySignal(std::promise<void> ready) : ready_(std::move(ready)) {}
  void preServe() override { ready_.set_value(); }

 private:
  std::promise<void> ready_;
};

class ThreadedServer : public ThriftServer {
 public:
  ThreadedServer(std::shared_ptr<TServerSocket> socket, std::shared_ptr<TThreadedServer> server)
      : socket_(std::move(socket)), server_(std::move(server)) {}
  ~ThreadedServer() override { Stop(); }

  int port() const override { return socket_->getPort(); }

  void Start() {
    thread_ = std::thread([this] {
      try {
        server_->serve();
      } catch (const std::exception& e) {
        error_ = e.what();
      }
      exited_.set_value();
    });
  }

  void Stop() override {
    if (thread_.joinable()) {
      server_->stop();
      thread_.join();
    }
  }

  std::future<void> exited() { return exited_.get_future(); }
  const std::string& error() const { return error_; }

 private:
  std::shared_ptr<TServerSocket> socket_;
  std::shared_ptr<TThreadedServer> server_;
  std::thread thread_;
  std::promise<void> exited_;
  std::string error_;  // written by thread_ before exited_ is set
};

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
  PX_ASSIGN_OR_RETURN(std::shared_ptr<TServerSocket> socket,
                      NewThriftServerSocket(options.host, options.port, options.tls_cert_file,
                                            options.tls_key_file));
  if (options.idle_timeout_ms > 0) socket->setRecvTimeout(options.idle_timeout_ms);
  auto transports = std::make_shared<LimitedFramedTransportFactory>(options.max_frame_bytes);
  auto protocols = std::make_shared<TBinaryProtocolFactory>();
  // Bound what a garbage or hostile frame can make us allocate.
  protocols->setStringSizeLimit(static_cast<int32_t>(options.max_string_bytes));
  protocols->setContainerSizeLimit(1'000'000);
  auto threaded =
      std::make_shared<TThreadedServer>(std::move(processor), socket, transports, protocols);
  std::promise<void> ready;
  std::future<void> ready_future = ready.get_future();
  threaded->setServerEventHandler(std::make_shared<ReadySignal>(std::move(ready)));

  auto server = std::make_unique<ThreadedServer>(socket, threaded);
  std::future<void> exited = server->exited();
  server->Start();
  // Either the socket is listening (preServe ran) or serve() threw.
  while (true) {
    if (ready_future.wait_for(std::chrono::milliseconds(5)) == std::future_status::ready) break;
    if (exited.wait_for(std::chrono::milliseconds(0)) == std::future_status::ready) {
      std::string why = server->error();
      server->Stop();
      return Unavailable("cannot listen on " + options.host + ":" + std::to_string(options.port) +
                         " for the " + options.what + ": " + why +
                         "; is another process using the port?");
    }
  }
  PX_LOG(INFO) << options.what << " listening on " << options.host << ":" << server->port()
               << (options.tls_cert_file.empty() ? "" : " (TLS)");
  return std::unique_ptr<ThriftServer>(std::move(server));
}

}  // namespace parallax
