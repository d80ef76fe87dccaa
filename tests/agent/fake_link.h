// FakeCoordinatorLink: an in-memory coordinator for agent tests. Records
// registrations, heartbeats and reports; Poll hands out queued responses
// (or waits, like the real long poll, until one is queued or it times out).
#ifndef PARALLAX_TESTS_AGENT_FAKE_LINK_H_
#define PARALLAX_TESTS_AGENT_FAKE_LINK_H_

#include <chrono>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <string>
#include <vector>

#include "agent/coordinator_link.h"

namespace parallax::agent::testing {

class FakeCoordinatorLink : public CoordinatorLink {
 public:
  Status Register(const rpc::AgentInfo& agent) override {
    std::lock_guard<std::mutex> lock(mu_);
    if (!register_status_.ok()) return register_status_;
    registrations_.push_back(agent);
    return Status::Ok();
  }

  StatusOr<bool> Heartbeat(const std::string&) override {
    std::lock_guard<std::mutex> lock(mu_);
    ++heartbeats_;
    if (!reachable_) return Unavailable("fake coordinator unreachable");
    return known_;
  }

  StatusOr<rpc::PollResponse> Poll(const rpc::PollRequest& request) override {
    std::unique_lock<std::mutex> lock(mu_);
    polls_.push_back(request);
    cv_.notify_all();
    cv_.wait_for(lock, std::chrono::milliseconds(request.timeout_ms),
                 [&] { return cancelled_ || !responses_.empty(); });
    if (cancelled_) return Unavailable("poll cancelled");
    if (!reachable_) return Unavailable("fake coordinator unreachable");
    rpc::PollResponse response;
    response.known = known_;
    if (!responses_.empty()) {
      response = responses_.front();
      responses_.pop_front();
    }
    return response;
  }

  Status Report(const std::string&, const std::vector<rpc::TaskReport>& reports) override {
    std::lock_guard<std::mutex> lock(mu_);
    if (fail_reports_ > 0) {
      --fail_reports_;
      return Unavailable("fake coordinator restarting");
    }
    reports_.insert(reports_.end(), reports.begin(), reports.end());
    cv_.notify_all();
    return Status::Ok();
  }

  Status Deregister(const std::string& agent_name, const std::string& workdir_id) override {
    std::lock_guard<std::mutex> lock(mu_);
    deregistrations_.push_back(agent_name + " " + workdir_id);
    return Status::Ok();
  }

  void CancelPoll() override {
    std::lock_guard<std::mutex> lock(mu_);
    cancelled_ = true;
    cv_.notify_all();
  }

  // ---- Test controls ----
  void QueuePoll(rpc::PollResponse response) {
    std::lock_guard<std::mutex> lock(mu_);
    response.known = true;
    responses_.push_back(std::move(response));
    cv_.notify_all();
  }
  void SetRegisterStatus(Status s) {
    std::lock_guard<std::mutex> lock(mu_);
    register_status_ = std::move(s);
  }
  void SetKnown(bool known) {
    std::lock_guard<std::mutex> lock(mu_);
    known_ = known;
  }
  void FailReports(int n) {
    std::lock_guard<std::mutex> lock(mu_);
    fail_reports_ = n;
  }
  std::vector<rpc::TaskReport> reports() {
    std::lock_guard<std::mutex> lock(mu_);
    return reports_;
  }
  std::vector<rpc::AgentInfo> registrations() {
    std::lock_guard<std::mutex> lock(mu_);
    return registrations_;
  }
  // "name workdir_id" of each deregistration.
  std::vector<std::string> deregistrations() {
    std::lock_guard<std::mutex> lock(mu_);
    return deregistrations_;
  }
  std::vector<rpc::PollRequest> polls() {
    std::lock_guard<std::mutex> lock(mu_);
    return polls_;
  }
  // Waits (up to timeout_ms) until `pred(reports)` holds; returns whether it did.
  template <typename Pred>
  bool WaitForReports(Pred pred, int timeout_ms = 10'000) {
    std::unique_lock<std::mutex> lock(mu_);
    return cv_.wait_for(lock, std::chrono::milliseconds(timeout_ms), [&] { return pred(reports_); });
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<rpc::PollResponse> responses_;
  std::vector<rpc::AgentInfo> registrations_;
  std::vector<rpc::PollRequest> polls_;
  std::vector<rpc::TaskReport> reports_;
  std::vector<std::string> deregistrations_;
  Status register_status_;
  bool known_ = true;
  bool reachable_ = true;
  bool cancelled_ = false;
  int fail_reports_ = 0;
  int heartbeats_ = 0;
};

}  // namespace parallax::agent::testing

#endif  // PARALLAX_TESTS_AGENT_FAKE_LINK_H_
