#include "bench/spawn_coordinator.h"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <thread>

extern char** environ;

namespace parallax::bench {

std::string MakeBenchDir(const std::string& prefix, const std::string& base) {
  std::string tmpl = base + "/" + prefix + "-XXXXXX";
  return mkdtemp(tmpl.data()) ? tmpl : std::string();
}

std::string NextToThisBinary(const std::string& name) {
  const std::string self = std::filesystem::canonical("/proc/self/exe").string();
  return self.substr(0, self.rfind('/')) + "/" + name;
}

StatusOr<SpawnedCoordinator> SpawnCoordinator(const std::string& bin, const std::string& dir,
                                              const std::vector<std::string>& extra_args,
                                              int timeout_ms) {
  const std::string port_file = dir + "/port";
  const std::string log = dir + "/coordinator.log";
  std::vector<std::string> argv = {bin,  "--listen",    "127.0.0.1:0", "--db",
                                   dir + "/state.db", "--port-file", port_file};
  argv.insert(argv.end(), extra_args.begin(), extra_args.end());
  std::vector<char*> p;
  for (auto& s : argv) p.push_back(s.data());
  p.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 2, log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_addopen(&actions, 1, "/dev/null", O_WRONLY, 0);
  pid_t pid;
  const int rc = posix_spawn(&pid, p[0], &actions, nullptr, p.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  if (rc != 0) {
    return Unavailable("cannot start the coordinator '" + bin +
                       "'; build it (parallax-coordinator) or pass --coordinator-bin");
  }
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  while (std::chrono::steady_clock::now() < deadline) {
    std::ifstream in(port_file);
    int port = 0;
    if (in >> port && port > 0) return SpawnedCoordinator{pid, "127.0.0.1:" + std::to_string(port)};
    int status = 0;
    if (waitpid(pid, &status, WNOHANG) == pid) {
      return Unavailable("the coordinator exited before it listened; see " + log);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(25));
  }
  kill(pid, SIGKILL);
  waitpid(pid, nullptr, 0);
  return DeadlineExceeded("the coordinator did not write " + port_file + " within " +
                          std::to_string(timeout_ms) + " ms; see " + log);
}

}  // namespace parallax::bench
