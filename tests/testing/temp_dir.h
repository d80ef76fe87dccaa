// TempDir: a fresh directory under $TMPDIR (or /tmp, or the directory
// given), removed with everything in it when the object goes away.
#ifndef PARALLAX_TESTS_TESTING_TEMP_DIR_H_
#define PARALLAX_TESTS_TESTING_TEMP_DIR_H_

#include <cstdlib>
#include <filesystem>
#include <stdexcept>
#include <string>

namespace parallax::testing {

class TempDir {
 public:
  TempDir() : TempDir(DefaultBase()) {}
  // Under `base` (say /dev/shm, for a directory on tmpfs).
  explicit TempDir(const std::string& base) {
    std::string tmpl = base + "/parallax-test-XXXXXX";
    if (mkdtemp(tmpl.data()) == nullptr) throw std::runtime_error("mkdtemp failed: " + tmpl);
    path_ = tmpl;
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  const std::string& path() const { return path_; }
  std::string File(const std::string& name) const { return path_ + "/" + name; }

 private:
  static std::string DefaultBase() {
    const char* base = std::getenv("TMPDIR");
    return base && *base ? base : "/tmp";
  }

  std::string path_;
};

}  // namespace parallax::testing

#endif  // PARALLAX_TESTS_TESTING_TEMP_DIR_H_
