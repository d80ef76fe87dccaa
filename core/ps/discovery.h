// Where PS shards publish their endpoints: the coordinator's key-value store,
// under job/<id>/<attempt>/ps/<shard> (the attempt in the key means a
// restarted job never reads a stale address).
#ifndef PARALLAX_CORE_PS_DISCOVERY_H_
#define PARALLAX_CORE_PS_DISCOVERY_H_

#include <cstdint>
#include <string>
#include <vector>

#include "core/base/status.h"
#include "core/rpc/coordinator_client.h"
#include "core/ps/plan.h"

namespace parallax::ps {

std::string ShardEndpointKey(int64_t job_id, int32_t attempt, uint32_t shard);

// Fetches the PS part of the plan of (job, attempt), waiting up to timeout_ms.
StatusOr<PsPlan> FetchPsPlan(CoordinatorClient* coordinator, int64_t job_id, int32_t attempt,
                             int64_t timeout_ms);

// Publishes this shard's endpoint.
Status PublishShardEndpoint(CoordinatorClient* coordinator, int64_t job_id, int32_t attempt,
                            uint32_t shard, const std::string& endpoint);

// Every shard's endpoint, waiting up to timeout_ms for all to be published.
StatusOr<std::vector<std::string>> ResolveShardEndpoints(CoordinatorClient* coordinator,
                                                         int64_t job_id, int32_t attempt,
                                                         uint32_t num_shards, int64_t timeout_ms);

}  // namespace parallax::ps

#endif  // PARALLAX_CORE_PS_DISCOVERY_H_
