// Checkpoint files of a job (docs/RELIABILITY.md, "Checkpoints"):
//
//   <checkpoint_dir>/job-<id>/step-<s>/
//     dense.pxck          rank 0: every worker-held variable (dense, the
//                         replica of an all-gather table, a whole table on
//                         all-reduce) with its optimizer state
//     rank-<r>.state      rank r: the blobs of its RegisterState()s
//     var<V>-part<P>.pxps every PS partition, written by its shard (SAVE)
//     var<V>-shard<S>.pxdt every shard's part of a dynamic table (SAVE)
//     MANIFEST.json       rank 0, last: job, attempt, step, world size, the
//                         plan, and every file above with its size and
//                         SHA-256
//
// Every file is written durably (temp file, fsync, rename, directory fsync);
// the coordinator records the checkpoint (CommitCheckpoint, with the
// manifest's SHA-256) only after the manifest is written, and a reader
// trusts a directory only when the manifest's digest and every file's match.
//
// This file is the format and the listing of committed checkpoints (what
// `parallax export` reads, library px_checkpoint); trainer/checkpoint.h is
// the protocol a rank follows to write and resume them.
#ifndef PARALLAX_TRAINER_CHECKPOINT_FILES_H_
#define PARALLAX_TRAINER_CHECKPOINT_FILES_H_

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/checkpoint/rank_files.h"
#include "core/optim/optimizer.h"
#include "parallax/status.h"

namespace parallax {
class CoordinatorClient;
}  // namespace parallax

namespace parallax::trainer {

constexpr char kManifestFile[] = "MANIFEST.json";
using checkpoint::kDenseFile;

std::string JobCheckpointDir(const std::string& root, int64_t job_id);
std::string StepCheckpointDir(const std::string& root, int64_t job_id, int64_t step);
std::string RankStateFile(int rank);  // "rank-<r>.state"

// dense.pxck and rank-<r>.state (core/checkpoint/rank_files.h, where a PS
// shard reads dense.pxck too), by the names the trainer has always used.
using checkpoint::DecodeDenseFile;
using checkpoint::DecodeRankState;
using checkpoint::DenseEntry;
using checkpoint::EncodeDenseFile;
using checkpoint::EncodeRankState;
using checkpoint::ReadDenseFile;

struct ManifestFile {
  std::string name;  // relative to the step directory
  uint64_t bytes = 0;
  std::string sha256;
};

struct Manifest {
  int64_t job_id = 0;
  int attempt = 0;
  int64_t step = 0;
  int world_size = 1;
  std::string plan_json;  // core/plan/job_plan.h JSON of the attempt that wrote it
  std::vector<ManifestFile> files;
};

std::string ManifestToJson(const Manifest& manifest);
StatusOr<Manifest> ParseManifest(std::string_view json, const std::string& source);

// Describes `name` in `dir` (size and SHA-256) for the manifest.
StatusOr<ManifestFile> DescribeFile(const std::string& dir, const std::string& name);

// Reads dir/MANIFEST.json, checks its SHA-256 against `manifest_sha256`
// (skipped when empty) and every listed file's size and SHA-256.
// FAILED_PRECONDITION naming the first file that is missing or differs.
StatusOr<Manifest> VerifyCheckpoint(const std::string& dir, const std::string& manifest_sha256);

// A committed checkpoint as the coordinator lists it.
struct CommittedCheckpoint {
  int64_t step = 0;
  int attempt = 0;
  std::string path;
  std::string manifest_sha256;
};

// The job's committed checkpoints, newest step first.
StatusOr<std::vector<CommittedCheckpoint>> ListCommitted(CoordinatorClient* coord, int64_t job_id);

// The newest committed checkpoint that verifies (logging each one that
// does not), or nullopt when there is none. With `step`, only that step
// (NOT_FOUND when it is not committed; its verification error otherwise).
StatusOr<std::optional<std::pair<CommittedCheckpoint, Manifest>>> FindUsableCheckpoint(
    CoordinatorClient* coord, int64_t job_id, std::optional<int64_t> step = std::nullopt);

// Deletes the step directories of the job other than the newest `keep`
// committed ones, never touching steps newer than the newest committed (a
// checkpoint in progress). Errors are logged, not returned: pruning never
// stops training.
void PruneCheckpoints(const std::string& root, int64_t job_id,
                      const std::vector<CommittedCheckpoint>& committed, int keep);

}  // namespace parallax::trainer

#endif  // PARALLAX_TRAINER_CHECKPOINT_FILES_H_
