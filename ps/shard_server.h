// ShardServer: serves a ShardCore on a ZeroMQ ROUTER socket. One event-loop
// thread owns the socket and the core; many workers are served concurrently
// because nothing blocks the loop: a request whose step is not ready is held
// inside the core and answered when another message makes it ready.
#ifndef PARALLAX_PS_SHARD_SERVER_H_
#define PARALLAX_PS_SHARD_SERVER_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "core/ps/curve.h"
#include "parallax/status.h"
#include "ps/shard_core.h"

namespace parallax::ps {

// ZeroMQ CURVE on the shard's socket (core/ps/curve.h). With it, a client
// must know the shard's public key and have its own key admitted by
// `authorize`; anything else (a plain client, an unknown key) gets no
// connection and no reply.
struct ShardCurveOptions {
  bool enabled = false;
  // This shard's key pair; Start makes one when keys.public_key is empty.
  CurveKeyPair keys;
  // Called on the shard's ZAP thread with each connecting client's public
  // key (Z85); true admits it (and the key is remembered). May block briefly
  // (it asks the coordinator); other handshakes wait meanwhile. Null: admit
  // none.
  std::function<bool(const std::string& client_public_key)> authorize;
};

struct ShardServerOptions {
  ShardOptions shard;
  ShardCurveOptions curve;
  // A checkpoint directory whose partitions the shard holds before it
  // serves anything (a shard started again alone after it was lost); "":
  // the partitions start from their initializer.
  std::string load_checkpoint;
  // Its step (the steps applied of a variable it holds on workers, which
  // the shard takes from its dense.pxck: ShardCore::LoadCheckpoint).
  int64_t load_step = 0;
  // Where the shard keeps its count of updates applied for a next
  // generation to read (ps/updates_file.h); "": nowhere.
  std::string updates_file;
  // A next generation (shard.generation > 1): its predecessor's updates
  // file, to count the updates lost with it ("" or unreadable: unknown).
  std::string previous_updates_file;
  // Where to bind. A port of 0 ("tcp://127.0.0.1:0") picks a free port;
  // endpoint() tells which. ipc:// paths work for same-host workers.
  std::string listen = "tcp://127.0.0.1:0";
  // Connections kept open at most (ps/shard_connections.h); 0: the
  // open-file limit less an eighth, at most 16384.
  int max_connections = 0;
  // A connection that has not finished ZeroMQ's handshake (with CURVE, its
  // authentication) this long after connecting is closed.
  int handshake_timeout_ms = 10'000;
};

// What a shard served so far and the rows it holds.
struct ShardSnapshot {
  ShardStats stats;
  int64_t rows_held = 0;
  uint32_t generation = 0;
  // ShardCore::lost_updates().
  std::optional<int64_t> lost_updates;
  // ShardCore::dynamic_stats().
  std::vector<std::pair<std::string, DynamicTableStats>> dynamic_tables;
};

class ShardServer {
 public:
  virtual ~ShardServer() = default;

  // Binds and starts the loop thread. Fails when the plan or the address is
  // unusable.
  static StatusOr<std::unique_ptr<ShardServer>> Start(ShardServerOptions options);

  // The bound endpoint, e.g. "tcp://127.0.0.1:41234". Constant after Start.
  virtual const std::string& endpoint() const = 0;

  // The shard's CURVE public key (Z85); "" without CURVE.
  virtual const std::string& curve_public_key() const = 0;

  // The counters as of the last batch of messages the loop handled.
  // Thread-safe.
  virtual ShardSnapshot Snapshot() const = 0;

  // Stops the loop and joins it; pending held requests are dropped.
  // Idempotent; the destructor calls it.
  virtual void Stop() = 0;
};

}  // namespace parallax::ps

#endif  // PARALLAX_PS_SHARD_SERVER_H_
