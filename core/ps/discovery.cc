#include "core/ps/discovery.h"

#include <algorithm>
#include <chrono>

#include "core/ps/curve.h"
#include "schemas/kv_keys.h"

namespace parallax::ps {

Status PublishShardGeneration(CoordinatorClient* coordinator, int64_t job_id, int32_t attempt,
                              uint32_t shard, uint32_t generation, const std::string& endpoint,
                              const std::string& curve_key) {
  if (!curve_key.empty()) {
    PX_RETURN_IF_ERROR(coordinator->KvSet(
        kv_keys::ShardCurveKey(job_id, attempt, shard, generation), curve_key));
  }
  return coordinator->KvSet(
      kv_keys::ShardEndpoint(job_id, attempt, shard, generation), endpoint);
}

StatusOr<ShardAddress> ResolveShardGeneration(CoordinatorClient* coordinator, int64_t job_id,
                                              int32_t attempt, uint32_t shard,
                                              uint32_t generation, bool curve, Deadline deadline) {
  const int64_t ms = std::max<int64_t>(
      0, std::chrono::duration_cast<std::chrono::milliseconds>(
             deadline - std::chrono::steady_clock::now())
             .count());
  // The endpoint is published after the CURVE key: once it is there, so is the key.
  std::vector<std::string> keys = {
      kv_keys::ShardEndpoint(job_id, attempt, shard, generation)};
  if (curve) keys.push_back(kv_keys::ShardCurveKey(job_id, attempt, shard, generation));
  PX_ASSIGN_OR_RETURN(std::vector<std::string> values, coordinator->KvGet(keys, ms));
  ShardAddress address;
  address.endpoint = values.at(0);
  if (curve) address.curve_key = values.at(1);
  address.generation = generation;
  return address;
}

namespace {

// The value every shard published under key(job, attempt, shard), waiting
// up to timeout_ms for all of them.
StatusOr<std::vector<std::string>> WaitForShardValues(
    CoordinatorClient* coordinator, std::string (*key)(int64_t, int, uint32_t, uint32_t),
    int64_t job_id, int32_t attempt, uint32_t num_shards, int64_t timeout_ms) {
  std::vector<std::string> keys;
  for (uint32_t s = 0; s < num_shards; ++s) keys.push_back(key(job_id, attempt, s, 1));
  return coordinator->KvGet(keys, timeout_ms);
}

}  // namespace

Status PublishShardEndpoint(CoordinatorClient* coordinator, int64_t job_id, int32_t attempt,
                            uint32_t shard, const std::string& endpoint) {
  return coordinator->KvSet(kv_keys::ShardEndpoint(job_id, attempt, shard), endpoint);
}

StatusOr<std::vector<std::string>> ResolveShardEndpoints(CoordinatorClient* coordinator,
                                                         int64_t job_id, int32_t attempt,
                                                         uint32_t num_shards, int64_t timeout_ms) {
  return WaitForShardValues(coordinator, &kv_keys::ShardEndpoint, job_id, attempt, num_shards,
                            timeout_ms);
}

Status PublishShardCurveKey(CoordinatorClient* coordinator, int64_t job_id, int32_t attempt,
                            uint32_t shard, const std::string& public_key) {
  return coordinator->KvSet(kv_keys::ShardCurveKey(job_id, attempt, shard), public_key);
}

StatusOr<std::vector<std::string>> ResolveShardCurveKeys(CoordinatorClient* coordinator,
                                                         int64_t job_id, int32_t attempt,
                                                         uint32_t num_shards, int64_t timeout_ms) {
  return WaitForShardValues(coordinator, &kv_keys::ShardCurveKey, job_id, attempt, num_shards, timeout_ms);
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
