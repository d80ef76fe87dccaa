#include "core/ps/lost_shards.h"

#include <algorithm>
#include <chrono>

#include "core/base/logging.h"

namespace parallax::ps {

LostShards::LostShards(const PsClientOptions& options, size_t num_shards,
                       std::function<void()> wake)
    : options_(options), wake_(std::move(wake)) {
  generation_ = options_.shard_generations;
  generation_.resize(num_shards, 0);
  held_.resize(num_shards);
  lost_.assign(num_shards, false);
  gone_.assign(num_shards, Status::Ok());
  lookups_.resize(num_shards);
  found_.resize(num_shards);
}

LostShards::~LostShards() {
  stopping_.store(true);
  for (std::thread& t : lookups_)
    if (t.joinable()) t.join();
}

void LostShards::Keep(uint32_t shard, uint64_t request_id, uint32_t partition, Frames& frames) {
  Frames& kept = held_[shard][{request_id, partition}];
  kept.resize(frames.size());
  for (size_t i = 0; i < frames.size(); ++i) kept[i].copy(frames[i]);
}

void LostShards::Lose(uint32_t shard, const std::string& why) {
  if (lost_[shard] || !gone_[shard].ok()) return;
  lost_[shard] = true;
  const uint32_t next = generation_[shard] + 1;
  const int64_t timeout_ms = options_.shard_recovery_timeout_ms;
  PX_LOG(WARNING) << "PS shard " << shard << " (generation " << generation_[shard]
                  << ") is lost: " << why << "; holding its " << held_[shard].size()
                  << " unanswered request(s) for up to " << timeout_ms
                  << " ms until its generation " << next << " is published";
  if (lookups_[shard].joinable()) lookups_[shard].join();  // it handed over and ended
  lookups_[shard] = std::thread([this, shard, next, timeout_ms] {
    StatusOr<ShardAddress> found = Look(shard, next, DeadlineIn(timeout_ms));
    {
      std::lock_guard<std::mutex> lock(mu_);
      found_[shard] = std::move(found);
    }
    wake_();
  });
}

// Lookup thread: asks in slices, so that the destructor need not wait for
// the whole deadline.
StatusOr<ShardAddress> LostShards::Look(uint32_t shard, uint32_t generation, Deadline deadline) {
  Status last = DeadlineExceeded("not published");
  while (!stopping_.load() && std::chrono::steady_clock::now() < deadline) {
    StatusOr<ShardAddress> found =
        options_.resolve_shard(shard, generation, std::min(deadline, DeadlineIn(500)));
    if (found.ok() || found.status().code() != StatusCode::kDeadlineExceeded) return found;
    last = found.status();
  }
  return stopping_.load() ? Unavailable("the PS client is closing") : last;
}

std::vector<std::pair<uint32_t, StatusOr<ShardAddress>>> LostShards::TakeFound() {
  std::vector<std::optional<StatusOr<ShardAddress>>> found;
  {
    std::lock_guard<std::mutex> lock(mu_);
    found.swap(found_);
    found_.resize(found.size());
  }
  std::vector<std::pair<uint32_t, StatusOr<ShardAddress>>> out;
  for (uint32_t shard = 0; shard < found.size(); ++shard) {
    if (!found[shard]) continue;
    lost_[shard] = false;
    out.emplace_back(shard, std::move(*found[shard]));
  }
  return out;
}

LostShards::Held LostShards::Recovered(uint32_t shard, uint32_t generation) {
  generation_[shard] = generation;
  Held held = std::move(held_[shard]);
  held_[shard].clear();
  return held;
}

LostShards::Held LostShards::Gone(uint32_t shard, const std::string& why) {
  gone_[shard] = Unavailable("PS shard " + std::to_string(shard) + " (generation " +
                             std::to_string(generation_[shard]) +
                             ") was lost and its generation " +
                             std::to_string(generation_[shard] + 1) + " did not come back within " +
                             std::to_string(options_.shard_recovery_timeout_ms) + " ms: " + why);
  PX_LOG(ERROR) << gone_[shard].message();
  Held held = std::move(held_[shard]);
  held_[shard].clear();
  return held;
}

}  // namespace parallax::ps
