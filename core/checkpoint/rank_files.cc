#include "core/checkpoint/rank_files.h"

#include <cerrno>
#include <cstring>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

namespace parallax::checkpoint {
namespace {

constexpr uint32_t kDenseMagic = 0x4e445850;  // "PXDN"
constexpr uint32_t kRankMagic = 0x53525850;   // "PXRS"
constexpr uint32_t kFormat = 1;

class Writer {
 public:
  template <typename T>
  void Put(const T& v) {
    out_.append(reinterpret_cast<const char*>(&v), sizeof v);
  }
  void PutBytes(std::string_view s) {
    Put<uint64_t>(s.size());
    out_.append(s);
  }
  template <typename T>
  void PutVector(const std::vector<T>& v) {
    Put<uint64_t>(v.size());
    out_.append(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(T));
  }
  std::string Take() { return std::move(out_); }

 private:
  std::string out_;
};

// Reads what Writer wrote, from memory or from an open file (read piece by
// piece, so a caller that keeps part of a large file never holds the rest);
// every read is bounds-checked against the data's size.
class Reader {
 public:
  Reader(std::string_view data, const std::string& source)
      : data_(data), size_(data.size()), source_(source) {}
  Reader(int fd, uint64_t size, const std::string& source) : fd_(fd), size_(size), source_(source) {}
  template <typename T>
  Status Get(T* v) {
    if (size_ - at_ < sizeof(T)) return Truncated();
    return Copy(v, sizeof(T));
  }
  Status GetBytes(std::string* s) {
    uint64_t n = 0;
    PX_RETURN_IF_ERROR(Get(&n));
    if (n > size_ - at_) return Truncated();
    s->resize(n);
    return Copy(s->data(), n);
  }
  // With a null `v`, checks the vector's length and steps over it.
  template <typename T>
  Status GetVector(std::vector<T>* v) {
    uint64_t n = 0;
    PX_RETURN_IF_ERROR(Get(&n));
    if (n > (size_ - at_) / sizeof(T)) return Truncated();
    if (v == nullptr) {
      at_ += n * sizeof(T);
      return Status::Ok();
    }
    v->resize(n);
    return Copy(v->data(), n * sizeof(T));
  }
  Status Header(uint32_t magic, const char* what) {
    uint32_t m = 0, f = 0;
    PX_RETURN_IF_ERROR(Get(&m));
    PX_RETURN_IF_ERROR(Get(&f));
    if (m != magic || f != kFormat) {
      return FailedPrecondition("\"" + source_ + "\" is not a " + what + " of format 1");
    }
    return Status::Ok();
  }
  Status End() const {
    if (at_ != size_)
      return FailedPrecondition("\"" + source_ + "\" has trailing bytes: it is corrupt");
    return Status::Ok();
  }

 private:
  // The next n bytes (within the size, checked by the caller) into `out`.
  Status Copy(void* out, size_t n) {
    if (fd_ < 0) {
      if (n > 0) std::memcpy(out, data_.data() + at_, n);
      at_ += n;
      return Status::Ok();
    }
    auto* p = static_cast<char*>(out);
    while (n > 0) {
      const ssize_t got = ::pread(fd_, p, n, static_cast<off_t>(at_));
      if (got < 0 && errno == EINTR) continue;
      if (got < 0) return IoError("cannot read \"" + source_ + "\": " + std::strerror(errno));
      if (got == 0) return Truncated();  // shorter than when it was opened
      p += got;
      n -= static_cast<size_t>(got);
      at_ += static_cast<uint64_t>(got);
    }
    return Status::Ok();
  }
  Status Truncated() const {
    return FailedPrecondition("\"" + source_ + "\" is truncated or corrupt");
  }
  std::string_view data_;
  int fd_ = -1;
  uint64_t size_ = 0;
  const std::string& source_;
  uint64_t at_ = 0;
};

StatusOr<std::vector<DenseEntry>> DecodeDense(
    Reader& r, const std::function<bool(uint32_t id, std::string_view name)>& keep) {
  PX_RETURN_IF_ERROR(r.Header(kDenseMagic, "dense checkpoint file"));
  uint64_t n = 0;
  PX_RETURN_IF_ERROR(r.Get(&n));
  std::vector<DenseEntry> entries;
  for (uint64_t i = 0; i < n; ++i) {
    DenseEntry e;
    PX_RETURN_IF_ERROR(r.Get(&e.id));
    PX_RETURN_IF_ERROR(r.GetBytes(&e.name));
    const bool kept = !keep || keep(e.id, e.name);
    PX_RETURN_IF_ERROR(r.GetVector(kept ? &e.values : nullptr));
    PX_RETURN_IF_ERROR(r.GetVector(kept ? &e.optimizer.s1 : nullptr));
    PX_RETURN_IF_ERROR(r.GetVector(kept ? &e.optimizer.s2 : nullptr));
    PX_RETURN_IF_ERROR(r.GetVector(kept ? &e.optimizer.steps : nullptr));
    if (kept) entries.push_back(std::move(e));
  }
  PX_RETURN_IF_ERROR(r.End());
  return entries;
}

}  // namespace

std::string EncodeDenseFile(const std::vector<DenseEntry>& entries) {
  Writer w;
  w.Put(kDenseMagic);
  w.Put(kFormat);
  w.Put<uint64_t>(entries.size());
  for (const DenseEntry& e : entries) {
    w.Put(e.id);
    w.PutBytes(e.name);
    w.PutVector(e.values);
    w.PutVector(e.optimizer.s1);
    w.PutVector(e.optimizer.s2);
    w.PutVector(e.optimizer.steps);
  }
  return w.Take();
}

StatusOr<std::vector<DenseEntry>> DecodeDenseFile(std::string_view data, const std::string& source) {
  Reader r(data, source);
  return DecodeDense(r, nullptr);
}

StatusOr<std::vector<DenseEntry>> ReadDenseFile(
    const std::string& path, const std::function<bool(uint32_t id, std::string_view name)>& keep) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return IoError("cannot open \"" + path + "\": " + std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const int err = errno;
    ::close(fd);
    return IoError("cannot read \"" + path + "\": " + std::strerror(err));
  }
  Reader r(fd, static_cast<uint64_t>(st.st_size), path);
  StatusOr<std::vector<DenseEntry>> entries = DecodeDense(r, keep);
  ::close(fd);
  return entries;
}

std::string EncodeRankState(const std::map<std::string, std::string>& blobs) {
  Writer w;
  w.Put(kRankMagic);
  w.Put(kFormat);
  w.Put<uint64_t>(blobs.size());
  for (const auto& [name, bytes] : blobs) {
    w.PutBytes(name);
    w.PutBytes(bytes);
  }
  return w.Take();
}

StatusOr<std::map<std::string, std::string>> DecodeRankState(std::string_view data,
                                                             const std::string& source) {
  Reader r(data, source);
  PX_RETURN_IF_ERROR(r.Header(kRankMagic, "rank state file"));
  uint64_t n = 0;
  PX_RETURN_IF_ERROR(r.Get(&n));
  std::map<std::string, std::string> blobs;
  for (uint64_t i = 0; i < n; ++i) {
    std::string name, bytes;
    PX_RETURN_IF_ERROR(r.GetBytes(&name));
    PX_RETURN_IF_ERROR(r.GetBytes(&bytes));
    blobs[name] = std::move(bytes);
  }
  PX_RETURN_IF_ERROR(r.End());
  return blobs;
}

}  // namespace parallax::checkpoint
