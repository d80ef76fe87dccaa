#include "core/ps/shm_region.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <random>

#include "core/base/logging.h"

namespace parallax::ps {
namespace {

constexpr char kPrefix[] = "/px-ps-";
constexpr size_t kMinBytes = 4096;
constexpr uint64_t kAlign = 64;

std::string Errno(int e) { return std::strerror(e); }

}  // namespace

ShmRegion::~ShmRegion() {
  Unlink();
  if (data_ != nullptr) munmap(data_, size_);
}

std::string ShmRegion::NewName() {
  static std::atomic<uint64_t> counter{0};
  std::random_device rd;
  const uint64_t random = (uint64_t{rd()} << 32) ^ rd();
  return std::string(kPrefix) + std::to_string(getpid()) + "-" + std::to_string(counter.fetch_add(1)) +
         "-" + std::to_string(random);
}

StatusOr<std::unique_ptr<ShmRegion>> ShmRegion::Create(const std::string& name, size_t bytes) {
  if (bytes < kMinBytes)
    return InvalidArgument("shared memory region \"" + name + "\": " + std::to_string(bytes) +
                           " bytes is under the minimum of 4096");
  if (name.size() >= kHeaderBytes)
    return InvalidArgument("shared memory name \"" + name + "\" is longer than " +
                           std::to_string(kHeaderBytes - 1) + " bytes");
  const int fd = shm_open(name.c_str(), O_RDWR | O_CREAT | O_EXCL, 0600);
  if (fd < 0)
    return Unavailable("cannot create shared memory \"" + name + "\": " + Errno(errno));
  auto fail = [&](const std::string& what, int e) {
    close(fd);
    shm_unlink(name.c_str());
    return Unavailable("shared memory \"" + name + "\" of " + std::to_string(bytes) + " bytes: " +
                       what + ": " + Errno(e) + " (is /dev/shm full or small?)");
  };
  if (ftruncate(fd, static_cast<off_t>(bytes)) != 0) return fail("ftruncate", errno);
  if (const int e = posix_fallocate(fd, 0, static_cast<off_t>(bytes)); e != 0)
    return fail("posix_fallocate", e);
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) return fail("mmap", errno);
  close(fd);
  std::memcpy(p, name.c_str(), name.size() + 1);
  return std::unique_ptr<ShmRegion>(new ShmRegion(name, static_cast<char*>(p), bytes, true));
}

StatusOr<std::unique_ptr<ShmRegion>> ShmRegion::Attach(const std::string& name, size_t max_bytes) {
  if (name.rfind(kPrefix, 0) != 0 || name.find('/', 1) != std::string::npos || name.size() > 200)
    return InvalidArgument("\"" + name + "\" is not a Parallax shared memory name (\"" +
                           std::string(kPrefix) + "...\", no other '/', at most 200 bytes)");
  const int fd = shm_open(name.c_str(), O_RDWR, 0);
  if (fd < 0) return Unavailable("cannot open shared memory \"" + name + "\": " + Errno(errno));
  struct stat st {};
  if (fstat(fd, &st) != 0) {
    const int e = errno;
    close(fd);
    return Unavailable("cannot stat shared memory \"" + name + "\": " + Errno(e));
  }
  const auto bytes = static_cast<uint64_t>(st.st_size);
  if (bytes < kMinBytes || bytes > max_bytes) {
    close(fd);
    return InvalidArgument("shared memory \"" + name + "\" has " + std::to_string(bytes) +
                           " bytes; this shard maps 4096.." + std::to_string(max_bytes));
  }
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  const int e = errno;
  close(fd);
  if (p == MAP_FAILED) return Unavailable("cannot map shared memory \"" + name + "\": " + Errno(e));
  auto region = std::unique_ptr<ShmRegion>(new ShmRegion(name, static_cast<char*>(p), bytes, false));
  if (std::memcmp(region->data(), name.c_str(), name.size() + 1) != 0)
    return InvalidArgument("shared memory \"" + name +
                           "\" does not start with its name: not the region the worker made (is the "
                           "worker on another machine or in another IPC namespace?)");
  return region;
}

void ShmRegion::Unlink() {
  if (!linked_) return;
  linked_ = false;
  if (shm_unlink(name_.c_str()) != 0 && errno != ENOENT)
    PX_LOG(WARNING) << "cannot remove shared memory \"" << name_ << "\": " << Errno(errno);
}

ShmArena::ShmArena(uint64_t begin, uint64_t end) {
  begin = (begin + kAlign - 1) / kAlign * kAlign;
  end = end / kAlign * kAlign;
  if (end > begin) free_.emplace(begin, end - begin);
}

std::optional<uint64_t> ShmArena::Allocate(size_t bytes) {
  if (bytes == 0) return std::nullopt;
  const uint64_t want = (uint64_t{bytes} + kAlign - 1) / kAlign * kAlign;
  for (auto it = free_.begin(); it != free_.end(); ++it) {
    if (it->second < want) continue;
    const uint64_t offset = it->first;
    const uint64_t left = it->second - want;
    free_.erase(it);
    if (left > 0) free_.emplace(offset + want, left);
    used_.emplace(offset, want);
    return offset;
  }
  return std::nullopt;
}

void ShmArena::Free(uint64_t offset) {
  auto u = used_.find(offset);
  PX_CHECK(u != used_.end()) << "ShmArena::Free of " << offset << ", which is not allocated";
  uint64_t start = offset;
  uint64_t size = u->second;
  used_.erase(u);
  auto next = free_.lower_bound(start);
  if (next != free_.end() && next->first == start + size) {
    size += next->second;
    next = free_.erase(next);
  }
  if (next != free_.begin()) {
    auto prev = std::prev(next);
    if (prev->first + prev->second == start) {
      start = prev->first;
      size += prev->second;
      free_.erase(prev);
    }
  }
  free_.emplace(start, size);
}

size_t ShmArena::free_bytes() const {
  size_t n = 0;
  for (const auto& [offset, size] : free_) n += size;
  return n;
}

}  // namespace parallax::ps
