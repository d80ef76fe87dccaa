// allreduce_bench: dense all-reduce bandwidth of the Communicator with
// --ranks processes on this host (--transport shm: through shared memory,
// the default; tcp: Gloo over loopback), against calling Gloo directly in
// the same run, and fused against unfused small gradients. Open MPI's
// figures come from allreduce_bench_mpi; bench/allreduce_compare.py runs
// both, alternating.
//
//   sizes: --sizes-mib (default 1, 16, 100) of float32, --runs timed runs each
//     after one warm-up; algorithm bandwidth = bytes / time, bus bandwidth =
//     algbw * 2 (n - 1) / n (what each link carries in a ring). Sizes of
//     --latency-kib (default 64 KiB) are timed over --latency-iters calls
//     in a row per run (per-call time: one call is too short to time alone).
//   raw Gloo at the largest size and at --latency-kib, runs interleaved with
//   the Communicator's:
//     gloo::allreduce (AllreduceOptions, the entry point the Communicator
//     uses) and the older gloo::AllreduceRingChunked algorithm class.
//   fusion: the same bytes as --tensors tensors (default 400 x 256 KiB)
//     through GradientFusion with the default 64 MiB buckets and with fusion
//     off (one all-reduce per tensor).
//
// The parent spawns the ranks (this binary with --rank) and they rendezvous
// through a file store in a temporary directory. Rank 0 times each run from
// a barrier to the end of its call and prints one JSON object per line and
// statistic (the median over the runs).
#include <gloo/allreduce.h>
#include <gloo/allreduce_ring_chunked.h>
#include <gloo/barrier.h>
#include <gloo/math.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/file_store.h>
#include <gloo/rendezvous/prefix_store.h>
#include <gloo/transport/tcp/device.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <iostream>
#include <nlohmann/json.hpp>
#include <thread>

#include "bench/bench_stats.h"
#include "core/comm/communicator.h"
#include "core/comm/gradient_fusion.h"
#include "core/comm/rendezvous_store.h"

extern char** environ;

namespace parallax::comm {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

struct Args {
  int ranks = 2;
  int rank = -1;  // -1: parent
  std::string store_dir;
  int runs = 5;
  std::vector<int> sizes_mib = {1, 16, 100};
  std::vector<int> latency_kib = {64};  // small sizes also compared with raw Gloo
  int latency_iters = 200;
  int tensors = 400;
  int tensor_kib = 256;
  bool skip_raw = false;
  std::string transport = "shm";  // shm | tcp
  int shm_chunk_kib = 0;          // 0: the Communicator's default
};

// `v` with 5 significant digits.
std::string Significant(double v) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.5g", v);
  return buf;
}

double Seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

using ::parallax::bench::Median;

void Emit(const std::string& bench, const std::string& impl, const std::string& metric,
          const std::string& unit, double value, int runs, size_t bytes, int ranks,
          int tensors = 0) {
  nlohmann::json j = {{"bench", bench},
                      {"impl", impl},
                      {"metric", metric},
                      {"unit", unit},
                      {"stat", "median"},
                      {"runs", runs},
                      {"value", std::stod(Significant(value))},
                      {"bytes", bytes},
                      {"ranks", ranks}};
  if (tensors > 0) j["tensors"] = tensors;
  std::cout << j.dump() << std::endl;
}

void EmitBandwidth(const std::string& impl, const std::vector<double>& seconds, size_t bytes,
                   int ranks) {
  double t = Median(seconds);
  double algbw = static_cast<double>(bytes) / t / 1e9;
  Emit("allreduce", impl, "time_ms", "ms", t * 1e3, static_cast<int>(seconds.size()), bytes, ranks);
  Emit("allreduce", impl, "algbw_GBps", "GB/s", algbw, static_cast<int>(seconds.size()), bytes,
       ranks);
  Emit("allreduce", impl, "busbw_GBps", "GB/s", algbw * 2.0 * (ranks - 1) / ranks,
       static_cast<int>(seconds.size()), bytes, ranks);
}

void Fail(const std::string& what, const Status& s) {
  std::cerr << "allreduce_bench: " << what << ": " << s.ToString() << std::endl;
  std::exit(2);
}

