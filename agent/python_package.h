// Where a Python trainer finds the `parallax` package: the agent puts its
// directory first on every trainer's PYTHONPATH, so a job never has to.
#ifndef PARALLAX_AGENT_PYTHON_PACKAGE_H_
#define PARALLAX_AGENT_PYTHON_PACKAGE_H_

#include <string>

namespace parallax::agent {

// The directory holding parallax/__init__.py next to the agent's binaries:
// <bin_dir>/../python (a build tree), or <prefix>/<install_dir> of an
// installed tree whose programs are in <prefix>/lib/parallax/bin
// (cmake/Package.cmake), or in <prefix>/bin; install_dir is
// PARALLAX_PYTHON_INSTALL_DIR, e.g. lib/python3.11/dist-packages. "" when
// none has it (no Python package was built).
std::string FindPythonPackage(const std::string& bin_dir, const std::string& install_dir);

}  // namespace parallax::agent

#endif  // PARALLAX_AGENT_PYTHON_PACKAGE_H_
