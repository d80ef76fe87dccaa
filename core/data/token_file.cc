#include "core/data/token_file.h"

#include <cerrno>
#include <cstring>
#include <fstream>

#include "core/base/daemon.h"
#include "core/data/bytes.h"

namespace parallax::data {
namespace {

constexpr std::string_view kMagic = "PXTOK001";
constexpr size_t kHeaderBytes = 16;

}  // namespace

Status WriteTokenFile(const std::string& path, std::span<const uint32_t> tokens) {
  std::string bytes(kMagic);
  bytes.reserve(kHeaderBytes + 4 * tokens.size());
  internal::PutU64(&bytes, tokens.size());
  for (uint32_t t : tokens) internal::PutU32(&bytes, t);
  return WriteFileAtomically(path, bytes);
}

StatusOr<std::vector<uint32_t>> ReadTokenFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    if (errno == ENOENT) {
      return NotFound("token file '" + path +
                      "' does not exist; run scripts/fetch-data to download the Brown corpus "
                      "and write data/brown/");
    }
    return IoError("cannot open token file '" + path + "': " + std::strerror(errno));
  }
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (in.bad()) return IoError("cannot read token file '" + path + "': " + std::strerror(errno));
  if (bytes.size() < kHeaderBytes || std::string_view(bytes).substr(0, 8) != kMagic) {
    return InvalidArgument("'" + path + "' is not a Parallax token file (no \"PXTOK001\" header); " +
                           "recreate it with scripts/fetch-data --force");
  }
  const uint64_t count = internal::GetU64(bytes.data() + 8);
  const uint64_t payload = bytes.size() - kHeaderBytes;
  if (count > payload / 4 || payload != 4 * count) {
    return InvalidArgument("token file '" + path + "' is truncated or damaged: header says " +
                           std::to_string(count) + " tokens, file holds " +
                           std::to_string(payload) + " bytes of ids (expected " +
                           std::to_string(count) + " x 4); recreate it with " +
                           "scripts/fetch-data --force");
  }
  std::vector<uint32_t> tokens(count);
  const char* p = bytes.data() + kHeaderBytes;
  for (uint64_t i = 0; i < count; ++i) tokens[i] = internal::GetU32(p + 4 * i);
  return tokens;
}

}  // namespace parallax::data
