#include "core/rpc/agent_client.h"

#include <thrift/TApplicationException.h>
#include <thrift/protocol/TBinaryProtocol.h>
#include <thrift/transport/TBufferTransports.h>
#include <thrift/transport/TSocket.h>
#include <thrift/transport/TTransportException.h>

#include "core/rpc/error_mapping.h"
#include "core/rpc/thrift_log.h"
#include "core/rpc/tls.h"
#include "schemas/Agent.h"
#include "schemas/coordinator_constants.h"

namespace parallax {

using apache::thrift::TException;
using apache::thrift::protocol::TBinaryProtocol;
using apache::thrift::transport::TFramedTransport;
using apache::thrift::transport::TSocket;
using apache::thrift::transport::TTransportException;

struct AgentClient::Impl {
  std::string address;
  rpc::RequestHeader header;
  std::shared_ptr<TFramedTransport> transport;
  std::unique_ptr<rpc::AgentClient> stub;
};

AgentClient::~AgentClient() {
  if (impl_ && impl_->transport) {
    try {
      impl_->transport->close();
    } catch (const TException&) {
      // Closing a broken connection; nothing to report.
    }
  }
}

StatusOr<std::unique_ptr<AgentClient>> AgentClient::Connect(const std::string& address,
                                                            const std::string& auth_token,
                                                            int timeout_ms,
                                                            const std::string& tls_ca_file) {
  size_t colon = address.rfind(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 == address.size() ||
      address.find_first_not_of("0123456789", colon + 1) != std::string::npos) {
    return InvalidArgument("agent address '" + address + "' is not HOST:PORT");
  }
  std::unique_ptr<AgentClient> client(new AgentClient());
  client->impl_ = std::make_unique<Impl>();
  Impl& impl = *client->impl_;
  impl.address = address;
  impl.header.protocol_version = rpc::g_coordinator_constants.PROTOCOL_VERSION;
  impl.header.auth_token = auth_token;
  impl.header.__set_client("cli");
  RouteThriftOutputToLog();
  StatusOr<std::shared_ptr<TSocket>> made = NewThriftClientSocket(
      address.substr(0, colon), std::stoi(address.substr(colon + 1)), tls_ca_file, "agent");
  if (!made.ok()) return made.status();
  std::shared_ptr<TSocket> socket = std::move(made).value();
  socket->setConnTimeout(timeout_ms);
  socket->setRecvTimeout(timeout_ms);
  socket->setSendTimeout(timeout_ms);
  impl.transport = std::make_shared<TFramedTransport>(socket);
  impl.stub = std::make_unique<rpc::AgentClient>(std::make_shared<TBinaryProtocol>(impl.transport));
  try {
    impl.transport->open();
    rpc::HelloResponse hello;
    impl.stub->Hello(hello, impl.header);
  } catch (const rpc::CoordinatorError& e) {
    return FromCoordinatorError(e);
  } catch (const TException& e) {
    return ThriftConnectError("cannot reach the agent at " + address, e);
  }
  return client;
}

StatusOr<rpc::LogChunk> AgentClient::ReadLog(const rpc::TaskKey& task, int64_t offset,
                                             int32_t max_bytes) {
  rpc::LogChunk chunk;
  try {
    impl_->stub->ReadLog(chunk, impl_->header, task, offset, max_bytes);
  } catch (const rpc::CoordinatorError& e) {
    return FromCoordinatorError(e);
  } catch (const TException& e) {
    return Unavailable("reading a log from the agent at " + impl_->address + ": " + e.what());
  }
  return chunk;
}

}  // namespace parallax
