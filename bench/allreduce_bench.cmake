# allreduce_bench: the Communicator (shared memory or Gloo over TCP) vs raw
# Gloo, and gradient fusion; allreduce_bench_mpi: its Open MPI peer, built
# where scripts/install-deps --bench installed libopenmpi-dev.
# bench/allreduce_compare.py runs them side by side; results in
# docs/PERFORMANCE.md. allreduce_bench links Gloo directly for the raw runs.
add_executable(allreduce_bench allreduce_bench.cc)
target_link_libraries(allreduce_bench PRIVATE px_comm gloo CLI11::CLI11 nlohmann_json::nlohmann_json)

find_package(MPI QUIET COMPONENTS CXX)
if(MPI_CXX_FOUND)
  add_executable(allreduce_bench_mpi allreduce_bench_mpi.cc)
  target_link_libraries(allreduce_bench_mpi PRIVATE MPI::MPI_CXX CLI11::CLI11 nlohmann_json::nlohmann_json)
else()
  message(STATUS "Open MPI not found: no allreduce_bench_mpi (scripts/install-deps --bench)")
endif()
