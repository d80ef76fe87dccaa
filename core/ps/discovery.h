// Where PS shards publish their endpoints: the coordinator's key-value store,
// under job/<id>/<attempt>/ps/<shard> (the attempt in the key means a
// restarted job never reads a stale address).
#ifndef PARALLAX_CORE_PS_DISCOVERY_H_
#define PARALLAX_CORE_PS_DISCOVERY_H_

#include <cstdint>
#include <string>
#include <vector>

#include "core/ps/client.h"
#include "core/ps/plan.h"
#include "core/rpc/coordinator_client.h"
#include "parallax/status.h"

namespace parallax::ps {

// Publishes this shard's endpoint.
Status PublishShardEndpoint(CoordinatorClient* coordinator, int64_t job_id, int32_t attempt,
                            uint32_t shard, const std::string& endpoint);

// Every shard's endpoint, waiting up to timeout_ms for all to be published.
StatusOr<std::vector<std::string>> ResolveShardEndpoints(CoordinatorClient* coordinator,
                                                         int64_t job_id, int32_t attempt,
                                                         uint32_t num_shards, int64_t timeout_ms);

// A shard started again alone (docs/RELIABILITY.md, "A lost PS shard")
// publishes under its generation (schemas/kv_keys.h, ShardEndpoint).
// Publishes generation `generation` of a shard: its CURVE key first (when
// not empty), then its endpoint.
Status PublishShardGeneration(CoordinatorClient* coordinator, int64_t job_id, int32_t attempt,
                              uint32_t shard, uint32_t generation, const std::string& endpoint,
                              const std::string& curve_key);

// Where generation `generation` of `shard` listens (with its CURVE key when
// `curve`), waiting until `deadline`: DEADLINE_EXCEEDED when it has not
// been published by then. A PsClient's ShardResolver.
StatusOr<ShardAddress> ResolveShardGeneration(CoordinatorClient* coordinator, int64_t job_id,
                                              int32_t attempt, uint32_t shard,
                                              uint32_t generation, bool curve, Deadline deadline);

// CURVE keys (core/ps/curve.h). The shard publishes its public key before
// its endpoint, so a client that found every endpoint finds every key.
Status PublishShardCurveKey(CoordinatorClient* coordinator, int64_t job_id, int32_t attempt,
                            uint32_t shard, const std::string& public_key);
StatusOr<std::vector<std::string>> ResolveShardCurveKeys(CoordinatorClient* coordinator,
                                                         int64_t job_id, int32_t attempt,
                                                         uint32_t num_shards, int64_t timeout_ms);
// Publishes a client's public key (value: who it is, for operators).
Status PublishClientCurveKey(CoordinatorClient* coordinator, int64_t job_id, int32_t attempt,
                             const std::string& public_key, const std::string& who);
// Whether `public_key` was published as a client of (job, attempt). Waits up
// to timeout_ms for it; false on any error.
bool IsClientCurveKeyPublished(CoordinatorClient* coordinator, int64_t job_id, int32_t attempt,
                               const std::string& public_key, int64_t timeout_ms);

}  // namespace parallax::ps

#endif  // PARALLAX_CORE_PS_DISCOVERY_H_
