# Every dependency is a Debian package installed by scripts/install-deps.
# Nothing is downloaded at configure or build time.
find_package(PkgConfig REQUIRED)
find_package(Threads REQUIRED)
pkg_check_modules(THRIFT REQUIRED IMPORTED_TARGET thrift>=0.17)
find_program(THRIFT_COMPILER thrift REQUIRED)
pkg_check_modules(ZMQ REQUIRED IMPORTED_TARGET libzmq)
find_package(cppzmq REQUIRED)
find_package(SQLite3 REQUIRED)
find_package(tomlplusplus REQUIRED)
find_package(CLI11 REQUIRED)
find_package(Eigen3 REQUIRED NO_MODULE)
find_package(nlohmann_json REQUIRED)
find_package(OpenSSL REQUIRED)  # SHA-256 of checkpoint files (libcrypto)
pkg_check_modules(HTTPLIB REQUIRED IMPORTED_TARGET cpp-httplib)  # the coordinator's web pages and /metrics
find_package(Gloo REQUIRED PATHS /usr/share/cmake/Gloo)
find_package(absl REQUIRED)  # dynamic embedding tables' id index (absl::flat_hash_map)
if(PARALLAX_BUILD_TESTS)
  find_package(GTest REQUIRED)
  include(GoogleTest)
endif()

# CUDA and NCCL come from /usr/local/cuda, not from Debian.
set(PARALLAX_HAVE_CUDA OFF)
if(NOT PARALLAX_WITH_CUDA STREQUAL "OFF")
  set(CUDAToolkit_ROOT /usr/local/cuda)
  find_package(CUDAToolkit QUIET)
  find_library(NCCL_LIBRARY nccl HINTS /usr/local/cuda/lib64 /usr/local/cuda/lib)
  find_path(NCCL_INCLUDE_DIR nccl.h HINTS /usr/local/cuda/include)
  if(CUDAToolkit_FOUND AND NCCL_LIBRARY AND NCCL_INCLUDE_DIR)
    set(PARALLAX_HAVE_CUDA ON)
    add_library(px_nccl INTERFACE)
    target_include_directories(px_nccl INTERFACE ${NCCL_INCLUDE_DIR})
    target_link_libraries(px_nccl INTERFACE ${NCCL_LIBRARY} CUDA::cudart)
  elseif(PARALLAX_WITH_CUDA STREQUAL "ON")
    message(FATAL_ERROR "PARALLAX_WITH_CUDA=ON but CUDA toolkit or NCCL was not found under /usr/local/cuda")
  endif()
endif()
message(STATUS "Parallax: CUDA/NCCL ${PARALLAX_HAVE_CUDA} (PARALLAX_WITH_CUDA=${PARALLAX_WITH_CUDA})")

# The Python package (python/): pybind11 over Debian's /usr/bin/python3 (the
# interpreter python3-torch and python3-numpy are installed for) unless
# Python_EXECUTABLE says otherwise.
set(PARALLAX_HAVE_PYTHON OFF)
if(NOT PARALLAX_BUILD_PYTHON STREQUAL "OFF")
  if(NOT DEFINED Python_EXECUTABLE AND EXISTS /usr/bin/python3)
    set(Python_EXECUTABLE /usr/bin/python3)
  endif()
  set(PYBIND11_FINDPYTHON ON)
  find_package(Python QUIET COMPONENTS Interpreter Development.Module)
  if(Python_FOUND)
    find_package(pybind11 CONFIG QUIET)
  endif()
  if(Python_FOUND AND pybind11_FOUND)
    set(PARALLAX_HAVE_PYTHON ON)
  elseif(PARALLAX_BUILD_PYTHON STREQUAL "ON")
    message(FATAL_ERROR "PARALLAX_BUILD_PYTHON=ON but python3-dev or pybind11-dev was not found; "
                        "run scripts/install-deps")
  endif()
endif()
# Where `cmake --install` puts the parallax package, relative to the prefix:
# where Debian's python3 looks under /usr/local. The agent looks for the
# package there (next to its bin dir) and in the build tree's python/.
set(PARALLAX_PYTHON_INSTALL_DIR "lib/python3/dist-packages" CACHE STRING
  "where cmake --install puts the parallax Python package, relative to the prefix")
if(PARALLAX_HAVE_PYTHON AND PARALLAX_PYTHON_INSTALL_DIR STREQUAL "lib/python3/dist-packages")
  set(PARALLAX_PYTHON_INSTALL_DIR
    "lib/python${Python_VERSION_MAJOR}.${Python_VERSION_MINOR}/dist-packages" CACHE STRING
    "where cmake --install puts the parallax Python package, relative to the prefix" FORCE)
endif()
message(STATUS "Parallax: Python package ${PARALLAX_HAVE_PYTHON} (${Python_EXECUTABLE})")
