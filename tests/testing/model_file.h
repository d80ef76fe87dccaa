// The variables a test trainer rank writes when it ends (trainer_test_rank,
// lm_test_rank): one "name v v v ..." line per variable.
#ifndef PARALLAX_TESTS_TESTING_MODEL_FILE_H_
#define PARALLAX_TESTS_TESTING_MODEL_FILE_H_

#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

namespace parallax::testing {

using ModelFile = std::map<std::string, std::vector<float>>;

// Empty when the file cannot be read.
inline ModelFile ReadModelFile(const std::string& path) {
  ModelFile m;
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream ls(line);
    std::string name;
    ls >> name;
    float x;
    while (ls >> x) m[name].push_back(x);
  }
  return m;
}

}  // namespace parallax::testing

#endif  // PARALLAX_TESTS_TESTING_MODEL_FILE_H_
