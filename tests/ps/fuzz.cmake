# ps_wire_fuzz: a libFuzzer target over the PS message parser and a shard
# core. The main build uses g++, which has no libFuzzer, so the target is
# compiled by clang++ directly when one with -fsanitize=fuzzer is present
# (Debian: clang, libclang-rt-14-dev). Its short run over the committed
# corpus tests/fuzz/corpus/ps_wire is a ctest labelled `fuzz`.
find_program(PX_FUZZ_CLANGXX NAMES clang++ clang++-14)
if(NOT PX_FUZZ_CLANGXX)
  message(STATUS "Parallax: no clang++, the PS fuzz target is not built")
  return()
endif()
if(NOT DEFINED PX_FUZZ_CLANG_WORKS)
  set(probe ${PROJECT_BINARY_DIR}/px_fuzz_probe.cc)
  file(WRITE ${probe} "#include <cstddef>\n#include <cstdint>\nextern \"C\" int LLVMFuzzerTestOneInput(const uint8_t*, size_t) { return 0; }\n")
  execute_process(
    COMMAND ${PX_FUZZ_CLANGXX} -fsanitize=fuzzer,address ${probe} -o ${PROJECT_BINARY_DIR}/px_fuzz_probe
    RESULT_VARIABLE probe_result OUTPUT_QUIET ERROR_QUIET)
  if(probe_result EQUAL 0)
    set(PX_FUZZ_CLANG_WORKS ON CACHE INTERNAL "clang++ links -fsanitize=fuzzer")
  else()
    set(PX_FUZZ_CLANG_WORKS OFF CACHE INTERNAL "clang++ links -fsanitize=fuzzer")
  endif()
endif()
if(NOT PX_FUZZ_CLANG_WORKS)
  message(STATUS "Parallax: ${PX_FUZZ_CLANGXX} cannot link -fsanitize=fuzzer (install libclang-rt-14-dev); the PS fuzz target is not built")
  return()
endif()

set(src ${PROJECT_SOURCE_DIR})
set(fuzz_sources
  ${src}/tests/ps/ps_wire_fuzz.cc
  ${src}/core/ps/wire.cc
  ${src}/core/ps/plan.cc
  ${src}/core/ps/initializer.cc
  ${src}/ps/shard_core.cc
  ${src}/ps/variable_table.cc
  ${src}/ps/optimizer.cc
  ${src}/ps/checkpoint.cc
  ${src}/core/base/status.cc)
set(fuzz_bin ${PROJECT_BINARY_DIR}/bin/ps_wire_fuzz)
add_custom_command(
  OUTPUT ${fuzz_bin}
  COMMAND ${PX_FUZZ_CLANGXX} -std=c++20 -O1 -g -fsanitize=fuzzer,address,undefined
          -fno-sanitize-recover=undefined -I${src} ${fuzz_sources} -o ${fuzz_bin}
  DEPENDS ${fuzz_sources}
          ${src}/schemas/ps_wire.h ${src}/core/ps/wire.h ${src}/core/ps/plan.h
          ${src}/ps/shard_core.h ${src}/ps/variable_table.h ${src}/ps/checkpoint.h
  COMMENT "clang++ -fsanitize=fuzzer ps_wire_fuzz"
  VERBATIM)
add_custom_target(ps_wire_fuzz ALL DEPENDS ${fuzz_bin})

# A few seconds over the committed corpus. New inputs go to a scratch
# directory in the build tree (the first one named), never to the source tree.
set(scratch ${PROJECT_BINARY_DIR}/fuzz/ps_wire)
add_test(NAME ps_wire_fuzz_short
  COMMAND ${CMAKE_COMMAND} -E env ASAN_OPTIONS=detect_leaks=0
          ${fuzz_bin} -max_total_time=5 -rss_limit_mb=2048 -artifact_prefix=${PROJECT_BINARY_DIR}/fuzz/
          ${scratch} ${src}/tests/fuzz/corpus/ps_wire)
set_tests_properties(ps_wire_fuzz_short PROPERTIES LABELS fuzz TIMEOUT 120
  FIXTURES_REQUIRED ps_wire_fuzz_dirs)
add_test(NAME ps_wire_fuzz_dirs COMMAND ${CMAKE_COMMAND} -E make_directory ${scratch})
set_tests_properties(ps_wire_fuzz_dirs PROPERTIES LABELS fuzz FIXTURES_SETUP ps_wire_fuzz_dirs)
