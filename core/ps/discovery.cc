#include "core/ps/discovery.h"

#include "core/ps/curve.h"

namespace parallax::ps {

std::string ShardEndpointKey(int64_t job_id, int32_t attempt, uint32_t shard) {
  return "job/" + std::to_string(job_id) + "/" + std::to_string(attempt) + "/ps/" +
         std::to_string(shard);
}

StatusOr<PsPlan> FetchPsPlan(CoordinatorClient* coordinator, int64_t job_id, int32_t attempt,
                             int64_t timeout_ms) {
  // Retried across a coordinator restart (CoordinatorClient "Retries").
  StatusOr<std::string> json = coordinator->GetPlan(job_id, attempt, timeout_ms);
  if (!json.ok()) {
    return json.status().WithContext("fetching the plan of job " + std::to_string(job_id));
  }
  auto plan = ParsePsPlan(*json);
  if (!plan.ok()) return plan.status().WithContext("plan of job " + std::to_string(job_id));
  return plan;
}

namespace {

// The value every shard published under key(job, attempt, shard), waiting
// up to timeout_ms for all of them.
StatusOr<std::vector<std::string>> WaitForShardValues(
    CoordinatorClient* coordinator, std::string (*key)(int64_t, int32_t, uint32_t),
    int64_t job_id, int32_t attempt, uint32_t num_shards, int64_t timeout_ms) {
  std::vector<std::string> keys;
  for (uint32_t s = 0; s < num_shards; ++s) keys.push_back(key(job_id, attempt, s));
  return coordinator->KvGet(keys, timeout_ms);
}

}  // namespace

Status PublishShardEndpoint(CoordinatorClient* coordinator, int64_t job_id, int32_t attempt,
                            uint32_t shard, const std::string& endpoint) {
  return coordinator->KvSet(ShardEndpointKey(job_id, attempt, shard), endpoint);
}

StatusOr<std::vector<std::string>> ResolveShardEndpoints(CoordinatorClient* coordinator,
                                                         int64_t job_id, int32_t attempt,
                                                         uint32_t num_shards, int64_t timeout_ms) {
  return WaitForShardValues(coordinator, &ShardEndpointKey, job_id, attempt, num_shards,
                            timeout_ms);
}

Status PublishShardCurveKey(CoordinatorClient* coordinator, int64_t job_id, int32_t attempt,
                            uint32_t shard, const std::string& public_key) {
  return coordinator->KvSet(ShardCurveKey(job_id, attempt, shard), public_key);
}

StatusOr<std::vector<std::string>> ResolveShardCurveKeys(CoordinatorClient* coordinator,
                                                         int64_t job_id, int32_t attempt,
                                                         uint32_t num_shards, int64_t timeout_ms) {
  return WaitForShardValues(coordinator, &ShardCurveKey, job_id, attempt, num_shards, timeout_ms);
}

Status PublishClientCurveKey(CoordinatorClient* coordinator, int64_t job_id, int32_t attempt,
                             const std::string& public_key, const std::string& who) {
  std::string key = ClientCurveKey(job_id, attempt, public_key);
  if (key.empty()) return InvalidArgument("not a Z85 CURVE public key");
  return coordinator->KvSet(key, who);
}

bool IsClientCurveKeyPublished(CoordinatorClient* coordinator, int64_t job_id, int32_t attempt,
                               const std::string& public_key, int64_t timeout_ms) {
  std::string key = ClientCurveKey(job_id, attempt, public_key);
  if (key.empty()) return false;
  return coordinator->KvGet({key}, timeout_ms).ok();
}

}  // namespace parallax::ps
