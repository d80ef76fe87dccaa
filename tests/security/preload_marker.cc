// A library that, once loaded into a process (LD_PRELOAD), leaves a mark in
// the task's directory: the proof that a job's environment made a program
// load code it was not written to load.
#include <fcntl.h>
#include <unistd.h>

#include <cstdlib>
#include <string>

namespace {

__attribute__((constructor)) void LeaveMark() {
  const char* dir = std::getenv("PARALLAX_TASK_DIR");
  if (dir == nullptr) return;
  const std::string path = std::string(dir) + "/preload-ran";
  int fd = open(path.c_str(), O_CREAT | O_WRONLY | O_CLOEXEC, 0644);
  if (fd >= 0) close(fd);
}

}  // namespace
