// LostShards: what a PsClient knows about shards it may have to follow to a
// next generation (PsClientOptions::resolve_shard; docs/RELIABILITY.md, "A
// lost PS shard"): each shard's generation, the requests it has not
// answered (kept so they can be sent again), whether it is lost (its next
// generation being looked up on a thread of its own) or gone (not found in
// time), and the lookups' results.
//
// Thread-safety: everything but the lookup threads is called from the
// client's I/O thread only; lookups hand their results over under a lock
// and wake that thread through `wake`.
#ifndef PARALLAX_CORE_PS_LOST_SHARDS_H_
#define PARALLAX_CORE_PS_LOST_SHARDS_H_

#include <array>
#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <zmq.hpp>

#include "core/ps/client.h"

namespace parallax::ps {

class LostShards {
 public:
  // A request's frames (three, or a batch's four), kept by
  // (request id, partition): in ticket order when iterated.
  using Frames = std::vector<zmq::message_t>;
  using Held = std::map<std::pair<uint64_t, uint32_t>, Frames>;

  // Generations from options.shard_generations (missing ones: 0); `wake`
  // is called by a lookup thread once its result can be taken (TakeFound).
  // `options` must outlive this.
  LostShards(const PsClientOptions& options, size_t num_shards, std::function<void()> wake);
  // Joins the lookup threads; each returns within about 500 ms.
  ~LostShards();

  bool enabled() const { return static_cast<bool>(options_.resolve_shard); }
  uint32_t generation(uint32_t shard) const { return generation_[shard]; }
  bool lost(uint32_t shard) const { return lost_[shard]; }
  // OK, or UNAVAILABLE naming the shard once it did not come back.
  const Status& gone(uint32_t shard) const { return gone_[shard]; }
  size_t held(uint32_t shard) const { return held_[shard].size(); }

  // Keeps a shared copy of a request's frames until Answered().
  void Keep(uint32_t shard, uint64_t request_id, uint32_t partition, Frames& frames);
  void Answered(uint32_t shard, uint64_t request_id, uint32_t partition) {
    held_[shard].erase({request_id, partition});
  }

  // `shard`'s process is gone (`why`): look up its next generation on a
  // thread of its own. Nothing when it is already lost or gone.
  void Lose(uint32_t shard, const std::string& why);

  // The lookups that ended since the last call, by shard; each of those
  // shards is no longer lost.
  std::vector<std::pair<uint32_t, StatusOr<ShardAddress>>> TakeFound();

  // The shard came back as `generation`: its held requests, to send again.
  Held Recovered(uint32_t shard, uint32_t generation);
  // The shard did not come back (`why`): its held requests, to fail.
  Held Gone(uint32_t shard, const std::string& why);

 private:
  StatusOr<ShardAddress> Look(uint32_t shard, uint32_t generation, Deadline deadline);

  // Constant after construction.
  const PsClientOptions& options_;
  const std::function<void()> wake_;

  // I/O thread only.
  std::vector<uint32_t> generation_;
  std::vector<Held> held_;
  std::vector<bool> lost_;
  std::vector<Status> gone_;
  std::vector<std::thread> lookups_;  // joined by the destructor

  std::atomic<bool> stopping_{false};
  std::mutex mu_;
  std::vector<std::optional<StatusOr<ShardAddress>>> found_;  // guarded by mu_
};

}  // namespace parallax::ps

#endif  // PARALLAX_CORE_PS_LOST_SHARDS_H_
