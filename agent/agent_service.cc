#include "agent/agent_service.h"

#include <thrift/TOutput.h>
#include <thrift/protocol/TBinaryProtocol.h>
#include <thrift/server/TThreadedServer.h>
#include <thrift/transport/TBufferTransports.h>
#include <thrift/transport/TServerSocket.h>

#include <future>
#include <thread>

#include "core/base/logging.h"
#include "schemas/coordinator_constants.h"

namespace parallax::agent {
namespace {

using apache::thrift::protocol::TBinaryProtocolFactory;
using apache::thrift::server::TServerEventHandler;
using apache::thrift::server::TThreadedServer;
using apache::thrift::transport::TFramedTransportFactory;
using apache::thrift::transport::TServerSocket;

[[noreturn]] void Throw(rpc::ErrorCode::type code, const std::string& message) {
  rpc::CoordinatorError e;
  e.code = code;
  e.message = message;
  throw e;
}

rpc::ErrorCode::type ToErrorCode(StatusCode code) {
  switch (code) {
    case StatusCode::kInvalidArgument: return rpc::ErrorCode::INVALID_ARGUMENT;
    case StatusCode::kNotFound: return rpc::ErrorCode::NOT_FOUND;
    case StatusCode::kFailedPrecondition: return rpc::ErrorCode::FAILED_PRECONDITION;
    case StatusCode::kDeadlineExceeded: return rpc::ErrorCode::DEADLINE_EXCEEDED;
    case StatusCode::kUnavailable: return rpc::ErrorCode::UNAVAILABLE;
    default: return rpc::ErrorCode::INTERNAL;
  }
}

bool ConstantTimeEquals(const std::string& a, const std::string& b) {
  unsigned char diff = a.size() == b.size() ? 0 : 1;
  for (size_t i = 0; i < a.size(); ++i) {
    diff |= static_cast<unsigned char>(a[i] ^ (i < b.size() ? b[i] : 0));
  }
  return diff == 0;
}

class ReadySignal : public TServerEventHandler {
 public:
  explicit ReadySignal(std::promise<void> ready) : ready_(std::move(ready)) {}
  void preServe() override { ready_.set_value(); }

 private:
  std::promise<void> ready_;
};

class ThriftAgentServer : public AgentServer {
 public:
  ThriftAgentServer(std::shared_ptr<TServerSocket> socket, std::shared_ptr<TThreadedServer> server)
      : socket_(std::move(socket)), server_(std::move(server)) {}
  ~ThriftAgentServer() override { Stop(); }

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

void ThriftToLog(const char* message) { PX_LOG(WARNING) << "thrift: " << message; }

}  // namespace

AgentService::AgentService(LogSource* logs, Clock* clock, AgentServiceOptions options)
    : logs_(logs), clock_(clock), options_(std::move(options)) {}

void AgentService::CheckHeader(const rpc::RequestHeader& header) const {
  int32_t ours = options_.protocol_version != 0 ? options_.protocol_version
                                                : rpc::g_coordinator_constants.PROTOCOL_VERSION;
  if (header.protocol_version != ours) {
    Throw(rpc::ErrorCode::VERSION_MISMATCH,
          "protocol version mismatch: the client speaks version " +
              std::to_string(header.protocol_version) + ", this agent (parallax-agent " +
              options_.version + ") speaks version " + std::to_string(ours) +
              "; use the same Parallax release on both sides");
  }
  if (!options_.auth_token.empty() && !ConstantTimeEquals(header.auth_token, options_.auth_token)) {
    Throw(rpc::ErrorCode::UNAUTHENTICATED,
          header.auth_token.empty()
              ? "this agent requires a token; set PARALLAX_TOKEN or pass --token"
              : "wrong token for this agent; check PARALLAX_TOKEN or --token");
  }
}

void AgentService::Hello(rpc::HelloResponse& out, const rpc::RequestHeader& header) {
  CheckHeader(header);
  out.protocol_version = options_.protocol_version != 0
                             ? options_.protocol_version
                             : rpc::g_coordinator_constants.PROTOCOL_VERSION;
  out.server_version = options_.version;
  out.server_time = clock_->NowMillis();
}

void AgentService::ReadLog(rpc::LogChunk& out, const rpc::RequestHeader& header,
                           const rpc::TaskKey& task, int64_t offset, int32_t max_bytes) {
  CheckHeader(header);
  StatusOr<rpc::LogChunk> chunk = logs_->ReadLog(task, offset, max_bytes);
  if (!chunk.ok()) Throw(ToErrorCode(chunk.status().code()), chunk.status().message());
  out = std::move(chunk).value();
}

StatusOr<std::pair<std::string, int>> SplitHostPort(const std::string& address) {
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

StatusOr<std::unique_ptr<AgentServer>> StartAgentServer(const AgentServerOptions& options,
                                                        std::shared_ptr<rpc::AgentIf> handler) {
  apache::thrift::GlobalOutput.setOutputFunction(ThriftToLog);
  auto processor = std::make_shared<rpc::AgentProcessor>(handler);
  auto socket = std::make_shared<TServerSocket>(options.host, options.port);
  auto transports = std::make_shared<TFramedTransportFactory>();
  auto protocols = std::make_shared<TBinaryProtocolFactory>();
  // Requests are small; bound what a garbage frame can make us allocate.
  protocols->setStringSizeLimit(1 << 20);
  protocols->setContainerSizeLimit(10'000);
  auto threaded = std::make_shared<TThreadedServer>(processor, socket, transports, protocols);
  std::promise<void> ready;
  std::future<void> ready_future = ready.get_future();
  threaded->setServerEventHandler(std::make_shared<ReadySignal>(std::move(ready)));

  auto server = std::make_unique<ThriftAgentServer>(socket, threaded);
  std::future<void> exited = server->exited();
  server->Start();
  while (true) {
    if (ready_future.wait_for(std::chrono::milliseconds(5)) == std::future_status::ready) break;
    if (exited.wait_for(std::chrono::milliseconds(0)) == std::future_status::ready) {
      std::string why = server->error();
      server->Stop();
      return Unavailable("cannot listen on " + options.host + ":" + std::to_string(options.port) +
                         ": " + why + "; is another process using the port?");
    }
  }
  PX_LOG(INFO) << "agent log service listening on " << options.host << ":" << server->port();
  return std::unique_ptr<AgentServer>(std::move(server));
}

}  // namespace parallax::agent