// A Gloo context of its own (same store, another prefix), for the raw runs.
std::shared_ptr<gloo::Context> RawGlooContext(const Args& args) {
  gloo::rendezvous::FileStore file(args.store_dir);
  gloo::rendezvous::PrefixStore store("raw", file);
  gloo::transport::tcp::attr attr;
  attr.hostname = "127.0.0.1";
  auto device = gloo::transport::tcp::CreateDevice(attr);
  auto context = std::make_shared<gloo::rendezvous::Context>(args.rank, args.ranks);
  context->setTimeout(milliseconds(120'000));
  context->connectFullMesh(store, device);
  return context;
}

int RunRank(const Args& args) {
  auto store = NewFileRendezvousStore(args.store_dir);
  if (!store.ok()) Fail("store", store.status());
  CommunicatorOptions options;
  options.rank = args.rank;
  options.world_size = args.ranks;
  options.key_prefix = "bench";
  options.rendezvous_timeout = milliseconds(60'000);
  options.shared_memory = args.transport == "shm";
  if (args.shm_chunk_kib > 0)
    options.shm_chunk_bytes = static_cast<size_t>(args.shm_chunk_kib) << 10;
  const std::string impl = args.transport == "shm" ? "parallax" : "parallax-tcp";
  auto made = Communicator::Create(options, store.value().get());
  if (!made.ok()) Fail("communicator", made.status());
  Communicator& comm = *made.value();
  std::shared_ptr<gloo::Context> raw = args.skip_raw ? nullptr : RawGlooContext(args);
  const bool report = args.rank == 0;
  auto deadline = [] { return DeadlineAfter(milliseconds(120'000)); };
  auto barrier = [&] {
    Status s = comm.Barrier(deadline());
    if (!s.ok()) Fail("barrier", s);
  };
  auto timed = [&](const std::function<void()>& fn) {
    barrier();
    auto start = Clock::now();
    fn();
    return Seconds(Clock::now() - start);
  };
  auto parallax_allreduce = [&](std::vector<float>& data) {
    Status s = comm.AllReduce(data, ReduceOp::kSum, deadline());
    if (!s.ok()) Fail("AllReduce", s);
  };
  uint32_t raw_tag = 1000;
  auto gloo_allreduce = [&](std::vector<float>& data) {
    gloo::AllreduceOptions opts(raw);
    opts.setOutput(data.data(), data.size());
    opts.setReduceFunction(
        static_cast<void (*)(void*, const void*, const void*, size_t)>(&gloo::sum<float>));
    opts.setTag(raw_tag++);
    gloo::allreduce(opts);
  };

  const int largest = *std::max_element(args.sizes_mib.begin(), args.sizes_mib.end());
  struct Size {
    size_t bytes;
    bool raw_too;  // compare with raw Gloo
    int calls;     // per timed run
  };
  std::vector<Size> sizes;
  for (int kib : args.latency_kib) {
    sizes.push_back({static_cast<size_t>(kib) << 10, true, args.latency_iters});
  }
  for (int mib : args.sizes_mib)
    sizes.push_back({static_cast<size_t>(mib) << 20, mib == largest, 1});
  for (const Size& size : sizes) {
    const size_t count = size.bytes / sizeof(float);
    std::vector<float> data(count, 1.0f);
    const bool compare = size.raw_too && raw != nullptr;
    std::unique_ptr<gloo::AllreduceRingChunked<float>> chunked;
    if (compare) {
      chunked = std::make_unique<gloo::AllreduceRingChunked<float>>(
          raw, std::vector<float*>{data.data()}, static_cast<int>(count));
    }
    parallax_allreduce(data);  // warm-up: connections, page faults
    if (compare) {
      gloo_allreduce(data);
      chunked->run();
    }
    auto repeat = [&](const std::function<void()>& fn) {
      return timed([&] {
               for (int c = 0; c < size.calls; ++c) fn();
             }) /
             size.calls;
    };
    std::vector<double> ours, direct, ring_chunked;
    for (int run = 0; run < args.runs; ++run) {
      ours.push_back(repeat([&] { parallax_allreduce(data); }));
      if (compare) {
        direct.push_back(repeat([&] { gloo_allreduce(data); }));
        ring_chunked.push_back(repeat([&] { chunked->run(); }));
      }
    }
    if (report) {
      EmitBandwidth(impl, ours, count * sizeof(float), args.ranks);
      if (compare) {
        EmitBandwidth("gloo_allreduce", direct, count * sizeof(float), args.ranks);
        EmitBandwidth("gloo_ring_chunked", ring_chunked, count * sizeof(float), args.ranks);
        Emit("allreduce", impl + "_vs_gloo_allreduce", "time_ratio", "x",
             Median(ours) / Median(direct), args.runs, count * sizeof(float), args.ranks);
      }
    }
  }

  // Fusion: many small tensors, fused into buckets or one all-reduce each.
  const size_t per = static_cast<size_t>(args.tensor_kib) * 1024 / sizeof(float);
  std::vector<std::vector<float>> grads(args.tensors, std::vector<float>(per, 1.0f));
  // One GradientFusion each, kept across steps as the trainer keeps its
  // own (a fresh one would time the first touches of its buckets).
  auto make = [&](size_t bucket_bytes) {
    FusionOptions fo;
    fo.bucket_bytes = bucket_bytes;
    fo.op = ReduceOp::kSum;
    return std::make_unique<GradientFusion>(&comm, fo);
  };
  auto fusion_on = make(FusionOptions{}.bucket_bytes);
  auto fusion_off = make(0);
  auto step = [&](GradientFusion& fusion) {
    return timed([&] {
      for (auto& g : grads) {
        Status s = fusion.Register(g.data(), g.size());
        if (!s.ok()) Fail("Register", s);
      }
      Status s = fusion.Synchronize(deadline());
      if (!s.ok()) Fail("Synchronize", s);
    });
  };
  step(*fusion_on);  // warm-up
  step(*fusion_off);
  std::vector<double> fused, unfused;
  for (int run = 0; run < args.runs; ++run) {
    fused.push_back(step(*fusion_on));
    unfused.push_back(step(*fusion_off));
  }
  if (report) {
    size_t bytes = per * sizeof(float) * args.tensors;
    Emit("allreduce_fusion", impl + "_fused", "time_ms", "ms", Median(fused) * 1e3, args.runs,
         bytes, args.ranks, args.tensors);
    Emit("allreduce_fusion", impl + "_unfused", "time_ms", "ms", Median(unfused) * 1e3, args.runs,
         bytes, args.ranks, args.tensors);
    Emit("allreduce_fusion", impl + "_fused", "speedup_vs_unfused", "x",
         Median(unfused) / Median(fused), args.runs, bytes, args.ranks, args.tensors);
  }
  barrier();
  return 0;
}

int RunParent(const Args& args, const std::string& self) {
  char tmpl[] = "/tmp/allreduce-bench-XXXXXX";
  if (mkdtemp(tmpl) == nullptr) {
    std::cerr << "allreduce_bench: mkdtemp failed" << std::endl;
    return 2;
  }
  std::string dir = tmpl;
  auto join = [](const std::vector<int>& v) {
    std::string out;
    for (int x : v) out += (out.empty() ? "" : ",") + std::to_string(x);
    return out;
  };
  std::string sizes = join(args.sizes_mib);
  std::vector<pid_t> pids;
  for (int r = 0; r < args.ranks; ++r) {
    std::vector<std::string> argv = {self,
                                     "--rank",
                                     std::to_string(r),
                                     "--ranks",
                                     std::to_string(args.ranks),
                                     "--store-dir",
                                     dir,
                                     "--runs",
                                     std::to_string(args.runs),
                                     "--sizes-mib",
                                     sizes,
                                     "--latency-kib",
                                     join(args.latency_kib),
                                     "--tensors",
                                     std::to_string(args.tensors),
                                     "--tensor-kib",
                                     std::to_string(args.tensor_kib),
                                     "--latency-iters",
                                     std::to_string(args.latency_iters),
                                     "--transport",
                                     args.transport,
                                     "--shm-chunk-kib",
                                     std::to_string(args.shm_chunk_kib)};
    if (args.skip_raw) argv.push_back("--skip-raw");
    std::vector<char*> cargv;
    for (auto& a : argv) cargv.push_back(a.data());
    cargv.push_back(nullptr);
    pid_t pid;
    if (posix_spawn(&pid, self.c_str(), nullptr, nullptr, cargv.data(), environ) != 0) {
      std::cerr << "allreduce_bench: cannot spawn " << self << std::endl;
      return 2;
    }
    pids.push_back(pid);
  }
  int rc = 0;
  for (pid_t pid : pids) {
    int status = 0;
    waitpid(pid, &status, 0);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
      rc = 1;
      for (pid_t other : pids) kill(other, SIGKILL);  // never leave a rank waiting
    }
  }
  std::filesystem::remove_all(dir);
  return rc;
}

}  // namespace
}  // namespace parallax::comm

int main(int argc, char** argv) {
  parallax::comm::Args args;
  CLI::App app{"dense all-reduce benchmark: Communicator vs raw Gloo, fusion"};
  app.add_option("--ranks", args.ranks, "processes on loopback")->check(CLI::Range(2, 64));
  app.add_option("--runs", args.runs, "timed runs per measurement")->check(CLI::Range(1, 1000));
  app.add_option("--sizes-mib", args.sizes_mib, "all-reduce sizes in MiB of float32")
      ->delimiter(',');
  app.add_option("--latency-kib", args.latency_kib, "small sizes (KiB) also compared with raw Gloo")
      ->delimiter(',');
  app.add_option("--tensors", args.tensors, "fusion: number of small tensors");
  app.add_option("--tensor-kib", args.tensor_kib, "fusion: size of each small tensor");
  app.add_flag("--skip-raw", args.skip_raw, "do not compare against raw Gloo");
  app.add_option("--latency-iters", args.latency_iters,
                 "calls per timed run at --latency-kib sizes")
      ->check(CLI::Range(1, 100000));
  app.add_option("--transport", args.transport, "shm (shared memory, the default) or tcp")
      ->check(CLI::IsMember({"shm", "tcp"}));
  app.add_option("--shm-chunk-kib", args.shm_chunk_kib,
                 "bytes each rank stages per shared-memory step, KiB (0: default)");
  app.add_option("--rank", args.rank)->group("");  // internal: a rank process
  app.add_option("--store-dir", args.store_dir)->group("");
  CLI11_PARSE(app, argc, argv);
  if (args.rank >= 0) return parallax::comm::RunRank(args);
  return parallax::comm::RunParent(args, "/proc/self/exe");
}
