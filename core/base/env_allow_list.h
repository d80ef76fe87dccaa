// Which names a job's `[trainer.env]` may set in its tasks' environment.
//
// A variable can make a program run code it was not written to run: the
// dynamic loader's (LD_PRELOAD, LD_LIBRARY_PATH, LD_AUDIT), a shell's
// (BASH_ENV, ENV, PS4, SHELLOPTS), an interpreter's (PYTHONPATH,
// PYTHONWARNINGS, PYTHONBREAKPOINT, PERL5OPT, NODE_OPTIONS, RUBYOPT), a
// library's plugin hooks (OMP_TOOL_LIBRARIES, NCCL_NET_PLUGIN), and many
// more. A job file is not trusted to run code beyond the program the agent's
// --allow-exec lets it run, so agents accept in `[trainer.env]` only the
// names of a small documented safe set (thread counts, locale, time zone,
// Python's output buffering and hash seed, NCCL and Gloo debug output and
// interface choice: kSafeTaskEnvNames) and the names the operator allows
// with `parallax-agent --allow-env PATTERN`. Any other name ends the task
// before it starts (agent/agent.cc), and `parallax submit` warns about it.
// docs/OPERATIONS.md, "Task environment", is the user-facing statement.
#ifndef PARALLAX_CORE_BASE_ENV_ALLOW_LIST_H_
#define PARALLAX_CORE_BASE_ENV_ALLOW_LIST_H_

#include <string>
#include <vector>

namespace parallax {

// The safe set, sorted; names only (no patterns).
extern const std::vector<std::string> kSafeTaskEnvNames;

class EnvAllowList {
 public:
  // `patterns` are shell-style (fnmatch: `*`, `?`, `[...]`), matched against
  // the whole name, case-sensitively; e.g. "PX_TEST_*".
  explicit EnvAllowList(std::vector<std::string> patterns = {});

  // Whether a job may set `name`: in the safe set, or matched by a pattern.
  bool Allows(const std::string& name) const;

  // The names among `names` that are not allowed, in order.
  std::vector<std::string> Refused(const std::vector<std::string>& names) const;

  const std::vector<std::string>& patterns() const { return patterns_; }

 private:
  std::vector<std::string> patterns_;
};

// The message of a task refused because its job sets `refused` (not empty):
// names the variables, why, and the agent flag that allows them.
std::string RefusedEnvMessage(const std::vector<std::string>& refused);

}  // namespace parallax

#endif  // PARALLAX_CORE_BASE_ENV_ALLOW_LIST_H_
