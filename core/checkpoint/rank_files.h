// The binary files a trainer rank writes into a checkpoint (the layout of a
// checkpoint directory: trainer/checkpoint_files.h): dense.pxck, rank 0's
// worker-held variables with their optimizer state, and rank-<r>.state, a
// rank's RegisterState blobs. In core/ because a PS shard reads dense.pxck
// too: a variable a plan moved onto the PS since the checkpoint is there
// (ps/shard_core.h, LoadCheckpoint).
#ifndef PARALLAX_CORE_CHECKPOINT_RANK_FILES_H_
#define PARALLAX_CORE_CHECKPOINT_RANK_FILES_H_

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "core/optim/optimizer.h"
#include "parallax/status.h"

namespace parallax::checkpoint {

constexpr char kDenseFile[] = "dense.pxck";

// One worker-held variable in dense.pxck.
struct DenseEntry {
  uint32_t id = 0;
  std::string name;
  std::vector<float> values;
  optim::OptimizerState optimizer;
};

// dense.pxck: magic "PXDN", format 1, entries; written durably.
std::string EncodeDenseFile(const std::vector<DenseEntry>& entries);
// FAILED_PRECONDITION naming `source` when the bytes are malformed.
StatusOr<std::vector<DenseEntry>> DecodeDenseFile(std::string_view data, const std::string& source);
// The file at `path`, read piece by piece (what the ranks, a shard and
// `parallax export` use): memory holds the entries, never the whole file as
// well. With `keep`, only the entries it accepts; the others are checked as
// well but not read (a PS shard needs one or two variables of a file that
// may hold a whole model's dense weights and their optimizer state).
// FAILED_PRECONDITION naming it when it is malformed, IO_ERROR when it
// cannot be read.
StatusOr<std::vector<DenseEntry>> ReadDenseFile(
    const std::string& path,
    const std::function<bool(uint32_t id, std::string_view name)>& keep = nullptr);

// rank-<r>.state: magic "PXRS", format 1, (name, bytes) pairs.
std::string EncodeRankState(const std::map<std::string, std::string>& blobs);
StatusOr<std::map<std::string, std::string>> DecodeRankState(std::string_view data,
                                                             const std::string& source);

}  // namespace parallax::checkpoint

#endif  // PARALLAX_CORE_CHECKPOINT_RANK_FILES_H_
