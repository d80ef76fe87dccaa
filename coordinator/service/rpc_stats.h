// RpcStats: how many calls of each coordinator method were served and how
// long each took, from reading its arguments to writing its reply (the
// frame is already in memory then: network time is not counted), as
// Prometheus histograms for /metrics. Filled by a Thrift processor event
// handler (NewRpcStatsHandler), so the service itself is not involved.
//
// Thread-safe; recording a call takes no lock once its method was seen.
#ifndef PARALLAX_COORDINATOR_RPC_STATS_H_
#define PARALLAX_COORDINATOR_RPC_STATS_H_

#include <array>
#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <shared_mutex>
#include <string>
#include <vector>

namespace apache::thrift {
class TProcessorEventHandler;
}

namespace parallax::coordinator {

class RpcStats {
 public:
  // Upper bounds (seconds) of the histogram buckets; +Inf is implied.
  static constexpr std::array<double, 16> kBucketSeconds = {
      0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025,
      0.05,   0.1,     0.25,   0.5,   1,      2.5,   5,    10};

  struct Method {
    std::string name;  // "Heartbeat"
    // Calls per bucket (not cumulative); the last one is over 10 s.
    std::array<int64_t, kBucketSeconds.size() + 1> buckets{};
    int64_t count = 0;
    double sum_seconds = 0;
  };

  class Counter;  // one method's counters

  RpcStats();
  ~RpcStats();
  RpcStats(const RpcStats&) = delete;
  RpcStats& operator=(const RpcStats&) = delete;

  // The counters of `method` ("Coordinator.Heartbeat" or "Heartbeat"),
  // created on first use. The pointer stays valid as long as this object.
  Counter* For(const std::string& method);
  static void Record(Counter* counter, double seconds);
  // Every method seen so far, by name.
  std::vector<Method> Snapshot() const;

 private:
  mutable std::shared_mutex mu_;
  std::map<std::string, std::unique_ptr<Counter>> methods_;  // GUARDED_BY(mu_)
};

// A Thrift processor event handler that records every call in `stats`
// (which must outlive it). REQUIRES: the server runs a call on one thread
// from start to end (a thread per connection, as every Parallax server).
std::shared_ptr<apache::thrift::TProcessorEventHandler> NewRpcStatsHandler(RpcStats* stats);

}  // namespace parallax::coordinator

#endif  // PARALLAX_COORDINATOR_RPC_STATS_H_
