# ps_bench: PS throughput, workload W1 (see docs/PERFORMANCE.md). Not a test.
add_executable(ps_bench ps_bench.cc)
target_link_libraries(ps_bench PRIVATE px_ps px_plan CLI11::CLI11 nlohmann_json::nlohmann_json)
target_compile_definitions(ps_bench PRIVATE PARALLAX_BIN_DIR="${PROJECT_BINARY_DIR}/bin")
add_dependencies(ps_bench parallax-ps)
