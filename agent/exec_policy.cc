#include "agent/exec_policy.h"

#include <limits.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

namespace parallax::agent {
namespace {

// The real path of `path`, or "" with errno set.
std::string RealPath(const std::string& path) {
  char buf[PATH_MAX];
  if (realpath(path.c_str(), buf) == nullptr) return "";
  return buf;
}

// Whether `path` is `dir` or below it (both real paths).
bool IsUnder(const std::string& path, const std::string& dir) {
  if (dir == "/") return true;
  return path.size() > dir.size() && path.compare(0, dir.size(), dir) == 0 &&
         path[dir.size()] == '/';
}

}  // namespace

std::vector<std::string> AllowedExecDirectories(const std::string& bin_dir,
                                                const std::vector<std::string>& allow_exec) {
  std::vector<std::string> dirs = {bin_dir};
  for (const std::string& dir : allow_exec) {
    if (std::find(dirs.begin(), dirs.end(), dir) == dirs.end()) dirs.push_back(dir);
  }
  return dirs;
}

StatusOr<std::string> ResolveAllowedExecutable(const std::string& program,
                                               const std::vector<std::string>& allowed_dirs,
                                               const std::string& path_env) {
  if (program.empty()) return FailedPrecondition("cannot execute an empty command");
  std::string real;
  int err = ENOENT;
  if (program.find('/') != std::string::npos) {
    real = RealPath(program);
    err = errno;
  } else {
    size_t start = 0;
    while (real.empty() && start <= path_env.size()) {
      size_t colon = path_env.find(':', start);
      std::string dir = path_env.substr(start, colon == std::string::npos ? std::string::npos
                                                                           : colon - start);
      start = colon == std::string::npos ? path_env.size() + 1 : colon + 1;
      std::string candidate = (dir.empty() ? std::string(".") : dir) + "/" + program;
      if (access(candidate.c_str(), X_OK) == 0) real = RealPath(candidate);
    }
  }
  struct stat st {};
  if (real.empty() || stat(real.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) {
    return FailedPrecondition("cannot execute '" + program + "': " +
                              (real.empty() ? std::strerror(err) : "not a regular file"));
  }
  std::string allowed;
  for (const std::string& dir : allowed_dirs) {
    std::string real_dir = RealPath(dir);
    if (!real_dir.empty() && IsUnder(real, real_dir)) return real;
    allowed += (allowed.empty() ? "" : ", ") + dir;
  }
  return PermissionDenied(
      "refused to execute '" + program + "' (resolved to '" + real +
      "'): it is outside the directories this agent may execute from (" +
      (allowed.empty() ? std::string("none") : allowed) +
      "); install the program there, or start the agent with --allow-exec " +
      real.substr(0, real.rfind('/') == 0 ? 1 : real.rfind('/')));
}

}  // namespace parallax::agent
