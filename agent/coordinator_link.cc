#include "agent/coordinator_link.h"

#include <sys/socket.h>
#include <thrift/transport/TBufferTransports.h>
#include <thrift/transport/TSocket.h>

#include <mutex>

#include "core/rpc/coordinator_client.h"

namespace parallax::agent {
namespace {

using apache::thrift::transport::TFramedTransport;
using apache::thrift::transport::TSocket;

// One connection, used by one call at a time.
class Channel {
 public:
  explicit Channel(CoordinatorClientOptions options) : options_(std::move(options)) {}

  // Runs `call` on a connected client. REQUIRES: mu() held.
  Status Run(const std::function<void(rpc::CoordinatorClient&, const rpc::RequestHeader&)>& call,
             int64_t extra_wait_ms = 0) {
    if (!client_) {
      StatusOr<std::unique_ptr<CoordinatorClient>> client = CoordinatorClient::Connect(options_);
      if (!client.ok()) return client.status();
      client_ = std::move(client).value();
    }
    CoordinatorClient* client = client_.get();
    Status s = client->Call(
        [&](rpc::CoordinatorClient& stub) { call(stub, client->Header()); }, extra_wait_ms);
    // After a transport failure start afresh (the client would reconnect by
    // itself, but a new Connect also reports a refused address at once).
    if (s.code() == StatusCode::kUnavailable || s.code() == StatusCode::kInternal) client_.reset();
    return s;
  }

  std::mutex& mu() { return mu_; }

 private:
  std::mutex mu_;
  CoordinatorClientOptions options_;
  std::unique_ptr<CoordinatorClient> client_;
};

class ThriftCoordinatorLink : public CoordinatorLink {
 public:
  explicit ThriftCoordinatorLink(const CoordinatorLinkOptions& o)
      : heartbeat_(ClientOptions(o)), poll_(ClientOptions(o)), other_(ClientOptions(o)) {}

  Status Register(const rpc::AgentInfo& agent) override {
    std::lock_guard<std::mutex> lock(other_.mu());
    return other_.Run([&](rpc::CoordinatorClient& c, const rpc::RequestHeader& h) {
      c.RegisterAgent(h, agent);
    });
  }

  Status Deregister(const std::string& agent_name, const std::string& workdir_id) override {
    std::lock_guard<std::mutex> lock(other_.mu());
    return other_.Run([&](rpc::CoordinatorClient& c, const rpc::RequestHeader& h) {
      c.DeregisterAgent(h, agent_name, workdir_id);
    });
  }

  StatusOr<bool> Heartbeat(const std::string& agent_name) override {
    std::lock_guard<std::mutex> lock(heartbeat_.mu());
    rpc::HeartbeatRequest request;
    request.agent_name = agent_name;
    rpc::HeartbeatResponse response;
    PX_RETURN_IF_ERROR(heartbeat_.Run([&](rpc::CoordinatorClient& c, const rpc::RequestHeader& h) {
      c.Heartbeat(response, h, request);
    }));
    return response.known;
  }

  StatusOr<rpc::PollResponse> Poll(const rpc::PollRequest& request) override {
    std::lock_guard<std::mutex> lock(poll_.mu());
    rpc::PollResponse response;
    Status s = poll_.Run(
        [&](rpc::CoordinatorClient& c, const rpc::RequestHeader& h) {
          SetPollFd(SocketFd(c));
          c.PollAssignments(response, h, request);
        },
        request.timeout_ms);
    SetPollFd(-1);
    PX_RETURN_IF_ERROR(s);
    return response;
  }

  Status Report(const std::string& agent_name,
                const std::vector<rpc::TaskReport>& reports) override {
    std::lock_guard<std::mutex> lock(other_.mu());
    return other_.Run([&](rpc::CoordinatorClient& c, const rpc::RequestHeader& h) {
      c.ReportTasks(h, agent_name, reports);
    });
  }

  void CancelPoll() override {
    std::lock_guard<std::mutex> lock(fd_mu_);
    cancelled_ = true;
    if (poll_fd_ >= 0) shutdown(poll_fd_, SHUT_RDWR);
  }

 private:
  static CoordinatorClientOptions ClientOptions(const CoordinatorLinkOptions& o) {
    CoordinatorClientOptions c;
    c.address = o.address;
    c.auth_token = o.auth_token;
    c.tls_ca_file = o.tls_ca_file;
    c.client_name = "agent:" + o.agent_name;
    c.connect_timeout_ms = o.connect_timeout_ms;
    c.rpc_timeout_ms = o.rpc_timeout_ms;
    // The agent's loops retry every call with their own backoff and must
    // stay responsive to Stop(); the client does not retry underneath them.
    c.retry_deadline_ms = 0;
    return c;
  }

  static int SocketFd(rpc::CoordinatorClient& stub) {
    auto framed = std::dynamic_pointer_cast<TFramedTransport>(stub.getInputProtocol()->getTransport());
    if (!framed) return -1;
    auto socket = std::dynamic_pointer_cast<TSocket>(framed->getUnderlyingTransport());
    return socket ? static_cast<int>(socket->getSocketFD()) : -1;
  }

  void SetPollFd(int fd) {
    std::lock_guard<std::mutex> lock(fd_mu_);
    poll_fd_ = fd;
    if (fd >= 0 && cancelled_) shutdown(fd, SHUT_RDWR);
  }

  Channel heartbeat_;
  Channel poll_;
  Channel other_;  // Register and Report
  std::mutex fd_mu_;
  int poll_fd_ = -1;        // GUARDED_BY(fd_mu_): the poll socket while a poll runs
  bool cancelled_ = false;  // GUARDED_BY(fd_mu_)
};

}  // namespace

std::unique_ptr<CoordinatorLink> NewCoordinatorLink(const CoordinatorLinkOptions& options) {
  return std::make_unique<ThriftCoordinatorLink>(options);
}

}  // namespace parallax::agent
