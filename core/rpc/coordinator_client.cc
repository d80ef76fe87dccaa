#include "core/rpc/coordinator_client.h"

#include <poll.h>
#include <thrift/TApplicationException.h>
#include <thrift/protocol/TBinaryProtocol.h>
#include <thrift/transport/TBufferTransports.h>
#include <thrift/transport/TSocket.h>
#include <thrift/transport/TTransportException.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <thread>

#include "core/base/logging.h"
#include "core/rpc/error_mapping.h"
#include "core/rpc/thrift_log.h"
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
  RouteThriftOutputToLog();
  client->host_ = a.substr(0, colon);
  client->port_ = port;
  // The first connection is not retried: an address nobody answers is more
  // often a wrong address than a restart, and the caller should hear so now.
  bool unreachable = false;
  PX_RETURN_IF_ERROR(client->Reconnect(&unreachable));
  return client;
}

Status CoordinatorClient::Reconnect(bool* unreachable) {
  *unreachable = false;
  if (Status s = Open(); !s.ok()) {
    *unreachable = true;
    return s;
  }
  rpc::HelloResponse hello;
  PX_RETURN_IF_ERROR(CallOnce([&](rpc::CoordinatorClient& c) { c.Hello(hello, Header()); }, 0,
                              unreachable, /*check_idle=*/false));
  hello_ = std::move(hello);
  return Status::Ok();
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

bool CoordinatorClient::PeerClosed() const {
  if (!conn_) return false;
  pollfd p{};
  p.fd = static_cast<int>(conn_->socket->getSocketFD());
  if (p.fd < 0) return true;
  // POLLRDHUP, not POLLIN: the peer's FIN (or RST) on a connection with no
  // call outstanding means the coordinator went away (restarted, or closed
  // an idle connection); readable bytes alone could be TLS housekeeping.
  p.events = POLLRDHUP;
  int r;
  do {
    r = poll(&p, 1, 0);
  } while (r < 0 && errno == EINTR);
  return r > 0 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL)) != 0;
}

