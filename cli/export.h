// `parallax export JOB [--checkpoint STEP] --out DIR`: writes a committed
// checkpoint of a job as one NumPy .npy file per variable plus
// manifest.json (docs/EXPORT.md), usable without the cluster.
#ifndef PARALLAX_CLI_EXPORT_H_
#define PARALLAX_CLI_EXPORT_H_

#include <cstdint>
#include <optional>
#include <ostream>
#include <string>

#include "parallax/status.h"

namespace parallax {
class CoordinatorClient;
}

namespace parallax::cli {

struct ExportOptions {
  int64_t job_id = 0;
  std::optional<int64_t> step;  // newest committed checkpoint when unset
  std::string out_dir;
  // Rows per chunk when streaming a PS table from its partition files.
  int64_t chunk_rows = 65536;
};

// Finds the checkpoint through `coord` (ListCheckpoints), verifies its
// manifest and files (SHA-256), and writes the export. Prints one line per
// variable to `out`. NOT_FOUND when the job has no (such) committed
// checkpoint; FAILED_PRECONDITION naming the file that fails verification;
// IO_ERROR naming the output file.
Status ExportCheckpoint(CoordinatorClient* coord, const ExportOptions& options, std::ostream& out);

}  // namespace parallax::cli

#endif  // PARALLAX_CLI_EXPORT_H_
