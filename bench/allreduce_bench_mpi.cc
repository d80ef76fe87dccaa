// allreduce_bench_mpi: the Open MPI peer of allreduce_bench: MPI_Allreduce
// (in place, float32, sum) timed exactly as allreduce_bench times the
// Communicator, printing the same JSON lines with "impl" = --impl. Run it
// under mpirun; bench/allreduce_compare.py runs it with Open MPI's shared
// memory (btl vader) and TCP (btl tcp) transports, alternating with
// allreduce_bench:
//
//   mpirun --allow-run-as-root -np 2 --mca pml ob1 --mca btl self,vader
//       build/bin/allreduce_bench_mpi --impl openmpi-shm   (one line)
//
// Sizes: --latency-kib (timed over --latency-iters back-to-back calls per
// run) and --sizes-mib (one call per run); --runs timed runs after one
// warm-up, each started after a barrier; rank 0 prints the median.
#include <mpi.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <iostream>
#include <nlohmann/json.hpp>
#include <vector>

#include "bench/bench_stats.h"

namespace {

using ::parallax::bench::Median;

void Emit(const std::string& impl, const std::string& metric, const std::string& unit, double value,
          int runs, size_t bytes, int ranks) {
  nlohmann::json j = {{"bench", "allreduce"}, {"impl", impl},     {"metric", metric},
                      {"unit", unit},         {"stat", "median"}, {"runs", runs},
                      {"value", value},       {"bytes", bytes},   {"ranks", ranks}};
  std::cout << j.dump() << std::endl;
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  std::string impl = "openmpi";
  int runs = 5, latency_iters = 200;
  std::vector<int> sizes_mib = {1, 16, 100};
  std::vector<int> latency_kib = {64};
  CLI::App app{"MPI_Allreduce timed like allreduce_bench (run under mpirun)"};
  app.add_option("--impl", impl, "the \"impl\" of the JSON lines");
  app.add_option("--runs", runs)->check(CLI::Range(1, 1000));
  app.add_option("--sizes-mib", sizes_mib)->delimiter(',');
  app.add_option("--latency-kib", latency_kib)->delimiter(',');
  app.add_option("--latency-iters", latency_iters)->check(CLI::Range(1, 100000));
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    MPI_Finalize();
    return app.exit(e);
  }
  int rank = 0, ranks = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &ranks);
  std::vector<std::pair<size_t, int>> sizes;  // (bytes, calls per timed run)
  for (int kib : latency_kib) sizes.push_back({static_cast<size_t>(kib) << 10, latency_iters});
  for (int mib : sizes_mib) sizes.push_back({static_cast<size_t>(mib) << 20, 1});
  for (auto [bytes, calls] : sizes) {
    const int count = static_cast<int>(bytes / sizeof(float));
    std::vector<float> data(count, 1.0f);
    MPI_Allreduce(MPI_IN_PLACE, data.data(), count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    std::vector<double> seconds;
    for (int run = 0; run < runs; ++run) {
      MPI_Barrier(MPI_COMM_WORLD);
      const auto start = std::chrono::steady_clock::now();
      for (int c = 0; c < calls; ++c) {
        MPI_Allreduce(MPI_IN_PLACE, data.data(), count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
      }
      seconds.push_back(
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() / calls);
    }
    if (rank == 0) {
      const double t = Median(seconds);
      Emit(impl, "time_ms", "ms", t * 1e3, runs, bytes, ranks);
      Emit(impl, "algbw_GBps", "GB/s", static_cast<double>(bytes) / t / 1e9, runs, bytes, ranks);
    }
  }
  MPI_Finalize();
  return 0;
}
