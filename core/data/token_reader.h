// TokenReader: sharded, seeded, resumable (context, target) examples from a
// token file, for language models.
#ifndef PARALLAX_CORE_DATA_TOKEN_READER_H_
#define PARALLAX_CORE_DATA_TOKEN_READER_H_

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "parallax/status.h"

namespace parallax::data {

struct TokenReaderOptions {
  int shard = 0, num_shards = 1;  // this rank and the world size
  uint64_t seed = 1;              // shuffling seed
  uint32_t context = 4;           // tokens of context before each target
  bool shuffle = true;            // false: examples in file order
};

struct TokenBatch {
  std::vector<uint32_t> context;  // batch × context ids, oldest first, row-major
  std::vector<uint32_t> targets;  // batch ids
};

// Not thread-safe: one reader per rank (or per thread).
class TokenReader {
 public:
  // Examples are the positions t in [context, count). Each epoch is a permutation of them
  // (seeded by seed and epoch number; identity when !shuffle). Step i of shard s takes the
  // examples perm[(i*batch + j) * num_shards + s], j < batch — so the union over shards of
  // step i with batch B equals step i of a 1-shard reader with batch num_shards*B (in rank-major
  // interleaving), which the sync-mode equivalence (N ranks x B == 1 rank x N*B) relies on.
  // Wraps into the next epoch.
  //
  // Errors: those of ReadTokenFile; INVALID_ARGUMENT for bad options or a file
  // with no example (count <= context).
  static StatusOr<std::unique_ptr<TokenReader>> Open(const std::string& path,
                                                     const TokenReaderOptions& options);
  // Same, over tokens already in memory (tests, generated data).
  static StatusOr<std::unique_ptr<TokenReader>> FromTokens(std::vector<uint32_t> tokens,
                                                           const TokenReaderOptions& options);

  ~TokenReader();
  TokenReader(const TokenReader&) = delete;
  TokenReader& operator=(const TokenReader&) = delete;

  // Fills `out` with the next `batch_size` examples of this shard (resizing
  // its vectors).
  void Next(size_t batch_size, TokenBatch* out);

  // Opaque bytes (epoch, offset, seed check) for a checkpoint.
  std::string SavePosition() const;
  // INVALID_ARGUMENT for foreign/corrupt bytes: a position from another file,
  // seed, shard layout or context length, or damaged bytes. On error the
  // position is unchanged.
  Status RestorePosition(std::string_view position);

  // The epoch the next example comes from (0 first).
  int64_t epoch() const;
  // Examples per epoch over all shards: count - context.
  size_t examples_per_epoch() const;

 private:
  TokenReader(std::vector<uint32_t> tokens, const TokenReaderOptions& options);
  void LoadEpoch(int64_t epoch);

  // Constant after construction.
  const std::vector<uint32_t> tokens_;
  const TokenReaderOptions options_;
  const uint64_t examples_;
  const uint64_t fingerprint_;  // of the token contents

  // Examples this shard has consumed; the next is stream index
  // consumed_ * num_shards + shard, where the stream is the concatenation of
  // the epochs' permutations.
  uint64_t consumed_ = 0;
  int64_t loaded_epoch_ = -1;
  std::vector<uint32_t> perm_;  // of loaded_epoch_; empty when !shuffle
};

}  // namespace parallax::data

#endif  // PARALLAX_CORE_DATA_TOKEN_READER_H_
