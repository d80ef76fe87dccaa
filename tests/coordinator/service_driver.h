// ServiceDriver: a CoordinatorService on a real SQLite file and a FakeClock,
// driven through its Thrift handlers the way agents and the CLI drive it,
// for tests of the job lifecycle (no sockets).
#ifndef PARALLAX_TESTS_COORDINATOR_SERVICE_DRIVER_H_
#define PARALLAX_TESTS_COORDINATOR_SERVICE_DRIVER_H_

#include <memory>
#include <string>
#include <vector>

#include "coordinator/service/service.h"
#include "coordinator/store/sqlite_state_store.h"
#include "schemas/coordinator_constants.h"
#include "tests/testing/temp_dir.h"

namespace parallax::coordinator {

class ServiceDriver {
 public:
  explicit ServiceDriver(int64_t agent_timeout_ms = 5'000) {
    SqliteStateStoreOptions options;
    options.path = dir_.File("state.db");
    store_ = std::move(OpenSqliteStateStore(options)).value();
    ServiceOptions service_options;
    service_options.agent_timeout_ms = agent_timeout_ms;
    service_ = std::make_unique<CoordinatorService>(store_.get(), &clock_, service_options);
    (void)service_->Init();
    header_.protocol_version = rpc::g_coordinator_constants.PROTOCOL_VERSION;
    header_.__set_client("test");
  }

  CoordinatorService& service() { return *service_; }
  const rpc::RequestHeader& header() const { return header_; }
  FakeClock& clock() { return clock_; }

  void Register(const std::string& agent, int slots) {
    rpc::AgentInfo a;
    a.name = agent;
    a.address = agent + ":1";
    a.slots = slots;
    a.gpus = 0;
    service_->RegisterAgent(header_, a);
  }
  void Heartbeat(const std::string& agent) {
    rpc::HeartbeatRequest request;
    request.agent_name = agent;
    rpc::HeartbeatResponse out;
    service_->Heartbeat(out, header_, request);
  }
  int64_t Submit(const std::string& text) {
    rpc::SubmitJobRequest r;
    r.job_text = text;
    rpc::JobInfo info;
    service_->SubmitJob(info, header_, r);
    return info.id;
  }
  rpc::JobInfo Job(int64_t id) {
    rpc::JobInfo info;
    service_->GetJob(info, header_, id);
    return info;
  }
  rpc::PollResponse Poll(const std::string& agent, const std::vector<rpc::TaskKey>& running = {}) {
    rpc::PollRequest r;
    r.agent_name = agent;
    r.timeout_ms = 0;
    r.running = running;
    rpc::PollResponse out;
    service_->PollAssignments(out, header_, r);
    return out;
  }
  // One report per key, all in one call (as an agent's batch).
  void Report(const std::string& agent, const std::vector<rpc::TaskKey>& keys,
              rpc::TaskState::type state, const std::vector<int>& codes = {}) {
    std::vector<rpc::TaskReport> reports;
    for (size_t i = 0; i < keys.size(); ++i) {
      rpc::TaskReport r;
      r.key = keys[i];
      r.state = state;
      const int code = i < codes.size() ? codes[i] : 0;
      if (state == rpc::TaskState::EXITED) r.__set_exit_code(code);
      if (state == rpc::TaskState::KILLED) r.__set_signal(code);
      reports.push_back(r);
    }
    service_->ReportTasks(header_, agent, reports);
  }
  std::vector<rpc::TaskInfo> Tasks(int64_t id) {
    std::vector<rpc::TaskInfo> tasks;
    service_->ListTasks(tasks, header_, id);
    return tasks;
  }
  // Every event's message, of job `id` (0: the cluster's).
  std::vector<std::string> Events(int64_t id) {
    std::vector<rpc::Event> events;
    service_->GetEvents(events, header_, id, 0, 1000);
    std::vector<std::string> messages;
    for (const rpc::Event& e : events) messages.push_back(e.message);
    return messages;
  }
  // What rank 0 stores: a plan whose PS holds no variable (the
  // orchestrator reads only that list).
  void PutPlanWithEmptyPs(int64_t id, int attempt) {
    rpc::PutPlanRequest r;
    r.job_id = id;
    r.attempt = attempt;
    r.plan_json = "{\"version\":1,\"variables\":[],\"ps\":{\"variables\":[]}}";
    service_->PutPlan(header_, r);
  }
  static std::vector<rpc::TaskKey> Keys(const rpc::PollResponse& p) {
    std::vector<rpc::TaskKey> keys;
    for (const auto& a : p.start) keys.push_back(a.key);
    return keys;
  }

 private:
  testing::TempDir dir_;
  FakeClock clock_;
  std::unique_ptr<StateStore> store_;
  std::unique_ptr<CoordinatorService> service_;
  rpc::RequestHeader header_;
};

}  // namespace parallax::coordinator

#endif  // PARALLAX_TESTS_COORDINATOR_SERVICE_DRIVER_H_
