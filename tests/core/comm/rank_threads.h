// Helpers for tests that run the ranks of a communicator as threads of one
// process, on loopback with ephemeral ports.
#ifndef PARALLAX_TESTS_CORE_COMM_RANK_THREADS_H_
#define PARALLAX_TESTS_CORE_COMM_RANK_THREADS_H_

#include <functional>
#include <memory>
#include <thread>
#include <vector>

#include "core/comm/communicator.h"
#include "core/comm/rendezvous_store.h"

namespace parallax::comm::testing {

// Runs fn(rank) on `world` threads and joins them.
inline void RunRanks(int world, const std::function<void(int)>& fn) {
  std::vector<std::thread> threads;
  for (int r = 0; r < world; ++r) threads.emplace_back(fn, r);
  for (auto& t : threads) t.join();
}

// Gloo over TCP for every collective (shared memory off: these ranks share
// a host, and the tests that use this are about Gloo).
inline CommunicatorOptions GlooOptions(int rank, int world, const std::string& prefix = "test") {
  CommunicatorOptions o;
  o.backend = Backend::kGloo;
  o.rank = rank;
  o.world_size = world;
  o.key_prefix = prefix;
  o.bind_address = "127.0.0.1";
  o.rendezvous_timeout = std::chrono::milliseconds(20'000);
  o.shared_memory = false;
  return o;
}

// Creates `world` connected communicators with options(rank), one per
// thread, in parallel. Empty when any rank failed.
inline std::vector<std::unique_ptr<Communicator>> CreateWorld(
    int world, RendezvousStore* store, const std::function<CommunicatorOptions(int)>& options) {
  std::vector<std::unique_ptr<Communicator>> comms(world);
  std::vector<Status> statuses(world);
  RunRanks(world, [&](int r) {
    auto c = Communicator::Create(options(r), store);
    statuses[r] = c.status();
    if (c.ok()) comms[r] = std::move(c).value();
  });
  for (int r = 0; r < world; ++r) {
    if (!statuses[r].ok()) return {};
  }
  return comms;
}

// Creates `world` connected Gloo communicators (one per thread, in parallel).
inline std::vector<std::unique_ptr<Communicator>> CreateGlooWorld(
    int world, RendezvousStore* store, const std::string& prefix = "test",
    bool verify_arguments = true) {
  return CreateWorld(world, store, [&](int r) {
    CommunicatorOptions o = GlooOptions(r, world, prefix);
    o.verify_arguments = verify_arguments;
    return o;
  });
}

// Integer-valued test data, so sums are exact in any order.
inline float Value(int rank, size_t i) {
  return static_cast<float>((rank + 1) * static_cast<int>(i % 97) - 40);
}

}  // namespace parallax::comm::testing

#endif  // PARALLAX_TESTS_CORE_COMM_RANK_THREADS_H_
