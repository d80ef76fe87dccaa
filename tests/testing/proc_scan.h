// Finds processes by their environment, to check that no task survives.
#ifndef PARALLAX_TESTS_TESTING_PROC_SCAN_H_
#define PARALLAX_TESTS_TESTING_PROC_SCAN_H_

#include <dirent.h>
#include <signal.h>

#include <fstream>
#include <sstream>
#include <string>
#include <vector>

namespace parallax::testing {

// Pids of live (not zombie) processes whose environment holds every one of
// `entries` ("NAME=value").
inline std::vector<int> PidsWithEnv(const std::vector<std::string>& entries) {
  std::vector<int> pids;
  DIR* proc = opendir("/proc");
  if (proc == nullptr) return pids;
  while (dirent* e = readdir(proc)) {
    std::string name = e->d_name;
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::ifstream stat("/proc/" + name + "/stat");
    std::string line;
    std::getline(stat, line);
    size_t paren = line.rfind(')');
    if (paren == std::string::npos || paren + 2 >= line.size() || line[paren + 2] == 'Z') continue;
    std::ifstream env("/proc/" + name + "/environ", std::ios::binary);
    std::stringstream text;
    text << env.rdbuf();
    std::vector<std::string> vars;
    std::string var;
    std::istringstream split(text.str());
    while (std::getline(split, var, '\0')) vars.push_back(var);
    bool all = true;
    for (const std::string& want : entries) {
      bool found = false;
      for (const std::string& v : vars) found |= v == want;
      all &= found;
    }
    if (all) pids.push_back(std::stoi(name));
  }
  closedir(proc);
  return pids;
}

inline void KillAllWithEnv(const std::vector<std::string>& entries) {
  for (int pid : PidsWithEnv(entries)) kill(pid, SIGKILL);
}

}  // namespace parallax::testing

#endif  // PARALLAX_TESTS_TESTING_PROC_SCAN_H_
