#include "core/ps/partition_file.h"

#include <sys/stat.h>

#include <cerrno>
#include <cstring>

#include "core/optim/optimizer.h"

namespace parallax::ps {

uint64_t Fnv1a64(const char* p, size_t n, uint64_t h) {
  for (size_t i = 0; i < n; ++i) {
    h ^= static_cast<unsigned char>(p[i]);
    h *= 0x100000001b3ULL;
  }
  return h;
}

std::string PartitionFileName(uint32_t var, uint32_t partition) {
  return "var" + std::to_string(var) + "-part" + std::to_string(partition) + ".pxps";
}

PartitionFileReader::~PartitionFileReader() {
  if (file_) std::fclose(file_);
}

StatusOr<std::unique_ptr<PartitionFileReader>> PartitionFileReader::Open(const std::string& path,
                                                                         bool verify) {
  std::unique_ptr<PartitionFileReader> r(new PartitionFileReader());
  r->path_ = path;
  r->file_ = std::fopen(path.c_str(), "rb");
  if (!r->file_) {
    return IoError("PS checkpoint file \"" + path + "\" cannot be read: " + std::strerror(errno));
  }
  struct stat st;
  if (::fstat(::fileno(r->file_), &st) != 0)
    return IoError("cannot stat \"" + path + "\": " + std::strerror(errno));
  const uint64_t size = static_cast<uint64_t>(st.st_size);
  auto bad = [&](const std::string& what) {
    return FailedPrecondition("PS checkpoint file \"" + path + "\" " + what);
  };
  if (size < sizeof(PartitionFileHeader) + 8) return bad("is truncated");
  if (verify) {
    std::vector<char> buf(1 << 20);
    uint64_t h = 0xcbf29ce484222325ULL, left = size - 8;
    while (left > 0) {
      const size_t n = std::fread(buf.data(), 1, std::min<uint64_t>(left, buf.size()), r->file_);
      if (n == 0) return IoError("cannot read \"" + path + "\"");
      h = Fnv1a64(buf.data(), n, h);
      left -= n;
    }
    uint64_t sum = 0;
    if (std::fread(&sum, 8, 1, r->file_) != 1) return IoError("cannot read \"" + path + "\"");
    if (sum != h) return bad("fails its checksum: it is corrupt or was not completely written");
    std::rewind(r->file_);
  }
  if (std::fread(&r->header_, sizeof r->header_, 1, r->file_) != 1)
    return IoError("cannot read \"" + path + "\"");
  const PartitionFileHeader& fh = r->header_;
  if (fh.magic != kPartitionFileMagic || fh.format != kPartitionFileFormat)
    return bad("is not a PS checkpoint of format 1");
  if (fh.dim == 0 || fh.optimizer > static_cast<uint32_t>(OptimizerType::kAdam))
    return bad("has a malformed header");
  const auto type = static_cast<OptimizerType>(fh.optimizer);
  r->slots_ = optim::StateSlots(type);
  r->adam_ = type == OptimizerType::kAdam;
  r->row_bytes_ = 8 + size_t{fh.dim} * 4 * (1 + static_cast<size_t>(r->slots_)) + (r->adam_ ? 8 : 0);
  if (fh.count > (size - sizeof fh - 8) / r->row_bytes_ ||
      sizeof fh + fh.count * r->row_bytes_ + 8 != size)
    return bad("does not hold the " + std::to_string(fh.count) + " rows its header announces");
  return r;
}

Status PartitionFileReader::Next(size_t max_rows, std::vector<int64_t>* ids,
                                 std::vector<float>* weights) {
  return NextWithState(max_rows, ids, weights, nullptr, nullptr, nullptr);
}

Status PartitionFileReader::NextWithState(size_t max_rows, std::vector<int64_t>* ids,
                                          std::vector<float>* weights, std::vector<float>* s1,
                                          std::vector<float>* s2, std::vector<int64_t>* steps) {
  const size_t n = static_cast<size_t>(std::min<uint64_t>(max_rows, header_.count - read_));
  const size_t dim = header_.dim;
  ids->resize(n);
  weights->resize(n * dim);
  std::vector<float>* slot_out[2] = {s1, s2};
  for (int k = 0; k < 2; ++k) {
    if (slot_out[k] != nullptr) slot_out[k]->resize(k < slots_ ? n * dim : 0);
  }
  if (steps != nullptr) steps->resize(adam_ ? n : 0);
  std::vector<char> row(row_bytes_);
  for (size_t i = 0; i < n; ++i) {
    if (std::fread(row.data(), 1, row_bytes_, file_) != row_bytes_)
      return IoError("cannot read \"" + path_ + "\" (row " + std::to_string(read_ + i) + ")");
    std::memcpy(&(*ids)[i], row.data(), 8);
    if ((*ids)[i] < 0 || (*ids)[i] >= header_.rows) {
      return FailedPrecondition("PS checkpoint file \"" + path_ + "\" holds row id " +
                                std::to_string((*ids)[i]) + " outside 0.." +
                                std::to_string(header_.rows - 1));
    }
    std::memcpy(weights->data() + i * dim, row.data() + 8, dim * 4);
    const char* state = row.data() + 8 + dim * 4;
    for (int k = 0; k < slots_; ++k) {
      if (slot_out[k] != nullptr) std::memcpy(slot_out[k]->data() + i * dim, state + k * dim * 4, dim * 4);
    }
    if (adam_ && steps != nullptr) std::memcpy(&(*steps)[i], state + slots_ * dim * 4, 8);
  }
  read_ += n;
  return Status::Ok();
}

}  // namespace parallax::ps
