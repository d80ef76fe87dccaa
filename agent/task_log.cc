#include "agent/task_log.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>

namespace parallax::agent {
namespace {

namespace fs = std::filesystem;

std::string OffsetPath(const std::string& dir) { return dir + "/log_offset"; }

int64_t FileSize(const std::string& path) {
  struct stat st;
  if (stat(path.c_str(), &st) != 0) return -1;
  return static_cast<int64_t>(st.st_size);
}

Status WriteFileAtomically(const std::string& path, const std::string& text) {
  std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::trunc);
    out << text;
    if (!out) return IoError("cannot write '" + tmp + "'");
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    return IoError("cannot rename '" + tmp + "': " + strerror(errno));
  }
  return Status::Ok();
}

// Reads [start, start + length) of `path`.
StatusOr<std::string> ReadRange(const std::string& path, int64_t start, int64_t length) {
  std::string out;
  if (length <= 0) return out;
  int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT) return out;
    return IoError("cannot open '" + path + "': " + strerror(errno));
  }
  out.resize(static_cast<size_t>(length));
  size_t done = 0;
  while (done < out.size()) {
    ssize_t n = pread(fd, out.data() + done, out.size() - done, start + static_cast<off_t>(done));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;  // truncated under us: return what there is
    done += static_cast<size_t>(n);
  }
  close(fd);
  out.resize(done);
  return out;
}

}  // namespace

std::string TaskLogPath(const std::string& dir) { return dir + "/" + kTaskLogName; }

int64_t RotatedBytes(const std::string& dir) {
  std::ifstream in(OffsetPath(dir));
  int64_t value = 0;
  if (in >> value && value > 0) return value;
  return 0;
}

StatusOr<bool> RotateIfNeeded(const std::string& dir, int64_t max_bytes, int keep) {
  std::string log = TaskLogPath(dir);
  int64_t size = FileSize(log);
  if (size <= max_bytes || max_bytes <= 0) return false;
  std::error_code ec;
  auto numbered = [&](int k) { return log + "." + std::to_string(k); };
  fs::remove(numbered(keep), ec);
  for (int k = keep - 1; k >= 1; --k) {
    if (fs::exists(numbered(k), ec)) fs::rename(numbered(k), numbered(k + 1), ec);
  }
  // Copy exactly what we measure, so the offset accounting matches the copy.
  int in = open(log.c_str(), O_RDONLY | O_CLOEXEC);
  if (in < 0) return IoError("cannot open '" + log + "': " + strerror(errno));
  int out = open(numbered(1).c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (out < 0) {
    int err = errno;
    close(in);
    return IoError("cannot create '" + numbered(1) + "': " + strerror(err));
  }
  std::string buffer(1 << 16, '\0');
  int64_t copied = 0;
  while (copied < size) {
    ssize_t n = read(in, buffer.data(), static_cast<size_t>(std::min<int64_t>(
                                             static_cast<int64_t>(buffer.size()), size - copied)));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    if (write(out, buffer.data(), static_cast<size_t>(n)) != n) {
      int err = errno;
      close(in);
      close(out);
      return IoError("cannot write '" + numbered(1) + "': " + strerror(err));
    }
    copied += n;
  }
  close(in);
  close(out);
  // Record the new base before truncating: a crash in between leaves the
  // offsets pointing past the (still full) log rather than going backwards.
  PX_RETURN_IF_ERROR(WriteFileAtomically(OffsetPath(dir), std::to_string(RotatedBytes(dir) + copied) + "\n"));
  if (truncate(log.c_str(), 0) != 0) {
    return IoError("cannot truncate '" + log + "': " + strerror(errno));
  }
  return true;
}

StatusOr<rpc::LogChunk> ReadTaskLog(const std::string& dir, int64_t offset, int32_t max_bytes,
                                    bool ended) {
  if (max_bytes <= 0) {
    return InvalidArgument("max_bytes must be positive, got " + std::to_string(max_bytes));
  }
  if (offset < -1) return InvalidArgument("offset must be >= -1, got " + std::to_string(offset));
  max_bytes = std::min(max_bytes, kMaxReadBytes);
  std::string log = TaskLogPath(dir);
  int64_t base = RotatedBytes(dir);
  int64_t size = std::max<int64_t>(FileSize(log), 0);
  int64_t end = base + size;
  int64_t start = offset == -1 ? end - max_bytes : offset;
  start = std::clamp(start, base, end);
  int64_t length = std::min<int64_t>(max_bytes, end - start);
  PX_ASSIGN_OR_RETURN(std::string data, ReadRange(log, start - base, length));
  rpc::LogChunk chunk;
  chunk.first_offset = base;
  chunk.next_offset = start + static_cast<int64_t>(data.size());
  chunk.complete = ended && chunk.next_offset >= end;
  chunk.data = std::move(data);
  return chunk;
}

std::string TaskLogTail(const std::string& dir, int max_lines, int max_bytes) {
  std::string log = TaskLogPath(dir);
  int64_t size = FileSize(log);
  if (size <= 0) return "";
  int64_t start = std::max<int64_t>(0, size - max_bytes);
  StatusOr<std::string> text = ReadRange(log, start, size - start);
  if (!text.ok()) return "";
  std::string tail = std::move(text).value();
  while (!tail.empty() && tail.back() == '\n') tail.pop_back();
  // Keep the last max_lines lines; drop a partial first line when we cut.
  size_t pos = tail.size();
  int lines = 0;
  while (pos > 0) {
    size_t nl = tail.rfind('\n', pos - 1);
    if (nl == std::string::npos) {
      pos = start > 0 ? tail.find('\n') : std::string::npos;
      pos = pos == std::string::npos ? 0 : pos + 1;
      break;
    }
    if (++lines == max_lines) {
      pos = nl + 1;
      break;
    }
    pos = nl;
  }
  return tail.substr(pos);
}

}  // namespace parallax::agent
