// CoordinatorClient: a Thrift client of the coordinator service that returns
// Status instead of throwing. Connect() performs the protocol handshake
// (Hello), so a version or token mismatch is reported before any real call.
//
// Errors:
//   UNAVAILABLE        the coordinator cannot be reached (connect refused,
//                      connection lost, timed out); the message names the
//                      address. The next call reconnects (and says Hello).
//   PERMISSION_DENIED  protocol version mismatch, wrong token, or (TLS) a
//                      coordinator certificate tls_ca_file does not trust.
//   ABORTED            the coordinator could not do it now (database locked);
//                      nothing changed, retrying may help.
//   others             as the coordinator said (NOT_FOUND, INVALID_ARGUMENT,
//                      FAILED_PRECONDITION, DEADLINE_EXCEEDED, INTERNAL).
//
// Retries. A call marked Retry::kIdempotent that fails because the
// coordinator cannot be reached (connection refused or lost, before or while
// the call was in flight) is sent again on a new connection, with a backoff
// doubling from retry_initial_backoff_ms to retry_max_backoff_ms, until it
// gets an answer or retry_deadline_ms have passed since the first failure.
// This covers a coordinator restart (its state is in SQLite): a caller sees
// no error. Only calls whose second execution changes nothing are marked:
// reads, Hello, Heartbeat, RegisterAgent, KvSet (same key and value),
// KvGet, PutPlan (upserts of the same row), CommitCheckpoint (a repeat of
// a recorded checkpoint records nothing) and LeaseConsistency (the
// coordinator keeps the largest lease). SubmitJob, CancelJob, ReplanJob, KvAdd and
// ReportMetrics are never retried; a connection the
// coordinator closed while idle is replaced before any call is sent, so
// they fail only when the coordinator dies during the call itself.
//
// Not thread-safe: one client per thread.
#ifndef PARALLAX_CORE_RPC_COORDINATOR_CLIENT_H_
#define PARALLAX_CORE_RPC_COORDINATOR_CLIENT_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "parallax/status.h"
#include "schemas/Coordinator.h"

namespace parallax {

struct CoordinatorClientOptions {
  std::string address = "127.0.0.1:7070";  // HOST:PORT
  std::string auth_token;
  std::string client_name = "client";     // shown in the coordinator's events
  int connect_timeout_ms = 3'000;
  // Socket timeout of a call; blocking calls add their own wait to it.
  int rpc_timeout_ms = 30'000;
  // PEM CA certificate: speak TLS and trust only a coordinator whose
  // certificate it signed and names the host of `address` (core/rpc/tls.h).
  // Empty: plain TCP.
  std::string tls_ca_file;
  // Protocol version sent; only tests change it.
  int32_t protocol_version = 0;  // 0: this build's PROTOCOL_VERSION
  // Retries of idempotent calls while the coordinator is unreachable (see
  // above). 0: no retry. The default covers a coordinator restart.
  int retry_deadline_ms = 30'000;
  int retry_initial_backoff_ms = 50;
  int retry_max_backoff_ms = 1'000;
};

class CoordinatorClient {
 public:
  ~CoordinatorClient();

  // Connects and says Hello. On failure the Status says where it looked.
  // This first connection is not retried.
  static StatusOr<std::unique_ptr<CoordinatorClient>> Connect(
      const CoordinatorClientOptions& options);

  const CoordinatorClientOptions& options() const { return options_; }
  const rpc::HelloResponse& hello() const { return hello_; }

  // A request header for this client.
  rpc::RequestHeader Header() const;

  // Whether a call may be sent twice (see "Retries" above).
  enum class Retry { kNo, kIdempotent };

  // Runs `call` against the Thrift stub, turning exceptions into a Status.
  // `extra_wait_ms` extends the socket timeout for blocking calls. With
  // Retry::kIdempotent, `call` may run several times (on new connections).
  Status Call(const std::function<void(rpc::CoordinatorClient&)>& call, int64_t extra_wait_ms = 0,
              Retry retry = Retry::kNo);

  // Typed conveniences over Call(); the idempotent ones are retried.
  StatusOr<rpc::JobInfo> SubmitJob(const std::string& job_text, const std::string& job_path);
  StatusOr<rpc::JobInfo> GetJob(int64_t job_id);
  StatusOr<std::vector<rpc::JobInfo>> ListJobs(const rpc::ListJobsRequest& request = {});
  StatusOr<rpc::JobInfo> CancelJob(int64_t job_id, const std::string& reason);
  StatusOr<rpc::JobInfo> ReplanJob(int64_t job_id, const std::string& reason);
  StatusOr<std::vector<rpc::Event>> GetEvents(int64_t job_id, int64_t after_seq, int32_t limit);
  Status RegisterAgent(const rpc::AgentInfo& agent);
  StatusOr<rpc::HeartbeatResponse> Heartbeat(const std::string& agent_name);
  StatusOr<std::vector<rpc::AgentInfo>> ListAgents();
  Status KvSet(const std::string& key, const std::string& value);
  StatusOr<std::vector<std::string>> KvGet(const std::vector<std::string>& keys,
                                           int64_t timeout_ms);
  // The value of `key`, or nullopt when nobody stored one, without waiting
  // (KvGet of a key that does not exist is DEADLINE_EXCEEDED at once).
  StatusOr<std::optional<std::string>> KvGetIfSet(const std::string& key);
  Status PutPlan(int64_t job_id, int32_t attempt, const std::string& plan_json);
  // Waits up to timeout_ms for the plan (DEADLINE_EXCEEDED after that).
  StatusOr<std::string> GetPlan(int64_t job_id, int32_t attempt, int64_t timeout_ms);
  Status CommitCheckpoint(const rpc::CheckpointInfo& checkpoint);
  StatusOr<std::vector<rpc::CheckpointInfo>> ListCheckpoints(int64_t job_id);
  // The newest counters of each PS shard of a live job.
  StatusOr<std::vector<rpc::ShardStatsReport>> GetShardStats(int64_t job_id);
  // A trainer rank's consistency lease (idempotent: the coordinator keeps
  // the largest `until`); every switch of the job, oldest first.
  StatusOr<std::vector<rpc::ConsistencySwitch>> LeaseConsistency(
      const rpc::ConsistencyLeaseRequest& request);

 private:
  explicit CoordinatorClient(CoordinatorClientOptions options);
  Status Open();
  void Close();
  // Open() and Hello. Sets *unreachable when it failed for want of a connection.
  Status Reconnect(bool* unreachable);
  // One try of Call(); *unreachable as for Reconnect.
  // `check_idle`: first replace a connection the coordinator closed.
  Status CallOnce(const std::function<void(rpc::CoordinatorClient&)>& call, int64_t extra_wait_ms,
                  bool* unreachable, bool check_idle = true);
  // Whether the coordinator closed the (idle) connection.
  bool PeerClosed() const;

  CoordinatorClientOptions options_;
  std::string host_;
  int port_ = 0;
  rpc::HelloResponse hello_;
  struct Connection;
  std::unique_ptr<Connection> conn_;  // null when disconnected
};

}  // namespace parallax

#endif  // PARALLAX_CORE_RPC_COORDINATOR_CLIENT_H_
