// Which programs an agent may execute for a task: only files under the
// agent's own bin dir (where parallax-trainer and parallax-ps are) and the
// directories given with --allow-exec. A job file names its trainer's
// command, and anyone who can submit a job can name any path, so the agent,
// not the coordinator, has the last word on what runs on its host.
#ifndef PARALLAX_AGENT_EXEC_POLICY_H_
#define PARALLAX_AGENT_EXEC_POLICY_H_

#include <string>
#include <vector>

#include "parallax/status.h"

namespace parallax::agent {

// Resolves `program` as execvp would (a name without '/' is looked up in the
// ':'-separated `path_env`; a relative path against the current directory),
// then follows every symlink (realpath). Returns that real path when it lies
// under the real path of one of `allowed_dirs`; the caller executes exactly
// it. FAILED_PRECONDITION "cannot execute 'X': <errno text>" when it does not
// resolve to a file; PERMISSION_DENIED "refused to execute 'X' (resolved to
// 'Y'): it is outside the directories this agent may execute from (A, B);
// ..." when it lies elsewhere.
// The directories an agent may execute from: `bin_dir` (every job's built-in
// trainer and shards live there, so --allow-exec never takes it away), then
// `allow_exec` in order, without repeats.
std::vector<std::string> AllowedExecDirectories(const std::string& bin_dir,
                                                const std::vector<std::string>& allow_exec);

StatusOr<std::string> ResolveAllowedExecutable(const std::string& program,
                                               const std::vector<std::string>& allowed_dirs,
                                               const std::string& path_env);

}  // namespace parallax::agent

#endif  // PARALLAX_AGENT_EXEC_POLICY_H_
