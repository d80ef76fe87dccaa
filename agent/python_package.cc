#include "agent/python_package.h"

#include <filesystem>
#include <system_error>

namespace parallax::agent {

std::string FindPythonPackage(const std::string& bin_dir, const std::string& install_dir) {
  namespace fs = std::filesystem;
  const fs::path prefix = fs::path(bin_dir).parent_path();
  for (const fs::path& dir : {prefix / "python", prefix / install_dir}) {
    std::error_code ec;
    if (fs::is_regular_file(dir / "parallax" / "__init__.py", ec)) {
      fs::path real = fs::canonical(dir, ec);
      return ec ? dir.string() : real.string();
    }
  }
  return "";
}

}  // namespace parallax::agent
