#include "core/data/token_reader.h"

#include <algorithm>
#include <numeric>

#include "core/data/bytes.h"
#include "core/data/shard_position.h"
#include "core/data/token_file.h"

namespace parallax::data {
namespace {

constexpr std::string_view kPositionMagic = "PXTRPOS1";
// magic, fingerprint, seed, examples, shard, num_shards, context, shuffle,
// consumed, checksum.
constexpr size_t kPositionBytes = 8 + 8 + 8 + 8 + 4 + 4 + 4 + 4 + 8 + 8;

uint64_t Fingerprint(const std::vector<uint32_t>& tokens) {
  std::string header;
  internal::PutU64(&header, tokens.size());
  uint64_t h = internal::Fnv1a(header);
  return internal::Fnv1a(
      std::string_view(reinterpret_cast<const char*>(tokens.data()), 4 * tokens.size()), h);
}

}  // namespace

StatusOr<std::unique_ptr<TokenReader>> TokenReader::Open(const std::string& path,
                                                         const TokenReaderOptions& options) {
  PX_ASSIGN_OR_RETURN(std::vector<uint32_t> tokens, ReadTokenFile(path));
  auto reader = FromTokens(std::move(tokens), options);
  if (!reader.ok()) return reader.status().WithContext("token file '" + path + "'");
  return reader;
}

StatusOr<std::unique_ptr<TokenReader>> TokenReader::FromTokens(std::vector<uint32_t> tokens,
                                                               const TokenReaderOptions& options) {
  if (options.num_shards < 1 || options.shard < 0 || options.shard >= options.num_shards) {
    return InvalidArgument("token reader shard " + std::to_string(options.shard) + " of " +
                           std::to_string(options.num_shards) +
                           " is out of range (need 0 <= shard < num_shards)");
  }
  if (options.context == 0) {
    return InvalidArgument("token reader context must be at least 1 token");
  }
  if (tokens.size() <= options.context) {
    return InvalidArgument("the token data holds " + std::to_string(tokens.size()) +
                           " tokens, too few for one example with " +
                           std::to_string(options.context) + " tokens of context");
  }
  if (tokens.size() > (uint64_t{1} << 32)) {
    return InvalidArgument(
        "the token data holds more than 2^32 tokens, which the reader does not support");
  }
  return std::unique_ptr<TokenReader>(new TokenReader(std::move(tokens), options));
}

TokenReader::TokenReader(std::vector<uint32_t> tokens, const TokenReaderOptions& options)
    : tokens_(std::move(tokens)),
      options_(options),
      examples_(tokens_.size() - options.context),
      fingerprint_(Fingerprint(tokens_)) {}

TokenReader::~TokenReader() = default;

void TokenReader::LoadEpoch(int64_t epoch) {
  loaded_epoch_ = epoch;
  if (!options_.shuffle) return;
  perm_.resize(examples_);
  std::iota(perm_.begin(), perm_.end(), options_.context);
  // Fisher-Yates with a generator seeded by (seed, epoch): the same
  // permutation on every rank and every platform.
  internal::SplitMix64 rng(options_.seed * 0x9e3779b97f4a7c15ULL ^
                           (static_cast<uint64_t>(epoch) + 0x632be59bd9b4e019ULL));
  for (uint64_t i = examples_ - 1; i > 0; --i) {
    std::swap(perm_[i], perm_[rng.Below(i + 1)]);
  }
}

void TokenReader::Next(size_t batch_size, TokenBatch* out) {
  const uint32_t k = options_.context;
  out->context.resize(batch_size * k);
  out->targets.resize(batch_size);
  for (size_t j = 0; j < batch_size; ++j, ++consumed_) {
    const uint64_t stream = consumed_ * options_.num_shards + options_.shard;
    const auto epoch = static_cast<int64_t>(stream / examples_);
    if (epoch != loaded_epoch_) LoadEpoch(epoch);
    const uint64_t index = stream % examples_;
    const uint64_t t = options_.shuffle ? perm_[index] : index + k;
    out->targets[j] = tokens_[t];
    std::copy(tokens_.begin() + (t - k), tokens_.begin() + t, out->context.begin() + j * k);
  }
}

std::string TokenReader::SavePosition() const {
  std::string out(kPositionMagic);
  internal::PutU64(&out, fingerprint_);
  internal::PutU64(&out, options_.seed);
  internal::PutU64(&out, examples_);
  internal::PutU32(&out, static_cast<uint32_t>(options_.shard));
  internal::PutU32(&out, static_cast<uint32_t>(options_.num_shards));
  internal::PutU32(&out, options_.context);
  internal::PutU32(&out, options_.shuffle ? 1 : 0);
  internal::PutU64(&out, consumed_);
  internal::PutU64(&out, internal::Fnv1a(out));
  return out;
}

Status TokenReader::RestorePosition(std::string_view position) {
  if (position.size() != kPositionBytes || position.substr(0, 8) != kPositionMagic) {
    return InvalidArgument("not a token reader position (" + std::to_string(position.size()) +
                           " bytes; expected " + std::to_string(kPositionBytes) +
                           " starting with \"PXTRPOS1\")");
  }
  const char* p = position.data();
  if (internal::GetU64(p + kPositionBytes - 8) !=
      internal::Fnv1a(position.substr(0, kPositionBytes - 8))) {
    return InvalidArgument("token reader position is damaged (checksum mismatch)");
  }
  if (internal::GetU64(p + 8) != fingerprint_ || internal::GetU64(p + 24) != examples_) {
    return InvalidArgument(
        "token reader position was saved for a different token file (contents differ); "
        "resume with the data the checkpoint was trained on");
  }
  const uint64_t seed = internal::GetU64(p + 16);
  const uint32_t shard = internal::GetU32(p + 32), shards = internal::GetU32(p + 36);
  const uint32_t context = internal::GetU32(p + 40), shuffle = internal::GetU32(p + 44);
  if (seed != options_.seed || shuffle != (options_.shuffle ? 1u : 0u)) {
    return InvalidArgument("token reader position was saved with seed " + std::to_string(seed) +
                           (shuffle ? "" : " (no shuffle)") + "; this reader has seed " +
                           std::to_string(options_.seed) +
                           (options_.shuffle ? "" : " (no shuffle)"));
  }
  // A position of another shard count (a job resumed with another number
  // of workers) is converted (core/data/shard_position.h).
  if (shards != static_cast<uint32_t>(options_.num_shards) && shards > 0 &&
      context == options_.context) {
    consumed_ = ConsumedAfterReshard(internal::GetU64(p + 48), shards,
                                     static_cast<uint32_t>(options_.num_shards));
    return Status::Ok();
  }
  if (shard != static_cast<uint32_t>(options_.shard) ||
      shards != static_cast<uint32_t>(options_.num_shards)) {
    return InvalidArgument("token reader position belongs to shard " + std::to_string(shard) +
                           " of " + std::to_string(shards) + "; this reader is shard " +
                           std::to_string(options_.shard) + " of " +
                           std::to_string(options_.num_shards));
  }
  if (context != options_.context) {
    return InvalidArgument("token reader position was saved with context " +
                           std::to_string(context) + "; this reader has context " +
                           std::to_string(options_.context));
  }
  consumed_ = internal::GetU64(p + 48);
  return Status::Ok();
}

int64_t TokenReader::epoch() const {
  return static_cast<int64_t>((consumed_ * options_.num_shards + options_.shard) / examples_);
}

size_t TokenReader::examples_per_epoch() const { return examples_; }

}  // namespace parallax::data
