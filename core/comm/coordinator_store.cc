#include "core/comm/coordinator_store.h"

#include <algorithm>
#include <mutex>
#include <utility>
#include <vector>

namespace parallax::comm {
namespace {

class CoordinatorRendezvousStore : public RendezvousStore {
 public:
  CoordinatorRendezvousStore(CoordinatorClientOptions options,
                             std::unique_ptr<CoordinatorClient> first)
      : options_(std::move(options)) {
    idle_.push_back(std::move(first));
  }

  Status Set(const std::string& key, const std::string& value) override {
    PX_ASSIGN_OR_RETURN(std::unique_ptr<CoordinatorClient> client, Borrow());
    Status s = client->KvSet(key, value);
    Return(std::move(client));
    if (!s.ok())
      return s.WithContext("rendezvous: set \"" + key + "\" on coordinator " + options_.address);
    return s;
  }

  StatusOr<std::vector<std::string>> Get(const std::vector<std::string>& keys,
                                         Deadline deadline) override {
    PX_ASSIGN_OR_RETURN(std::unique_ptr<CoordinatorClient> client, Borrow());
    // The coordinator caps one wait (max_wait_ms); keep asking until ours ends.
    while (true) {
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          deadline - std::chrono::steady_clock::now());
      StatusOr<std::vector<std::string>> r =
          client->KvGet(keys, std::max<int64_t>(0, left.count()));
      if (r.ok()) {
        Return(std::move(client));
        return r;
      }
      bool again = r.status().code() == StatusCode::kDeadlineExceeded &&
                   std::chrono::steady_clock::now() < deadline;
      if (!again) {
        Return(std::move(client));
        return r.status().WithContext("rendezvous: get from coordinator " + options_.address);
      }
    }
  }

 private:
  StatusOr<std::unique_ptr<CoordinatorClient>> Borrow() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (!idle_.empty()) {
        auto c = std::move(idle_.back());
        idle_.pop_back();
        return c;
      }
    }
    return CoordinatorClient::Connect(options_);
  }

  void Return(std::unique_ptr<CoordinatorClient> client) {
    std::lock_guard<std::mutex> lock(mu_);
    if (idle_.size() < 4) idle_.push_back(std::move(client));
  }

  const CoordinatorClientOptions options_;
  std::mutex mu_;
  std::vector<std::unique_ptr<CoordinatorClient>> idle_;  // guarded by mu_
};

}  // namespace

StatusOr<std::unique_ptr<RendezvousStore>> ConnectCoordinatorRendezvousStore(
    const CoordinatorClientOptions& options) {
  PX_ASSIGN_OR_RETURN(std::unique_ptr<CoordinatorClient> client,
                      CoordinatorClient::Connect(options));
  return std::unique_ptr<RendezvousStore>(
      std::make_unique<CoordinatorRendezvousStore>(options, std::move(client)));
}

}  // namespace parallax::comm
