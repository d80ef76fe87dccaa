#include "core/base/daemon.h"

#include <sys/resource.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>

namespace parallax {

sigset_t BlockTerminationSignals(std::initializer_list<int> extra) {
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  for (int s : extra) sigaddset(&signals, s);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  signal(SIGPIPE, SIG_IGN);
  return signals;
}

int64_t OpenFileLimit() {
  struct rlimit limit;
  if (getrlimit(RLIMIT_NOFILE, &limit) != 0) return 1024;
  return limit.rlim_cur == RLIM_INFINITY ? int64_t{1} << 20 : static_cast<int64_t>(limit.rlim_cur);
}

int64_t RaiseOpenFileLimit() {
  struct rlimit limit;
  if (getrlimit(RLIMIT_NOFILE, &limit) == 0 && limit.rlim_cur < limit.rlim_max) {
    limit.rlim_cur = limit.rlim_max;
    setrlimit(RLIMIT_NOFILE, &limit);  // best effort: the old limit stays on failure
  }
  return OpenFileLimit();
}

Status WriteFileAtomically(const std::string& path, const std::string& text) {
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    out << text;
    if (!out.flush()) return IoError("cannot write '" + tmp + "': " + std::strerror(errno));
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    return IoError("cannot rename '" + tmp + "' to '" + path + "': " + std::strerror(errno));
  }
  return Status::Ok();
}

}  // namespace parallax
