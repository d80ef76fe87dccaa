// The pure parts of launching a task: its directory name, its environment
// (exactly as schemas/task_env.md says) and its command line. No I/O.
#ifndef PARALLAX_AGENT_TASK_ENV_H_
#define PARALLAX_AGENT_TASK_ENV_H_

#include <optional>
#include <string>
#include <vector>

#include "schemas/coordinator_types.h"

namespace parallax::agent {

// "trainer" or "ps".
std::string RoleName(rpc::TaskRole::type role);

// "<job>-<attempt>-<role>-<index>", e.g. "7-2-trainer-0": the task's directory
// under <workdir>/tasks/.
std::string TaskDirName(const rpc::TaskKey& key);

// The inverse of TaskDirName; nullopt when `name` is not one.
std::optional<rpc::TaskKey> ParseTaskDirName(const std::string& name);

// "job 7 attempt 2 trainer 0", for logs and messages.
std::string DescribeTask(const rpc::TaskKey& key);

// What the agent adds to an assignment to build a task's environment.
struct TaskEnvContext {
  std::string coordinator;  // PARALLAX_COORDINATOR: HOST:PORT as the agent reaches it
  std::string bind_addr;    // PARALLAX_BIND_ADDR
  std::string token;        // PARALLAX_TOKEN (may be empty)
  std::string tls_ca_file;  // PARALLAX_TLS_CA, set only when not empty
  std::string job_file;     // PARALLAX_JOB_FILE: absolute path of the copy of the job file
  std::string task_dir;     // PARALLAX_TASK_DIR: absolute path
  // A PS shard's next generation: its predecessor's task directory on this
  // host (PARALLAX_SHARD_PREVIOUS_DIR), "" when there is none here.
  std::string previous_task_dir;
  // Trainers: the directory of the `parallax` Python package, put first on
  // PYTHONPATH ("": PYTHONPATH left as it is).
  std::string python_path;
  // Trainers: this host's CPU cores. A trainer's compute threads default to
  // max(1, cores / PARALLAX_LOCAL_WORLD_SIZE) (OMP_NUM_THREADS, which torch
  // and OpenMP read, and OPENBLAS_NUM_THREADS), since the job's ranks on a
  // host share its cores; 0: no default.
  int cpu_cores = 0;
};

// The whole environment of a task as "NAME=value" strings, sorted by name:
// `inherited` (the agent's own environment, "NAME=value") without any
// PARALLAX_* variable, then the variables of schemas/task_env.md for the
// assignment's role (the agent's own: PARALLAX_*, and for trainers the
// thread defaults unless `inherited` sets them, and PYTHONPATH), then the
// assignment's env map, whose keys may not override a PARALLAX_* variable
// (those are skipped and named in `ignored` when it is not null); a
// PYTHONPATH there (one the operator allowed with --allow-env) goes after
// the package's directory.
std::vector<std::string> BuildTaskEnv(const rpc::TaskAssignment& assignment,
                                      const TaskEnvContext& context,
                                      const std::vector<std::string>& inherited,
                                      std::vector<std::string>* ignored = nullptr);

// The argv of a task: assignment.command when non-empty, with command[0]
// resolved against the directory of assignment.job_path when it is relative
// and contains a '/' (a bare name is left for a PATH lookup); otherwise
// <bin_dir>/parallax-trainer or <bin_dir>/parallax-ps for the role.
std::vector<std::string> ResolveCommand(const rpc::TaskAssignment& assignment,
                                        const std::string& bin_dir);

}  // namespace parallax::agent

#endif  // PARALLAX_AGENT_TASK_ENV_H_
