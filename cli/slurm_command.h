// `parallax slurm JOB.toml`: a whole job inside a Slurm allocation (sbatch,
// or salloc with a shell on an allocated node). Reads the allocation from
// Slurm's environment and `scontrol`, starts parallax-coordinator on this
// (the batch) node with its SQLite state on node-local disk, one
// parallax-agent per allocated node in one `srun` step, submits the job with
// its worker count taken from the allocation (unless the job file sets
// [job] workers), shows `parallax run`'s progress line and exits with the
// job's result. SIGTERM (scancel, the time limit) cancels the job with that
// reason, and everything this command started stops. docs/OPERATIONS.md,
// "Under Slurm".
#ifndef PARALLAX_CLI_SLURM_COMMAND_H_
#define PARALLAX_CLI_SLURM_COMMAND_H_

#include <ostream>
#include <string>
#include <vector>

namespace parallax::cli {

struct SlurmOptions {
  std::string job_file;
  int ps_nodes = 0;       // --ps-nodes: nodes given to PS shards only ([ps] hosts = "ps")
  std::string state_dir;  // logs and the database's copy; default ./parallax-slurm-<job id>
  std::string local_dir;  // node-local: database, agent workdirs; default $TMPDIR/parallax-slurm-<id>
  std::string resume_dir; // --resume: an earlier run's state directory
  std::string bin_dir;    // where parallax-coordinator/-agent are
  std::string token;      // the shared secret, when given (else one is made)
  std::string secret_file;
  int agent_timeout_s = 60;  // how long agents may take to register
  bool progress_bar = false;
};

int RunSlurm(const SlurmOptions& options, std::ostream& out, std::ostream& err);

// The per-node half (`parallax slurm-agent`, run by the srun step): execs
// `agent_argv` with this node's name, addresses, workdir and role added.
struct SlurmAgentOptions {
  std::string nodes;     // NAME=ADDR of every node, comma-separated
  std::string ps_nodes;  // names of the nodes with --role ps, comma-separated
  std::string local_dir;
  std::string log_dir;
  std::vector<std::string> agent_argv;
};

// Returns only on failure (an exit code, after saying why).
int RunSlurmAgent(const SlurmAgentOptions& options, std::ostream& err);

}  // namespace parallax::cli

#endif  // PARALLAX_CLI_SLURM_COMMAND_H_
