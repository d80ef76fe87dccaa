#include "core/ps/discovery.h"

namespace parallax::ps {

std::string ShardEndpointKey(int64_t job_id, int32_t attempt, uint32_t shard) {
  return "job/" + std::to_string(job_id) + "/" + std::to_string(attempt) + "/ps/" +
         std::to_string(shard);
}

StatusOr<PsPlan> FetchPsPlan(CoordinatorClient* coordinator, int64_t job_id, int32_t attempt,
                             int64_t timeout_ms) {
  std::string json;
  Status st = coordinator->Call(
      [&](rpc::CoordinatorClient& c) {
        c.GetPlan(json, coordinator->Header(), job_id, attempt, timeout_ms);
      },
      timeout_ms);
  if (!st.ok()) return st.WithContext("fetching the plan of job " + std::to_string(job_id));
  auto plan = ParsePsPlan(json);
  if (!plan.ok()) return plan.status().WithContext("plan of job " + std::to_string(job_id));
  return plan;
}

Status PublishShardEndpoint(CoordinatorClient* coordinator, int64_t job_id, int32_t attempt,
                            uint32_t shard, const std::string& endpoint) {
  return coordinator->KvSet(ShardEndpointKey(job_id, attempt, shard), endpoint);
}

StatusOr<std::vector<std::string>> ResolveShardEndpoints(CoordinatorClient* coordinator,
                                                         int64_t job_id, int32_t attempt,
                                                         uint32_t num_shards, int64_t timeout_ms) {
  std::vector<std::string> keys;
  for (uint32_t s = 0; s < num_shards; ++s) keys.push_back(ShardEndpointKey(job_id, attempt, s));
  return coordinator->KvGet(keys, timeout_ms);
}

}  // namespace parallax::ps
