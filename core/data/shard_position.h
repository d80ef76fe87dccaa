// Data positions across a change of the shard count (a job resumed with
// another number of workers). The readers interleave one global stream:
// shard s of N takes stream items s, s + N, s + 2N, ... (TokenReader: the
// epochs' permutations; CriteoReader: the file's lines). When every shard
// of N consumed c items (sync training keeps them equal), the stream's
// first c·N items are used; each shard of M then resumes at
// ceil(c·N / M), so nothing is repeated and the items c·N up to that
// point (fewer than M, none when M divides c·N) are skipped.
#ifndef PARALLAX_CORE_DATA_SHARD_POSITION_H_
#define PARALLAX_CORE_DATA_SHARD_POSITION_H_

#include <cstdint>

namespace parallax::data {

// REQUIRES: from_shards >= 1, to_shards >= 1.
inline uint64_t ConsumedAfterReshard(uint64_t consumed, uint32_t from_shards, uint32_t to_shards) {
  const uint64_t global = consumed * from_shards;
  return (global + to_shards - 1) / to_shards;
}

}  // namespace parallax::data

#endif  // PARALLAX_CORE_DATA_SHARD_POSITION_H_
