// Where this build puts its programs and where its sources are, as CMake
// configured them: what the tests start and read (each also honours an
// environment variable, see subprocess.h's BinDirOr).
//
// Only build_paths.cc, compiled into the small px_test_paths library, holds
// these absolute paths. Every other test source then compiles the same in
// any checkout, and a clone at another path hits what this one put in the
// compiler cache (scripts/build) instead of compiling the tests again.
#ifndef PARALLAX_TESTS_TESTING_BUILD_PATHS_H_
#define PARALLAX_TESTS_TESTING_BUILD_PATHS_H_

namespace parallax::testing {

const char* BuildBinDir();  // <build>/bin
const char* BuildDir();     // <build>
const char* SourceDir();    // the checkout's root

}  // namespace parallax::testing

#endif  // PARALLAX_TESTS_TESTING_BUILD_PATHS_H_
