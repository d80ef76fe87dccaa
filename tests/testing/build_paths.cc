#include "tests/testing/build_paths.h"

namespace parallax::testing {

const char* BuildBinDir() { return PX_BUILD_BIN_DIR; }
const char* BuildDir() { return PX_BUILD_DIR; }
const char* SourceDir() { return PX_SOURCE_DIR; }

}  // namespace parallax::testing
