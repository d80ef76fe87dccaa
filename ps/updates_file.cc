#include "ps/updates_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>

namespace parallax::ps {
namespace {

constexpr char kMagic[8] = {'P', 'X', 'U', 'P', 'D', 'v', '1', '\n'};
constexpr size_t kSize = 16;

}  // namespace

StatusOr<std::unique_ptr<UpdatesFile>> UpdatesFile::Create(const std::string& path,
                                                           int64_t initial) {
  auto fail = [&](const std::string& what) {
    return IoError("updates file \"" + path + "\": " + what + ": " + strerror(errno));
  };
  const int fd = open(path.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return fail("cannot create it");
  if (ftruncate(fd, kSize) != 0) {
    close(fd);
    return fail("cannot size it");
  }
  void* map = mmap(nullptr, kSize, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);  // the mapping keeps the file
  if (map == MAP_FAILED) return fail("cannot map it");
  std::memcpy(map, kMagic, sizeof(kMagic));
  auto* count = reinterpret_cast<int64_t*>(static_cast<char*>(map) + sizeof(kMagic));
  std::unique_ptr<UpdatesFile> file(new UpdatesFile(map, count));
  file->Set(initial);
  return file;
}

UpdatesFile::~UpdatesFile() { munmap(map_, kSize); }

void UpdatesFile::Set(int64_t count) {
  std::atomic_ref<int64_t>(*count_).store(count, std::memory_order_relaxed);
}

int64_t UpdatesFile::Get() const {
  return std::atomic_ref<int64_t>(*count_).load(std::memory_order_relaxed);
}

StatusOr<int64_t> UpdatesFile::Read(const std::string& path) {
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT) return NotFound("no updates file \"" + path + "\"");
    return IoError("cannot open updates file \"" + path + "\": " + strerror(errno));
  }
  char buf[kSize];
  const ssize_t n = pread(fd, buf, kSize, 0);
  close(fd);
  if (n != static_cast<ssize_t>(kSize) || std::memcmp(buf, kMagic, sizeof(kMagic)) != 0) {
    return InvalidArgument("\"" + path + "\" is not a PS shard's updates file");
  }
  int64_t count = 0;
  std::memcpy(&count, buf + sizeof(kMagic), sizeof(count));
  return count;
}

}  // namespace parallax::ps
