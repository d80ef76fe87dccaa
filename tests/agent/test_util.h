// Helpers shared by the agent tests.
#ifndef PARALLAX_TESTS_AGENT_TEST_UTIL_H_
#define PARALLAX_TESTS_AGENT_TEST_UTIL_H_

#include <chrono>
#include <fstream>
#include <functional>
#include <map>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "schemas/coordinator_types.h"

namespace parallax::agent::testing {

inline rpc::TaskKey Key(int64_t job, int32_t attempt, int32_t index,
                        rpc::TaskRole::type role = rpc::TaskRole::TRAINER) {
  rpc::TaskKey key;
  key.job_id = job;
  key.attempt = attempt;
  key.role = role;
  key.index = index;
  return key;
}

inline rpc::TaskAssignment Assignment(const rpc::TaskKey& key,
                                      std::vector<std::string> command = {},
                                      std::map<std::string, std::string> env = {}) {
  rpc::TaskAssignment a;
  a.key = key;
  a.world_size = 2;
  a.local_rank = key.index;
  a.local_world_size = 2;
  a.host_index = 0;
  a.num_hosts = 1;
  a.num_shards = 1;
  a.command = std::move(command);
  a.env = std::move(env);
  a.job_text = "name = \"test\"\n";
  a.job_path = "/jobs/test/job.toml";
  return a;
}

inline rpc::PollResponse Start(std::vector<rpc::TaskAssignment> start) {
  rpc::PollResponse r;
  r.known = true;
  r.start = std::move(start);
  return r;
}

inline rpc::PollResponse StopTasks(std::vector<rpc::TaskKey> stop) {
  rpc::PollResponse r;
  r.known = true;
  r.stop = std::move(stop);
  return r;
}

inline std::string ReadAll(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// Polls `pred` every few milliseconds until it holds or `timeout_ms` passes.
// For real processes only, whose timing the test does not control.
inline bool WaitUntil(const std::function<bool()>& pred, int timeout_ms = 10'000) {
  auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  while (std::chrono::steady_clock::now() < deadline) {
    if (pred()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return pred();
}

}  // namespace parallax::agent::testing

#endif  // PARALLAX_TESTS_AGENT_TEST_UTIL_H_
