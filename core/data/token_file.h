// Binary token files: the training and held-out splits of a tokenized corpus.
//
// Layout (all little-endian): 8-byte magic "PXTOK001", uint64 count, then
// `count` uint32 token ids (indices into the corpus's vocab.tsv).
#ifndef PARALLAX_CORE_DATA_TOKEN_FILE_H_
#define PARALLAX_CORE_DATA_TOKEN_FILE_H_

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "parallax/status.h"

namespace parallax::data {

// Writes `tokens` to `path` atomically (a temporary file in the same directory,
// then rename), so a reader never sees a half-written file.
Status WriteTokenFile(const std::string& path, std::span<const uint32_t> tokens);

// Reads a whole token file. NOT_FOUND (saying which command creates the data)
// when the file is missing; INVALID_ARGUMENT when the magic is wrong or the
// size does not match the count (a truncated or foreign file).
StatusOr<std::vector<uint32_t>> ReadTokenFile(const std::string& path);

}  // namespace parallax::data

#endif  // PARALLAX_CORE_DATA_TOKEN_FILE_H_
