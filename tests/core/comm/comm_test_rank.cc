// One rank of a multi-process collective test (driven by
// comm_process_test.cc): connects to the coordinator's key-value store,
// joins a Gloo communicator, checks AllReduce and GradientFusion results
// against serial sums, and exits 0. On failure prints the Status to stderr
// and exits 3. With --die-after-barrier it exits abruptly (like a crash)
// after the rendezvous and one barrier, while its peers go on to AllReduce.
// AllReduce goes through shared memory (segments in --shm-dir) unless
// --no-shm.
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <iostream>

#include "core/comm/communicator.h"
#include "core/comm/coordinator_store.h"
#include "core/comm/gradient_fusion.h"
#include "tests/core/comm/rank_threads.h"

namespace parallax::comm {
namespace {

using std::chrono::milliseconds;

Status Check(bool ok, const std::string& what) {
  return ok ? Status::Ok() : Internal("wrong result: " + what);
}

struct RankArgs {
  std::string coordinator;
  int rank = 0;
  int world = 1;
  std::string prefix = "comm";
  int timeout_ms = 20'000;
  bool die = false;
  bool shm = true;
  std::string shm_dir = "/dev/shm";
};

Status Run(const RankArgs& args) {
  const int rank = args.rank, world = args.world, timeout_ms = args.timeout_ms;
  CoordinatorClientOptions client;
  client.address = args.coordinator;
  client.client_name = "comm-rank-" + std::to_string(rank);
  PX_ASSIGN_OR_RETURN(auto store, ConnectCoordinatorRendezvousStore(client));
  CommunicatorOptions options = testing::GlooOptions(rank, world, args.prefix);
  options.rendezvous_timeout = milliseconds(timeout_ms);
  options.shared_memory = args.shm;
  options.shm_directory = args.shm_dir;
  PX_ASSIGN_OR_RETURN(auto comm, Communicator::Create(options, store.get()));
  PX_RETURN_IF_ERROR(comm->Barrier(DeadlineAfter(milliseconds(timeout_ms))));
  if (args.die) _exit(9);
  const int world_sum = world * (world + 1) / 2;
  for (size_t n : {size_t{0}, size_t{1}, size_t{13}, size_t{100'003}}) {
    std::vector<float> data(n);
    for (size_t i = 0; i < n; ++i) data[i] = testing::Value(rank, i);
    PX_RETURN_IF_ERROR(
        comm->AllReduce(data, ReduceOp::kSum, DeadlineAfter(milliseconds(timeout_ms))));
    for (size_t i = 0; i < n; ++i) {
      float expected = 0;
      for (int r = 0; r < world; ++r) expected += testing::Value(r, i);
      PX_RETURN_IF_ERROR(Check(data[i] == expected, "AllReduce of " + std::to_string(n)));
    }
  }
  // Fusion: 0, odd and larger-than-bucket gradients, mean.
  FusionOptions fo;
  fo.bucket_bytes = 1000 * sizeof(float);
  GradientFusion fusion(comm.get(), fo);
  std::vector<std::vector<float>> grads;
  for (size_t n : {size_t{0}, size_t{999}, size_t{3}, size_t{2500}, size_t{7}}) {
    grads.emplace_back(n, float(rank + 1));
  }
  for (auto& g : grads) PX_RETURN_IF_ERROR(fusion.Register(g.data(), g.size()));
  PX_RETURN_IF_ERROR(fusion.Synchronize(DeadlineAfter(milliseconds(timeout_ms))));
  for (auto& g : grads) {
    for (float v : g) PX_RETURN_IF_ERROR(Check(v == float(world_sum) / world, "fused mean"));
  }
  std::vector<float> weights(1000, float(rank));
  PX_RETURN_IF_ERROR(comm->Broadcast(weights, 0, DeadlineAfter(milliseconds(timeout_ms))));
  PX_RETURN_IF_ERROR(Check(weights[999] == 0.0f, "broadcast"));
  return comm->Barrier(DeadlineAfter(milliseconds(timeout_ms)));
}

}  // namespace
}  // namespace parallax::comm

int main(int argc, char** argv) {
  CLI::App app{"one rank of a Parallax collective test"};
  parallax::comm::RankArgs args;
  bool no_shm = false;
  app.add_option("--coordinator", args.coordinator, "HOST:PORT")->required();
  app.add_option("--rank", args.rank)->required();
  app.add_option("--world", args.world)->required();
  app.add_option("--prefix", args.prefix);
  app.add_option("--timeout-ms", args.timeout_ms);
  app.add_flag("--die-after-barrier", args.die);
  app.add_flag("--no-shm", no_shm, "all-reduce over TCP, not shared memory");
  app.add_option("--shm-dir", args.shm_dir, "where the shared-memory segment is made");
  CLI11_PARSE(app, argc, argv);
  args.shm = !no_shm;
  parallax::Status s = parallax::comm::Run(args);
  if (!s.ok()) {
    std::cerr << "rank " << args.rank << ": " << s.ToString() << std::endl;
    return 3;
  }
  std::cout << "rank " << args.rank << ": ok" << std::endl;
  return 0;
}
