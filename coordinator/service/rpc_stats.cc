#include "coordinator/service/rpc_stats.h"

#include <thrift/TProcessor.h>

#include <algorithm>
#include <chrono>
#include <mutex>

namespace parallax::coordinator {

class RpcStats::Counter {
 public:
  explicit Counter(std::string name) : name_(std::move(name)) {}

  void Add(double seconds) {
    size_t b = std::lower_bound(kBucketSeconds.begin(), kBucketSeconds.end(), seconds) -
               kBucketSeconds.begin();
    buckets_[b].fetch_add(1, std::memory_order_relaxed);
    sum_ns_.fetch_add(static_cast<int64_t>(seconds * 1e9), std::memory_order_relaxed);
  }

  Method Read() const {
    Method m;
    m.name = name_;
    for (size_t b = 0; b < buckets_.size(); ++b) {
      m.buckets[b] = buckets_[b].load(std::memory_order_relaxed);
      m.count += m.buckets[b];
    }
    m.sum_seconds = static_cast<double>(sum_ns_.load(std::memory_order_relaxed)) / 1e9;
    return m;
  }

 private:
  const std::string name_;
  std::array<std::atomic<int64_t>, kBucketSeconds.size() + 1> buckets_{};
  std::atomic<int64_t> sum_ns_{0};
};

RpcStats::RpcStats() = default;
RpcStats::~RpcStats() = default;

RpcStats::Counter* RpcStats::For(const std::string& method) {
  // Thrift names calls "Service.Method".
  const std::string name = method.substr(method.find('.') + 1);
  {
    std::shared_lock<std::shared_mutex> lock(mu_);
    auto it = methods_.find(name);
    if (it != methods_.end()) return it->second.get();
  }
  std::unique_lock<std::shared_mutex> lock(mu_);
  auto& slot = methods_[name];
  if (!slot) slot = std::make_unique<Counter>(name);
  return slot.get();
}

void RpcStats::Record(Counter* counter, double seconds) { counter->Add(seconds); }

std::vector<RpcStats::Method> RpcStats::Snapshot() const {
  std::shared_lock<std::shared_mutex> lock(mu_);
  std::vector<Method> out;
  out.reserve(methods_.size());
  for (const auto& [name, counter] : methods_) out.push_back(counter->Read());
  return out;
}

namespace {

using SteadyClock = std::chrono::steady_clock;

// When the call on this thread started (a call runs on one thread).
thread_local SteadyClock::time_point call_start;

class RpcStatsHandler final : public apache::thrift::TProcessorEventHandler {
 public:
  explicit RpcStatsHandler(RpcStats* stats) : stats_(stats) {}

  void* getContext(const char* fn_name, void*) override {
    call_start = SteadyClock::now();
    return stats_->For(fn_name);
  }

  void preWrite(void* ctx, const char*) override {
    std::chrono::duration<double> took = SteadyClock::now() - call_start;
    RpcStats::Record(static_cast<RpcStats::Counter*>(ctx), took.count());
  }

 private:
  RpcStats* const stats_;
};

}  // namespace

std::shared_ptr<apache::thrift::TProcessorEventHandler> NewRpcStatsHandler(RpcStats* stats) {
  return std::make_shared<RpcStatsHandler>(stats);
}

}  // namespace parallax::coordinator
