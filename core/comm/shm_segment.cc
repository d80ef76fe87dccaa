#include "core/comm/shm_segment.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <random>

#include "core/base/format_bytes.h"
#include "core/base/logging.h"

namespace parallax::comm {
namespace {

constexpr char kPrefix[] = "px-comm-";

std::string Errno(int e) { return std::strerror(e); }

uint64_t Random64() {
  std::random_device rd;
  return (uint64_t{rd()} << 32) ^ rd();
}

std::string Hex(uint64_t v) {
  char buf[17];
  std::snprintf(buf, sizeof(buf), "%016llx", static_cast<unsigned long long>(v));
  return buf;
}

// Gives the unnamed file `fd` a fresh name in `directory`.
StatusOr<std::string> LinkWithFreshName(int fd, const std::string& directory) {
  const std::string proc = "/proc/self/fd/" + std::to_string(fd);
  for (int attempt = 0; attempt < 4; ++attempt) {
    std::string path = directory + "/" + kPrefix + Hex(Random64());
    if (linkat(AT_FDCWD, proc.c_str(), AT_FDCWD, path.c_str(), AT_SYMLINK_FOLLOW) == 0) {
      return path;
    }
    if (errno != EEXIST) {
      return Unavailable("cannot name a shared-memory file in \"" + directory +
                         "\": " + Errno(errno));
    }
  }
  return Unavailable("cannot find a free shared-memory file name in \"" + directory + "\"");
}

}  // namespace

ShmSegment::~ShmSegment() {
  Unlink();
  if (data_ != nullptr) munmap(data_, size_);
}

uint64_t ShmSegment::nonce() const {
  uint64_t n;
  std::memcpy(&n, data_, sizeof(n));
  return n;
}

StatusOr<std::unique_ptr<ShmSegment>> ShmSegment::Create(const std::string& directory,
                                                         size_t bytes) {
  const std::string what = "shared memory of " + FormatBytes(bytes) + " in \"" + directory + "\"";
  const int fd = open(directory.c_str(), O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
  if (fd < 0) return Unavailable(what + ": cannot create a file: " + Errno(errno));
  auto fail = [&](const std::string& why) {
    close(fd);
    return Unavailable(what + ": " + why);
  };
  // Held until Unlink(): a named file nobody has locked is stale.
  if (flock(fd, LOCK_SH) != 0) return fail("flock: " + Errno(errno));
  struct statvfs vfs {};
  if (fstatvfs(fd, &vfs) == 0) {
    const uint64_t free_bytes = uint64_t{vfs.f_bavail} * vfs.f_frsize;
    if (free_bytes < bytes) {
      return fail("only " + FormatBytes(free_bytes) + " free there (a container's /dev/shm is " +
                  "often 64 MiB; give it more, e.g. docker --shm-size)");
    }
  }
  if (ftruncate(fd, static_cast<off_t>(bytes)) != 0) return fail("ftruncate: " + Errno(errno));
  if (const int e = posix_fallocate(fd, 0, static_cast<off_t>(bytes)); e != 0) {
    return fail("cannot reserve it: " + Errno(e));
  }
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, 0);
  if (p == MAP_FAILED) return fail("mmap: " + Errno(errno));
  const uint64_t nonce = Random64();
  std::memcpy(p, &nonce, sizeof(nonce));
  StatusOr<std::string> path = LinkWithFreshName(fd, directory);
  if (!path.ok()) {
    munmap(p, bytes);
    return fail(path.status().message());
  }
  return std::unique_ptr<ShmSegment>(
      new ShmSegment(std::move(path).value(), static_cast<char*>(p), bytes, fd));
}

StatusOr<std::unique_ptr<ShmSegment>> ShmSegment::Attach(const std::string& path, size_t bytes,
                                                         uint64_t nonce) {
  const int fd = open(path.c_str(), O_RDWR | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) return Unavailable("cannot open shared memory \"" + path + "\": " + Errno(errno));
  struct stat st {};
  if (fstat(fd, &st) != 0 || static_cast<uint64_t>(st.st_size) != bytes) {
    close(fd);
    return Unavailable("shared memory \"" + path + "\" is not the " + FormatBytes(bytes) +
                       " its creator made");
  }
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, 0);
  const int e = errno;
  close(fd);
  if (p == MAP_FAILED) return Unavailable("cannot map shared memory \"" + path + "\": " + Errno(e));
  auto segment =
      std::unique_ptr<ShmSegment>(new ShmSegment(path, static_cast<char*>(p), bytes, -1));
  if (segment->nonce() != nonce) {
    return Unavailable("shared memory \"" + path + "\" is not the file its creator made " +
                       "(another machine's, or another mount namespace's?)");
  }
  return segment;
}

int ShmSegment::RemoveStale(const std::string& directory) {
  DIR* dir = opendir(directory.c_str());
  if (dir == nullptr) return 0;
  int removed = 0;
  while (dirent* e = readdir(dir)) {
    if (std::strncmp(e->d_name, kPrefix, sizeof(kPrefix) - 1) != 0) continue;
    const std::string path = directory + "/" + e->d_name;
    const int fd = open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) continue;
    if (flock(fd, LOCK_EX | LOCK_NB) == 0 && unlink(path.c_str()) == 0) {
      PX_LOG(INFO) << "removed \"" << path << "\", left by a process that died setting up "
                   << "its collectives";
      ++removed;
    }
    close(fd);
  }
  closedir(dir);
  return removed;
}

void ShmSegment::Unlink() {
  if (lock_fd_ < 0) return;
  if (unlink(path_.c_str()) != 0 && errno != ENOENT) {
    PX_LOG(WARNING) << "cannot remove shared memory \"" << path_ << "\": " << Errno(errno);
  }
  close(lock_fd_);
  lock_fd_ = -1;
}

}  // namespace parallax::comm
