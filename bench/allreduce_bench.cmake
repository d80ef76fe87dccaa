# allreduce_bench: Communicator (Gloo) bandwidth vs raw Gloo, and gradient
# fusion; results in docs/PERFORMANCE.md. Links Gloo directly for the raw runs.
add_executable(allreduce_bench allreduce_bench.cc)
target_link_libraries(allreduce_bench PRIVATE px_comm gloo CLI11::CLI11 nlohmann_json::nlohmann_json)