Status CoordinatorClient::CallOnce(const std::function<void(rpc::CoordinatorClient&)>& call,
                                   int64_t extra_wait_ms, bool* unreachable, bool check_idle) {
  *unreachable = false;
  // A call sent on a connection the coordinator already closed would fail
  // even though the coordinator may be back: start a new one first.
  if (check_idle && PeerClosed()) Close();
  if (!conn_) PX_RETURN_IF_ERROR(Reconnect(unreachable));
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
    *unreachable = true;
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

Status CoordinatorClient::Call(const std::function<void(rpc::CoordinatorClient&)>& call,
                               int64_t extra_wait_ms, Retry retry) {
  using Clock = std::chrono::steady_clock;
  bool unreachable = false;
  Status s = CallOnce(call, extra_wait_ms, &unreachable);
  if (s.ok() || !unreachable || retry != Retry::kIdempotent || options_.retry_deadline_ms <= 0) {
    return s;
  }
  const Clock::time_point give_up =
      Clock::now() + std::chrono::milliseconds(options_.retry_deadline_ms);
  auto backoff = std::chrono::milliseconds(std::max(1, options_.retry_initial_backoff_ms));
  const auto max_backoff = std::chrono::milliseconds(std::max(1, options_.retry_max_backoff_ms));
  int tries = 1;
  // One line per outage, not one per try (Thrift's own connect errors are at
  // debug level: core/rpc/thrift_log.h).
  PX_LOG(WARNING) << "coordinator at " << options_.address << " unreachable (" << s.message()
                  << "); retrying for up to " << options_.retry_deadline_ms << " ms";
  while (unreachable) {
    const Clock::time_point now = Clock::now();
    if (now >= give_up) {
      return Unavailable(s.message() + " (gave up after " + std::to_string(tries) + " tries in " +
                         std::to_string(options_.retry_deadline_ms) +
                         " ms; is the coordinator running?)");
    }
    std::this_thread::sleep_for(std::min<Clock::duration>(backoff, give_up - now));
    backoff = std::min(backoff * 2, max_backoff);
    s = CallOnce(call, extra_wait_ms, &unreachable);
    ++tries;
  }
  if (s.ok()) PX_LOG(INFO) << "coordinator at " << options_.address << " reached again after " << tries << " tries";
  return s;
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
  PX_RETURN_IF_ERROR(Call([&](rpc::CoordinatorClient& c) { c.GetJob(out, Header(), job_id); }, 0,
                          Retry::kIdempotent));
  return out;
}

StatusOr<std::vector<rpc::JobInfo>> CoordinatorClient::ListJobs(
    const rpc::ListJobsRequest& request) {
  std::vector<rpc::JobInfo> out;
  PX_RETURN_IF_ERROR(Call([&](rpc::CoordinatorClient& c) { c.ListJobs(out, Header(), request); }, 0,
                          Retry::kIdempotent));
  return out;
}

StatusOr<rpc::JobInfo> CoordinatorClient::CancelJob(int64_t job_id, const std::string& reason) {
  rpc::JobInfo out;
  PX_RETURN_IF_ERROR(
      Call([&](rpc::CoordinatorClient& c) { c.CancelJob(out, Header(), job_id, reason); }));
  return out;
}

StatusOr<rpc::JobInfo> CoordinatorClient::ReplanJob(int64_t job_id, const std::string& reason) {
  rpc::JobInfo out;
  PX_RETURN_IF_ERROR(
      Call([&](rpc::CoordinatorClient& c) { c.ReplanJob(out, Header(), job_id, reason); }));
  return out;
}

StatusOr<std::vector<rpc::Event>> CoordinatorClient::GetEvents(int64_t job_id, int64_t after_seq,
                                                               int32_t limit) {
  std::vector<rpc::Event> out;
  PX_RETURN_IF_ERROR(
      Call([&](rpc::CoordinatorClient& c) { c.GetEvents(out, Header(), job_id, after_seq, limit); },
           0, Retry::kIdempotent));
  return out;
}

Status CoordinatorClient::RegisterAgent(const rpc::AgentInfo& agent) {
  return Call([&](rpc::CoordinatorClient& c) { c.RegisterAgent(Header(), agent); }, 0,
              Retry::kIdempotent);
}

StatusOr<rpc::HeartbeatResponse> CoordinatorClient::Heartbeat(const std::string& agent_name) {
  rpc::HeartbeatRequest request;
  request.agent_name = agent_name;
  rpc::HeartbeatResponse out;
  PX_RETURN_IF_ERROR(Call([&](rpc::CoordinatorClient& c) { c.Heartbeat(out, Header(), request); },
                          0, Retry::kIdempotent));
  return out;
}

StatusOr<std::vector<rpc::AgentInfo>> CoordinatorClient::ListAgents() {
  std::vector<rpc::AgentInfo> out;
  PX_RETURN_IF_ERROR(
      Call([&](rpc::CoordinatorClient& c) { c.ListAgents(out, Header()); }, 0, Retry::kIdempotent));
  return out;
}

Status CoordinatorClient::KvSet(const std::string& key, const std::string& value) {
  rpc::KvSetRequest request;
  request.key = key;
  request.value = value;
  // An upsert: setting the same value again changes nothing.
  return Call([&](rpc::CoordinatorClient& c) { c.KvSet(Header(), request); }, 0,
              Retry::kIdempotent);
}

StatusOr<std::vector<std::string>> CoordinatorClient::KvGet(const std::vector<std::string>& keys,
                                                            int64_t timeout_ms) {
  rpc::KvGetRequest request;
  request.keys = keys;
  const auto deadline = std::chrono::steady_clock::now() +
                        std::chrono::milliseconds(std::max<int64_t>(0, timeout_ms));
  std::vector<std::string> out;
  PX_RETURN_IF_ERROR(Call(
      [&](rpc::CoordinatorClient& c) {
        // A retry waits only for what is left of the caller's timeout.
        request.timeout_ms =
            std::max<int64_t>(0, std::chrono::duration_cast<std::chrono::milliseconds>(
                                     deadline - std::chrono::steady_clock::now())
                                     .count());
        c.KvGet(out, Header(), request);
      },
      timeout_ms, Retry::kIdempotent));
  return out;
}

StatusOr<std::optional<std::string>> CoordinatorClient::KvGetIfSet(const std::string& key) {
  StatusOr<std::vector<std::string>> got = KvGet({key}, 0);
  if (got.status().code() == StatusCode::kDeadlineExceeded) return std::optional<std::string>();
  if (!got.ok()) return got.status();
  return std::optional<std::string>(std::move(got->at(0)));
}

StatusOr<std::vector<rpc::ConsistencySwitch>> CoordinatorClient::LeaseConsistency(
    const rpc::ConsistencyLeaseRequest& request) {
  std::vector<rpc::ConsistencySwitch> out;
  PX_RETURN_IF_ERROR(Call([&](rpc::CoordinatorClient& c) { c.LeaseConsistency(out, Header(), request); },
                          0, Retry::kIdempotent));
  return out;
}

Status CoordinatorClient::PutPlan(int64_t job_id, int32_t attempt, const std::string& plan_json) {
  rpc::PutPlanRequest request;
  request.job_id = job_id;
  request.attempt = attempt;
  request.plan_json = plan_json;
  // An upsert of (job, attempt): the same plan again changes nothing.
  return Call([&](rpc::CoordinatorClient& c) { c.PutPlan(Header(), request); }, 0,
              Retry::kIdempotent);
}

StatusOr<std::string> CoordinatorClient::GetPlan(int64_t job_id, int32_t attempt,
                                                 int64_t timeout_ms) {
  const auto deadline = std::chrono::steady_clock::now() +
                        std::chrono::milliseconds(std::max<int64_t>(0, timeout_ms));
  std::string out;
  PX_RETURN_IF_ERROR(Call(
      [&](rpc::CoordinatorClient& c) {
        int64_t left = std::chrono::duration_cast<std::chrono::milliseconds>(
                           deadline - std::chrono::steady_clock::now())
                           .count();
        c.GetPlan(out, Header(), job_id, attempt, std::max<int64_t>(0, left));
      },
      timeout_ms, Retry::kIdempotent));
  return out;
}

Status CoordinatorClient::CommitCheckpoint(const rpc::CheckpointInfo& checkpoint) {
  // An upsert of (job, attempt, step) with the same path and digest.
  return Call([&](rpc::CoordinatorClient& c) { c.CommitCheckpoint(Header(), checkpoint); }, 0,
              Retry::kIdempotent);
}

StatusOr<std::vector<rpc::CheckpointInfo>> CoordinatorClient::ListCheckpoints(int64_t job_id) {
  std::vector<rpc::CheckpointInfo> out;
  PX_RETURN_IF_ERROR(
      Call([&](rpc::CoordinatorClient& c) { c.ListCheckpoints(out, Header(), job_id); }, 0,
           Retry::kIdempotent));
  return out;
}

StatusOr<std::vector<rpc::ShardStatsReport>> CoordinatorClient::GetShardStats(int64_t job_id) {
  std::vector<rpc::ShardStatsReport> out;
  PX_RETURN_IF_ERROR(
      Call([&](rpc::CoordinatorClient& c) { c.GetShardStats(out, Header(), job_id); }, 0,
           Retry::kIdempotent));
  return out;
}

}  // namespace parallax
