#include "core/rpc/coordinator_client.h"

#include <thrift/TApplicationException.h>
#include <thrift/protocol/TBinaryProtocol.h>
#include <thrift/transport/TBufferTransports.h>
#include <thrift/transport/TSocket.h>
#include <thrift/transport/TTransportException.h>

#include "core/rpc/error_mapping.h"
#include "core/rpc/tls.h"
#include "schemas/coordinator_constants.h"

namespace parallax {

using apache::thrift::TApplicationException;
using apache::thrift::TException;
using apache::thrift::protocol::TBinaryProtocol;
using apache::thrift::transport::TFramedTransport;
using apache::thrift::transport::TSocket;
using apache::thrift::transport::TTransportException;

struct CoordinatorClient::Connection {
  std::shared_ptr<TSocket> socket;
  std::shared_ptr<TFramedTransport> transport;
  std::unique_ptr<rpc::CoordinatorClient> stub;
};


CoordinatorClient::CoordinatorClient(CoordinatorClientOptions options)
    : options_(std::move(options)) {
  if (options_.protocol_version == 0) {
    options_.protocol_version = rpc::g_coordinator_constants.PROTOCOL_VERSION;
  }
}

CoordinatorClient::~CoordinatorClient() { Close(); }

StatusOr<std::unique_ptr<CoordinatorClient>> CoordinatorClient::Connect(
    const CoordinatorClientOptions& options) {
  std::unique_ptr<CoordinatorClient> client(new CoordinatorClient(options));
  const std::string& a = options.address;
  size_t colon = a.rfind(':');
  int port = -1;
  if (colon != std::string::npos && colon > 0 && colon + 1 < a.size() && a.size() - colon <= 6 &&
      a.find_first_not_of("0123456789", colon + 1) == std::string::npos) {
    port = std::stoi(a.substr(colon + 1));
  }
  if (port <= 0 || port > 65535) {
    return InvalidArgument("coordinator address '" + a + "' is not HOST:PORT with a port 1-65535");
  }
  client->host_ = a.substr(0, colon);
  client->port_ = port;
  PX_RETURN_IF_ERROR(client->Open());
  PX_RETURN_IF_ERROR(
      client->Call([&](rpc::CoordinatorClient& c) { c.Hello(client->hello_, client->Header()); }));
  return client;
}

Status CoordinatorClient::Open() {
  auto conn = std::make_unique<Connection>();
  StatusOr<std::shared_ptr<TSocket>> socket =
      NewThriftClientSocket(host_, port_, options_.tls_ca_file, "coordinator");
  if (!socket.ok()) return socket.status();
  conn->socket = std::move(socket).value();
  conn->socket->setConnTimeout(options_.connect_timeout_ms);
  conn->socket->setRecvTimeout(options_.rpc_timeout_ms);
  conn->socket->setSendTimeout(options_.rpc_timeout_ms);
  conn->transport = std::make_shared<TFramedTransport>(conn->socket);
  auto protocol = std::make_shared<TBinaryProtocol>(conn->transport);
  conn->stub = std::make_unique<rpc::CoordinatorClient>(protocol);
  try {
    conn->transport->open();
  } catch (const TException& e) {
    return ThriftConnectError("cannot reach the coordinator at " + options_.address, e);
  }
  conn_ = std::move(conn);
  return Status::Ok();
}

void CoordinatorClient::Close() {
  if (!conn_) return;
  try {
    conn_->transport->close();
  } catch (const TException&) {
    // Closing a broken connection; nothing to report.
  }
  conn_.reset();
}

rpc::RequestHeader CoordinatorClient::Header() const {
  rpc::RequestHeader h;
  h.protocol_version = options_.protocol_version;
  h.auth_token = options_.auth_token;
  h.__set_client(options_.client_name);
  return h;
}

Status CoordinatorClient::Call(const std::function<void(rpc::CoordinatorClient&)>& call,
                               int64_t extra_wait_ms) {
  if (!conn_) PX_RETURN_IF_ERROR(Open());
  if (extra_wait_ms > 0) {
    conn_->socket->setRecvTimeout(static_cast<int>(options_.rpc_timeout_ms + extra_wait_ms));
  }
  Status result;
  bool broken = false;
  try {
    call(*conn_->stub);
  } catch (const rpc::CoordinatorError& e) {
    result = FromCoordinatorError(e);
  } catch (const TTransportException& e) {
    broken = true;
    result = Unavailable("lost the connection to the coordinator at " + options_.address + ": " +
                         e.what());
  } catch (const TApplicationException& e) {
    broken = true;  // the stream may be out of step after this
    result = Internal("coordinator at " + options_.address + " failed the call: " + e.what());
  } catch (const TException& e) {
    broken = true;
    result = Internal("talking to the coordinator at " + options_.address + ": " + e.what());
  }
  if (broken) {
    Close();
  } else if (extra_wait_ms > 0) {
    conn_->socket->setRecvTimeout(options_.rpc_timeout_ms);
  }
  return result;
}

StatusOr<rpc::JobInfo> CoordinatorClient::SubmitJob(const std::string& job_text,
                                                     const std::string& job_path) {
  rpc::SubmitJobRequest request;
  request.job_text = job_text;
  if (!job_path.empty()) request.__set_job_path(job_path);
  rpc::JobInfo out;
  PX_RETURN_IF_ERROR(Call([&](rpc::CoordinatorClient& c) { c.SubmitJob(out, Header(), request); }));
  return out;
}

StatusOr<rpc::JobInfo> CoordinatorClient::GetJob(int64_t job_id) {
  rpc::JobInfo out;
  PX_RETURN_IF_ERROR(Call([&](rpc::CoordinatorClient& c) { c.GetJob(out, Header(), job_id); }));
  return out;
}

StatusOr<std::vector<rpc::JobInfo>> CoordinatorClient::ListJobs(
    const rpc::ListJobsRequest& request) {
  std::vector<rpc::JobInfo> out;
  PX_RETURN_IF_ERROR(Call([&](rpc::CoordinatorClient& c) { c.ListJobs(out, Header(), request); }));
  return out;
}

StatusOr<rpc::JobInfo> CoordinatorClient::CancelJob(int64_t job_id, const std::string& reason) {
  rpc::JobInfo out;
  PX_RETURN_IF_ERROR(
      Call([&](rpc::CoordinatorClient& c) { c.CancelJob(out, Header(), job_id, reason); }));
  return out;
}

StatusOr<std::vector<rpc::Event>> CoordinatorClient::GetEvents(int64_t job_id, int64_t after_seq,
                                                               int32_t limit) {
  std::vector<rpc::Event> out;
  PX_RETURN_IF_ERROR(Call(
      [&](rpc::CoordinatorClient& c) { c.GetEvents(out, Header(), job_id, after_seq, limit); }));
  return out;
}

Status CoordinatorClient::RegisterAgent(const rpc::AgentInfo& agent) {
  return Call([&](rpc::CoordinatorClient& c) { c.RegisterAgent(Header(), agent); });
}

StatusOr<rpc::HeartbeatResponse> CoordinatorClient::Heartbeat(const std::string& agent_name) {
  rpc::HeartbeatRequest request;
  request.agent_name = agent_name;
  rpc::HeartbeatResponse out;
  PX_RETURN_IF_ERROR(Call([&](rpc::CoordinatorClient& c) { c.Heartbeat(out, Header(), request); }));
  return out;
}

StatusOr<std::vector<rpc::AgentInfo>> CoordinatorClient::ListAgents() {
  std::vector<rpc::AgentInfo> out;
  PX_RETURN_IF_ERROR(Call([&](rpc::CoordinatorClient& c) { c.ListAgents(out, Header()); }));
  return out;
}

Status CoordinatorClient::KvSet(const std::string& key, const std::string& value) {
  rpc::KvSetRequest request;
  request.key = key;
  request.value = value;
  return Call([&](rpc::CoordinatorClient& c) { c.KvSet(Header(), request); });
}

StatusOr<std::vector<std::string>> CoordinatorClient::KvGet(const std::vector<std::string>& keys,
                                                            int64_t timeout_ms) {
  rpc::KvGetRequest request;
  request.keys = keys;
  request.timeout_ms = timeout_ms;
  std::vector<std::string> out;
  PX_RETURN_IF_ERROR(
      Call([&](rpc::CoordinatorClient& c) { c.KvGet(out, Header(), request); }, timeout_ms));
  return out;
}

}  // namespace parallax
