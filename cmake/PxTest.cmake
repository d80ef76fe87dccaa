# px_add_test(NAME name SOURCES a.cc b.cc LIBS lib... LABELS unit|integration|... [PROPERTIES ...])
# One binary per top-level test folder; every TEST is listed by ctest through
# gtest_discover_tests and carries the given labels.
function(px_add_test)
  cmake_parse_arguments(T "" "NAME" "SOURCES;LIBS;LABELS;PROPERTIES" ${ARGN})
  add_executable(${T_NAME} ${T_SOURCES})
  target_link_libraries(${T_NAME} PRIVATE ${T_LIBS} px_test_paths GTest::gtest GTest::gmock
                        GTest::gtest_main)
  set(props LABELS "${T_LABELS}")
  if(T_PROPERTIES)
    list(APPEND props ${T_PROPERTIES})
  endif()
  gtest_discover_tests(${T_NAME}
    WORKING_DIRECTORY ${PROJECT_BINARY_DIR}
    DISCOVERY_TIMEOUT 60
    PROPERTIES ${props})
endfunction()
