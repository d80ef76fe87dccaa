# Datasets (core/data): token files, vocabulary, Brown tokenizer, readers and
# the synthetic CTR generator. Included by tests/core/CMakeLists.txt.
list(APPEND PX_CORE_TEST_SOURCES
  data/brown_test.cc
  data/criteo_test.cc
  data/synthetic_ctr_test.cc
  data/token_file_test.cc
  data/token_reader_test.cc)
list(APPEND PX_CORE_TEST_LIBS px_data)

# parallax-data and scripts/fetch-data as real processes on small inputs.
px_add_test(NAME data_integration_tests
  SOURCES
    data/data_tool_test.cc
    data/fetch_data_test.cc
    ../testing/subprocess.cc
  LIBS px_data nlohmann_json::nlohmann_json
  LABELS integration)
add_dependencies(data_integration_tests parallax-data)
