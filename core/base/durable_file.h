// Files that survive a crash whole or not at all, and their SHA-256 digests
// (checkpoints, docs/RELIABILITY.md).
#ifndef PARALLAX_CORE_BASE_DURABLE_FILE_H_
#define PARALLAX_CORE_BASE_DURABLE_FILE_H_

#include <string>
#include <string_view>

#include "parallax/status.h"

namespace parallax {

// Writes `data` to `path` through a temporary file in the same directory,
// fsync, rename() and an fsync of the directory: after a crash `path` holds
// either its old content or all of `data`. IO_ERROR naming the file.
Status WriteFileDurably(const std::string& path, std::string_view data);

// Creates `dir` and its missing parents. IO_ERROR naming the directory.
Status MakeDirectories(const std::string& dir);

// Lowercase hex SHA-256 of `data`.
std::string Sha256Hex(std::string_view data);
// SHA-256 of the file at `path`, read in chunks. IO_ERROR naming it.
StatusOr<std::string> Sha256OfFile(const std::string& path);

// The whole file. IO_ERROR naming it.
StatusOr<std::string> ReadWholeFile(const std::string& path);

}  // namespace parallax

#endif  // PARALLAX_CORE_BASE_DURABLE_FILE_H_
