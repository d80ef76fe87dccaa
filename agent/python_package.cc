#include "agent/python_package.h"

#include <filesystem>
#include <system_error>

namespace parallax::agent {

std::string FindPythonPackage(const std::string& bin_dir, const std::string& install_dir) {
  namespace fs = std::filesystem;
  const fs::path parent = fs::path(bin_dir).parent_path();
  // <prefix>/lib/parallax/bin: the prefix is three levels up.
  const fs::path prefix = parent.filename() == "parallax" && parent.parent_path().filename() == "lib"
                              ? parent.parent_path().parent_path()
                              : parent;
  for (const fs::path& dir : {parent / "python", prefix / install_dir}) {
    std::error_code ec;
    if (fs::is_regular_file(dir / "parallax" / "__init__.py", ec)) {
      fs::path real = fs::canonical(dir, ec);
      return ec ? dir.string() : real.string();
    }
  }
  return "";
}

}  // namespace parallax::agent
