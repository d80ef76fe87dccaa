#include "core/checkpoint/rank_files.h"

#include <cstring>

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

// Reads what Writer wrote; every read is bounds-checked.
class Reader {
 public:
  Reader(std::string_view data, const std::string& source) : data_(data), source_(source) {}
  template <typename T>
  Status Get(T* v) {
    if (data_.size() - at_ < sizeof(T)) return Truncated();
    std::memcpy(v, data_.data() + at_, sizeof(T));
    at_ += sizeof(T);
    return Status::Ok();
  }
  Status GetBytes(std::string* s) {
    uint64_t n = 0;
    PX_RETURN_IF_ERROR(Get(&n));
    if (n > data_.size() - at_) return Truncated();
    s->assign(data_.data() + at_, n);
    at_ += n;
    return Status::Ok();
  }
  // With a null `v`, checks the vector's length and steps over it.
  template <typename T>
  Status GetVector(std::vector<T>* v) {
    uint64_t n = 0;
    PX_RETURN_IF_ERROR(Get(&n));
    if (n > (data_.size() - at_) / sizeof(T)) return Truncated();
    if (v != nullptr) {
      v->resize(n);
      std::memcpy(v->data(), data_.data() + at_, n * sizeof(T));
    }
    at_ += n * sizeof(T);
    return Status::Ok();
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
    if (at_ != data_.size())
      return FailedPrecondition("\"" + source_ + "\" has trailing bytes: it is corrupt");
    return Status::Ok();
  }

 private:
  Status Truncated() const {
    return FailedPrecondition("\"" + source_ + "\" is truncated or corrupt");
  }
  std::string_view data_;
  const std::string& source_;
  size_t at_ = 0;
};

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

StatusOr<std::vector<DenseEntry>> DecodeDenseFile(
    std::string_view data, const std::string& source,
    const std::function<bool(uint32_t id, std::string_view name)>& keep) {
  Reader r(data, source);
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
