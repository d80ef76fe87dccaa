#include "agent/python_package.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "tests/testing/temp_dir.h"

namespace parallax::agent {
namespace {

namespace fs = std::filesystem;

void Touch(const fs::path& file) {
  fs::create_directories(file.parent_path());
  std::ofstream(file) << "";
}

TEST(PythonPackageTest, FoundInTheBuildTreeThenTheInstalledTree) {
  testing::TempDir dir;
  const fs::path root = fs::canonical(dir.path());
  fs::create_directories(root / "bin");
  EXPECT_EQ(FindPythonPackage((root / "bin").string(), "lib/py/dist-packages"), "");
  Touch(root / "lib/py/dist-packages/parallax/__init__.py");
  EXPECT_EQ(FindPythonPackage((root / "bin").string(), "lib/py/dist-packages"),
            (root / "lib/py/dist-packages").string());
  Touch(root / "python/parallax/__init__.py");
  EXPECT_EQ(FindPythonPackage((root / "bin").string(), "lib/py/dist-packages"),
            (root / "python").string());
}

TEST(PythonPackageTest, FoundFromThePackagesProgramDirectory) {
  testing::TempDir dir;
  const fs::path root = fs::canonical(dir.path());
  fs::create_directories(root / "usr/lib/parallax/bin");
  Touch(root / "usr/lib/python3.11/dist-packages/parallax/__init__.py");
  EXPECT_EQ(FindPythonPackage((root / "usr/lib/parallax/bin").string(),
                              "lib/python3.11/dist-packages"),
            (root / "usr/lib/python3.11/dist-packages").string());
}

}  // namespace
}  // namespace parallax::agent
