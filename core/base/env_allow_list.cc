#include "core/base/env_allow_list.h"

#include <fnmatch.h>

#include <algorithm>

namespace parallax {

// Keep sorted, and in step with docs/OPERATIONS.md ("Task environment").
// Each name only selects a value a program reads; none names a file of code
// to load or a command to run.
const std::vector<std::string> kSafeTaskEnvNames = {
    "BLIS_NUM_THREADS",
    "CUBLAS_WORKSPACE_CONFIG",
    "GLOO_SOCKET_IFNAME",
    "GOTO_NUM_THREADS",
    "KMP_AFFINITY",
    "KMP_BLOCKTIME",
    "LANG",
    "LANGUAGE",
    "LC_ALL",
    "LC_COLLATE",
    "LC_CTYPE",
    "LC_MESSAGES",
    "LC_MONETARY",
    "LC_NUMERIC",
    "LC_TIME",
    "MKL_DYNAMIC",
    "MKL_NUM_THREADS",
    "NCCL_ALGO",
    "NCCL_DEBUG",
    "NCCL_DEBUG_SUBSYS",
    "NCCL_IB_DISABLE",
    "NCCL_P2P_DISABLE",
    "NCCL_PROTO",
    "NCCL_SHM_DISABLE",
    "NCCL_SOCKET_IFNAME",
    "NUMEXPR_MAX_THREADS",
    "NUMEXPR_NUM_THREADS",
    "OMP_DYNAMIC",
    "OMP_NUM_THREADS",
    "OMP_PLACES",
    "OMP_PROC_BIND",
    "OMP_SCHEDULE",
    "OMP_THREAD_LIMIT",
    "OMP_WAIT_POLICY",
    "OPENBLAS_NUM_THREADS",
    "PYTHONDONTWRITEBYTECODE",
    "PYTHONHASHSEED",
    "PYTHONUNBUFFERED",
    "TZ",
    "VECLIB_MAXIMUM_THREADS",
};

EnvAllowList::EnvAllowList(std::vector<std::string> patterns) : patterns_(std::move(patterns)) {}

bool EnvAllowList::Allows(const std::string& name) const {
  if (std::binary_search(kSafeTaskEnvNames.begin(), kSafeTaskEnvNames.end(), name)) return true;
  return std::any_of(patterns_.begin(), patterns_.end(), [&](const std::string& pattern) {
    return fnmatch(pattern.c_str(), name.c_str(), 0) == 0;
  });
}

std::vector<std::string> EnvAllowList::Refused(const std::vector<std::string>& names) const {
  std::vector<std::string> refused;
  for (const std::string& name : names) {
    if (!Allows(name)) refused.push_back(name);
  }
  return refused;
}

std::string RefusedEnvMessage(const std::vector<std::string>& refused) {
  std::string names;
  std::string flags;
  for (const std::string& name : refused) {
    names += (names.empty() ? "" : ", ") + name;
    flags += " --allow-env " + name;
  }
  return std::string("refused to start: the job's [trainer.env] sets ") + names +
         (refused.size() == 1 ? ", which is" : ", which are") +
         " outside the agent's safe set (thread counts, locale, time zone: docs/OPERATIONS.md, "
         "\"Task environment\"); a variable can make a program load or run other code. Nothing "
         "was run. If the job may set " + (refused.size() == 1 ? "it" : "them") +
         ", start the agent with" + flags;
}

}  // namespace parallax
