# libFuzzer targets. The main build uses g++, which has no libFuzzer, so each
# target is compiled by clang++ directly when one that links
# -fsanitize=fuzzer is present (Debian: clang, libclang-rt-14-dev); without
# it the targets are skipped with a message. Each target gets a short run
# over its committed corpus (tests/fuzz/corpus/NAME) as a ctest labelled
# `fuzz`; new inputs go to a scratch directory in the build tree, never to
# the source tree.
#
# Each source is compiled on its own (through the build's compiler launcher,
# ccache when scripts/build found one) and the objects are linked last: the
# build runs them in parallel with everything else and recompiles only what
# changed, and clang's depfiles track the headers. One clang++ call over all
# of a target's sources was the build's longest step (the coordinator
# target: over 7 minutes on one core, never cached). Line tables only, not
# full debug info: a finding's stack still names files and lines, and the
# build takes 9% less CPU. -O1, as libFuzzer advises: -O0 would halve the
# compile time but run 2.6x fewer inputs a second (ps_wire_fuzz, measured).
#
# px_add_fuzz_target(NAME name SOURCES a.cc ... [DEPENDS targets or files
#                    needed before compiling (generated headers)...]
#                    [FLAGS -I... -D...] [LIBS -lfoo ...] [SECONDS 5]
#                    [CORPUS dir under tests/fuzz/corpus, default NAME])

find_program(PX_FUZZ_CLANGXX NAMES clang++ clang++-14)
if(PX_FUZZ_CLANGXX AND NOT DEFINED PX_FUZZ_CLANG_WORKS)
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

function(px_add_fuzz_target)
  cmake_parse_arguments(F "" "NAME;SECONDS;CORPUS" "SOURCES;DEPENDS;FLAGS;LIBS" ${ARGN})
  if(NOT PX_FUZZ_CLANGXX OR NOT PX_FUZZ_CLANG_WORKS)
    message(STATUS "Parallax: no clang++ that links -fsanitize=fuzzer (install clang and libclang-rt-14-dev); fuzz target ${F_NAME} is not built")
    return()
  endif()
  if(NOT F_SECONDS)
    set(F_SECONDS 5)
  endif()
  if(NOT F_CORPUS)
    set(F_CORPUS ${F_NAME})
  endif()
  set(bin ${PROJECT_BINARY_DIR}/bin/${F_NAME})
  set(objdir ${PROJECT_BINARY_DIR}/fuzz-obj/${F_NAME})
  file(MAKE_DIRECTORY ${objdir} ${PROJECT_BINARY_DIR}/bin)  # Ninja makes them; Make does not
  set(sanitize -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined)
  set(objects)
  foreach(source IN LISTS F_SOURCES)
    # core/ps/wire.cc -> core_ps_wire.cc.o; generated sources by their path
    # in the build tree.
    cmake_path(IS_PREFIX PROJECT_BINARY_DIR "${source}" NORMALIZE generated)
    if(generated)
      file(RELATIVE_PATH rel ${PROJECT_BINARY_DIR} ${source})
      set(rel gen/${rel})
    else()
      file(RELATIVE_PATH rel ${PROJECT_SOURCE_DIR} ${source})
    endif()
    string(REPLACE "/" "_" obj_name "${rel}")
    set(obj ${objdir}/${obj_name}.o)
    add_custom_command(
      OUTPUT ${obj}
      COMMAND ${CMAKE_CXX_COMPILER_LAUNCHER} ${PX_FUZZ_CLANGXX} -std=c++20 -O1 -gline-tables-only ${sanitize}
              -I${PROJECT_SOURCE_DIR}/include -I${PROJECT_SOURCE_DIR} -I${PROJECT_BINARY_DIR}
              ${F_FLAGS} -MD -MF ${obj}.d -c ${source} -o ${obj}
      DEPENDS ${source} ${F_DEPENDS}
      DEPFILE ${obj}.d
      COMMENT "clang++ -fsanitize=fuzzer ${F_NAME}: ${rel}"
      VERBATIM)
    list(APPEND objects ${obj})
  endforeach()
  add_custom_command(
    OUTPUT ${bin}
    COMMAND ${PX_FUZZ_CLANGXX} ${sanitize} ${objects} ${F_LIBS} -o ${bin}
    DEPENDS ${objects}
    COMMENT "clang++ -fsanitize=fuzzer ${F_NAME} (link)"
    VERBATIM)
  add_custom_target(${F_NAME} ALL DEPENDS ${bin})
  set(scratch ${PROJECT_BINARY_DIR}/fuzz/${F_NAME})
  add_test(NAME ${F_NAME}_dirs COMMAND ${CMAKE_COMMAND} -E make_directory ${scratch})
  set_tests_properties(${F_NAME}_dirs PROPERTIES LABELS fuzz FIXTURES_SETUP ${F_NAME}_dirs)
  add_test(NAME ${F_NAME}_short
    COMMAND ${CMAKE_COMMAND} -E env ASAN_OPTIONS=detect_leaks=0
            ${bin} -max_total_time=${F_SECONDS} -rss_limit_mb=2048
            -artifact_prefix=${PROJECT_BINARY_DIR}/fuzz/ ${scratch}
            ${PROJECT_SOURCE_DIR}/tests/fuzz/corpus/${F_CORPUS})
  set_tests_properties(${F_NAME}_short PROPERTIES LABELS fuzz TIMEOUT 120
    FIXTURES_REQUIRED ${F_NAME}_dirs)
endfunction()
