#include "core/base/daemon.h"

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
