#include "core/data/criteo.h"

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstring>
#include <fstream>

#include "core/data/bytes.h"
#include "core/data/shard_position.h"

namespace parallax::data {
namespace {

constexpr std::string_view kPositionMagic = "PXCRPOS1";
// magic, fingerprint, size, shard, num_shards, consumed, checksum.
constexpr size_t kPositionBytes = 8 + 8 + 8 + 4 + 4 + 8 + 8;
constexpr int kFields = 1 + kCriteoDense + kCriteoCategorical;

std::string FieldName(int field) {
  if (field == 0) return "label";
  if (field <= kCriteoDense) return "I" + std::to_string(field);
  return "C" + std::to_string(field - kCriteoDense);
}

Status CheckOptions(const CriteoReaderOptions& options) {
  if (options.num_shards < 1 || options.shard < 0 || options.shard >= options.num_shards) {
    return InvalidArgument("Criteo reader shard " + std::to_string(options.shard) + " of " +
                           std::to_string(options.num_shards) +
                           " is out of range (need 0 <= shard < num_shards)");
  }
  if (options.raw_ids) return Status::Ok();
  if (options.table_sizes.size() != kCriteoCategorical) {
    return InvalidArgument(
        "Criteo reader needs 26 table sizes (one per categorical feature), got " +
        std::to_string(options.table_sizes.size()));
  }
  for (size_t f = 0; f < options.table_sizes.size(); ++f) {
    const int64_t size = options.table_sizes[f];
    if (size < 1 || size > (int64_t{1} << 32)) {
      return InvalidArgument("table size of C" + std::to_string(f + 1) + " is " +
                             std::to_string(size) + "; it must be in [1, 2^32]");
    }
  }
  return Status::Ok();
}

// The fields of one line (a trailing CR dropped); INVALID_ARGUMENT at
// `where` unless there are exactly kFields.
Status SplitFields(std::string_view line, const std::string& where,
                   std::string_view (&fields)[kFields]) {
  if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
  int n = 0;
  while (true) {
    const size_t tab = line.find('\t');
    if (n < kFields) fields[n] = line.substr(0, tab);
    ++n;
    if (tab == std::string_view::npos) break;
    line.remove_prefix(tab + 1);
  }
  if (n == kFields) return Status::Ok();
  return InvalidArgument(where + "expected 40 tab-separated fields (label, 13 integer, 26 hex " +
                         "categorical), got " + std::to_string(n) +
                         (n == kFields - 1 ? " (a file without labels?)" : ""));
}

// One example: its label, log1p of its 13 counts, and its 26 hashed ids
// (each modulo its table's size, or whole with raw_ids), appended to the
// three arrays.
Status ParseExample(std::string_view line, const std::string& where,
                    const CriteoReaderOptions& options, std::vector<float>* labels,
                    std::vector<float>* dense, std::vector<uint64_t>* categorical) {
  std::string_view fields[kFields];
  PX_RETURN_IF_ERROR(SplitFields(line, where, fields));
  if (fields[0] != "0" && fields[0] != "1") {
    return InvalidArgument(where + "label \"" + std::string(fields[0].substr(0, 40)) +
                           "\" is not 0 or 1");
  }
  labels->push_back(fields[0] == "1" ? 1.0f : 0.0f);
  for (int d = 1; d <= kCriteoDense; ++d) {
    const std::string_view f = fields[d];
    float value = 0.0f;
    if (!f.empty()) {
      int64_t x = 0;
      auto [end, ec] = std::from_chars(f.data(), f.data() + f.size(), x);
      if (ec != std::errc() || end != f.data() + f.size()) {
        return InvalidArgument(where + "field " + std::to_string(d + 1) + " (" + FieldName(d) +
                               ") \"" + std::string(f.substr(0, 40)) + "\" is not an integer");
      }
      value = static_cast<float>(std::log1p(static_cast<double>(x > 0 ? x : 0)));
    }
    dense->push_back(value);
  }
  for (int c = 0; c < kCriteoCategorical; ++c) {
    const int field = 1 + kCriteoDense + c;
    const std::string_view f = fields[field];
    uint64_t id = 0;
    if (!f.empty()) {
      uint64_t x = 0;
      auto [end, ec] = std::from_chars(f.data(), f.data() + f.size(), x, 16);
      if (ec != std::errc() || end != f.data() + f.size()) {
        return InvalidArgument(where + "field " + std::to_string(field + 1) + " (" +
                               FieldName(field) + ") \"" + std::string(f.substr(0, 40)) +
                               "\" is not a hex value of at most 64 bits");
      }
      id = options.raw_ids ? x : x % static_cast<uint64_t>(options.table_sizes[c]);
    }
    categorical->push_back(id);
  }
  return Status::Ok();
}

}  // namespace

StatusOr<std::unique_ptr<CriteoReader>> CriteoReader::Open(const std::string& path,
                                                           const CriteoReaderOptions& options) {
  PX_RETURN_IF_ERROR(CheckOptions(options));
  std::ifstream in(path);
  if (!in) {
    if (errno == ENOENT) {
      return NotFound("Criteo file '" + path +
                      "' does not exist; run scripts/fetch-data --synthetic-ctr to write "
                      "data/ctr/");
    }
    return IoError("cannot open Criteo file '" + path + "': " + std::strerror(errno));
  }
  std::unique_ptr<CriteoReader> reader(new CriteoReader());
  reader->shard_ = options.shard;
  reader->num_shards_ = options.num_shards;
  std::string line;
  uint64_t line_no = 0;
  while (std::getline(in, line)) {
    ++line_no;
    if ((line_no - 1) % options.num_shards != static_cast<uint64_t>(options.shard)) continue;
    PX_RETURN_IF_ERROR(ParseExample(line, path + ":" + std::to_string(line_no) + ": ",
                                    options, &reader->labels_, &reader->dense_,
                                    &reader->categorical_));
  }
  if (in.bad()) return IoError("cannot read Criteo file '" + path + "': " + std::strerror(errno));
  if (reader->labels_.empty()) {
    return InvalidArgument(
        "Criteo file '" + path + "' has no example for shard " + std::to_string(options.shard) +
        " of " + std::to_string(options.num_shards) + " (" + std::to_string(line_no) + " lines)");
  }
  auto bytes = [](const auto& v) {
    return std::string_view(reinterpret_cast<const char*>(v.data()), sizeof(v[0]) * v.size());
  };
  reader->fingerprint_ = internal::Fnv1a(
      bytes(reader->categorical_),
      internal::Fnv1a(bytes(reader->dense_), internal::Fnv1a(bytes(reader->labels_))));
  return reader;
}

CriteoReader::~CriteoReader() = default;

void CriteoReader::Next(size_t batch_size, CtrBatch* out) {
  out->labels.resize(batch_size);
  out->dense.resize(batch_size * kCriteoDense);
  out->categorical.resize(batch_size * kCriteoCategorical);
  const size_t n = labels_.size();
  for (size_t j = 0; j < batch_size; ++j, ++consumed_) {
    const size_t i = consumed_ % n;
    out->labels[j] = labels_[i];
    std::copy_n(dense_.begin() + i * kCriteoDense, kCriteoDense,
                out->dense.begin() + j * kCriteoDense);
    // A raw 64-bit value becomes the int64 of the same bits.
    std::transform(categorical_.begin() + i * kCriteoCategorical,
                   categorical_.begin() + (i + 1) * kCriteoCategorical,
                   out->categorical.begin() + j * kCriteoCategorical,
                   [](uint64_t id) { return static_cast<int64_t>(id); });
  }
}

size_t CriteoReader::size() const { return labels_.size(); }

std::string CriteoReader::SavePosition() const {
  std::string out(kPositionMagic);
  internal::PutU64(&out, fingerprint_);
  internal::PutU64(&out, labels_.size());
  internal::PutU32(&out, static_cast<uint32_t>(shard_));
  internal::PutU32(&out, static_cast<uint32_t>(num_shards_));
  internal::PutU64(&out, consumed_);
  internal::PutU64(&out, internal::Fnv1a(out));
  return out;
}

Status CriteoReader::RestorePosition(std::string_view position) {
  if (position.size() != kPositionBytes || position.substr(0, 8) != kPositionMagic) {
    return InvalidArgument("not a Criteo reader position (" + std::to_string(position.size()) +
                           " bytes; expected " + std::to_string(kPositionBytes) +
                           " starting with \"PXCRPOS1\")");
  }
  const char* p = position.data();
  if (internal::GetU64(p + kPositionBytes - 8) !=
      internal::Fnv1a(position.substr(0, kPositionBytes - 8))) {
    return InvalidArgument("Criteo reader position is damaged (checksum mismatch)");
  }
  const uint32_t shard = internal::GetU32(p + 24), shards = internal::GetU32(p + 28);
  // Another shard count (a job resumed with another number of workers): the
  // position is converted (core/data/shard_position.h).
  const bool reshard = shards != static_cast<uint32_t>(num_shards_) && shards > 0;
  if (!reshard &&
      (shard != static_cast<uint32_t>(shard_) || shards != static_cast<uint32_t>(num_shards_))) {
    return InvalidArgument("Criteo reader position belongs to shard " + std::to_string(shard) +
                           " of " + std::to_string(shards) + "; this reader is shard " +
                           std::to_string(shard_) + " of " + std::to_string(num_shards_));
  }
  if (reshard) {
    // The fingerprint covers one shard's examples, so it cannot be checked
    // across shard counts.
    consumed_ = ConsumedAfterReshard(internal::GetU64(p + 32), shards,
                                     static_cast<uint32_t>(num_shards_));
    return Status::Ok();
  }
  if (internal::GetU64(p + 8) != fingerprint_ || internal::GetU64(p + 16) != labels_.size()) {
    return InvalidArgument(
        "Criteo reader position was saved for a different file or table sizes; resume with the "
        "data and [model] settings the checkpoint was trained on");
  }
  consumed_ = internal::GetU64(p + 32);
  return Status::Ok();
}

}  // namespace parallax::data
