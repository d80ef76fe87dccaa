#include "cli/job_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "core/base/env_allow_list.h"
#include "schemas/coordinator_constants.h"

namespace parallax::cli {

StatusOr<std::string> ReadJobFile(const std::string& path, size_t limit) {
  if (limit == 0) limit = static_cast<size_t>(rpc::g_coordinator_constants.MAX_JOB_TEXT_BYTES);
  auto fail = [&](int err) {
    return IoError("cannot read job file '" + path + "': " + std::strerror(err));
  };
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return fail(errno);
  std::string text(limit + 1, '\0');
  size_t got = 0;
  while (got < text.size()) {
    const ssize_t n = ::read(fd, text.data() + got, text.size() - got);
    if (n == 0) break;
    if (n < 0) {
      if (errno == EINTR) continue;
      const int err = errno;
      ::close(fd);
      return fail(err);
    }
    got += static_cast<size_t>(n);
  }
  ::close(fd);
  if (got > limit) {
    const std::string size = limit % (1 << 20) == 0
                                 ? std::to_string(limit >> 20) + " MiB (" +
                                       std::to_string(limit) + " bytes)"
                                 : std::to_string(limit) + " bytes";
    return InvalidArgument("job file '" + path + "' is over " + size +
                           ", the largest job file the coordinator accepts; nothing was "
                           "sent. Keep data out of the job file: name it with a path ([model] "
                           "data) instead");
  }
  text.resize(got);
  return text;
}

std::vector<std::string> EnvWarnings(const JobConfig& config, const std::string& path) {
  std::vector<std::string> names;
  for (const auto& [name, value] : config.trainer.env) {
    if (name.rfind("PARALLAX_", 0) != 0) names.push_back(name);
  }
  std::vector<std::string> lines;
  for (const std::string& name : EnvAllowList().Refused(names)) {
    lines.push_back(path + ": [trainer.env] sets " + name +
                    ", which is outside the agents' safe set (docs/OPERATIONS.md, \"Task "
                    "environment\"): its tasks end at once on every agent not started with "
                    "--allow-env " + name);
  }
  return lines;
}

}  // namespace parallax::cli
