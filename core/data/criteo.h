// CriteoReader: click-through-rate examples in the Criteo display-ads format.
//
// Each line: label \t 13 integer features \t 26 categorical features (hex
// strings); an empty field is a missing value.
#ifndef PARALLAX_CORE_DATA_CRITEO_H_
#define PARALLAX_CORE_DATA_CRITEO_H_

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "parallax/status.h"

namespace parallax::data {

constexpr int kCriteoDense = 13, kCriteoCategorical = 26;

struct CriteoReaderOptions {
  int shard = 0, num_shards = 1;
  // 26 entries; categorical id = (parsed hex value) mod table size; missing -> 0
  std::vector<int64_t> table_sizes;
  // Keep each categorical value's 64 bits as its id (an int64 with those
  // bits: a dynamic table's id) instead; table_sizes is then not used.
  bool raw_ids = false;
};

struct CtrBatch {
  std::vector<float> labels;         // batch
  std::vector<float> dense;          // batch × 13, log(1 + max(x, 0)); missing -> 0
  std::vector<int64_t> categorical;  // batch × 26 row ids, each < its table size (raw_ids: any)
};

// Not thread-safe: one reader per rank.
class CriteoReader {
 public:
  // Loads the file (line i belongs to shard i % num_shards — same interleaving rule as
  // TokenReader), INVALID_ARGUMENT naming file:line for a malformed line.
  // NOT_FOUND (saying which command creates the data) when the file is missing;
  // INVALID_ARGUMENT for bad options or a shard with no example.
  static StatusOr<std::unique_ptr<CriteoReader>> Open(const std::string& path,
                                                      const CriteoReaderOptions& options);
  ~CriteoReader();
  CriteoReader(const CriteoReader&) = delete;
  CriteoReader& operator=(const CriteoReader&) = delete;

  void Next(size_t batch_size, CtrBatch* out);  // in file order, wraps
  size_t size() const;                          // examples of this shard
  // Opaque bytes (epoch, offset, shard and file check) for a checkpoint.
  std::string SavePosition() const;
  // INVALID_ARGUMENT for foreign/corrupt bytes; the position is then unchanged.
  Status RestorePosition(std::string_view position);

 private:
  CriteoReader() = default;

  // Constant after Open.
  int shard_ = 0, num_shards_ = 1;
  uint64_t fingerprint_ = 0;           // of the parsed examples
  std::vector<float> labels_;          // size()
  std::vector<float> dense_;           // size() × 13
  std::vector<uint64_t> categorical_;  // size() × 26

  uint64_t consumed_ = 0;  // examples of this shard handed out
};

}  // namespace parallax::data

#endif  // PARALLAX_CORE_DATA_CRITEO_H_
