// The NCCL backend: rank 0 creates an ncclUniqueId and publishes it through
// the RendezvousStore; every rank creates one non-blocking communicator on
// its device and a CUDA stream. Collectives are enqueued on that stream and
// waited for by polling an event and ncclCommGetAsyncError until the
// deadline; on timeout or a peer error the communicator is aborted (so no
// kernel stays stuck) and the call returns a Status.
//
// Memory passed to collectives is device memory on options.device.
#include "core/comm/backends.h"

#if PARALLAX_HAVE_NCCL
#include <cuda_runtime_api.h>
#include <nccl.h>

#include <atomic>
#include <cstring>
#include <mutex>
#include <thread>

#include "core/comm/rendezvous_store.h"
#endif

namespace parallax::comm {

#if PARALLAX_HAVE_NCCL
bool NcclCompiledIn() { return true; }

int VisibleCudaDevices() {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess ? n : 0;
}

namespace internal {
namespace {

std::string CudaError(cudaError_t e) {
  return std::string(cudaGetErrorName(e)) + ": " + cudaGetErrorString(e);
}

ncclDataType_t NcclType(DataType type) {
  switch (type) {
    case DataType::kFloat32:
      return ncclFloat32;
    case DataType::kFloat16:
      return ncclFloat16;
    case DataType::kBFloat16:
      return ncclBfloat16;
    case DataType::kInt32:
      return ncclInt32;
    case DataType::kUInt8:
      return ncclUint8;
  }
  return ncclFloat32;
}

class NcclCommunicator : public Communicator {
 public:
  NcclCommunicator(CommunicatorOptions options, ncclComm_t comm, cudaStream_t stream,
                   cudaEvent_t event, void* scratch)
      : options_(std::move(options)),
        comm_(comm),
        stream_(stream),
        event_(event),
        scratch_(scratch) {}

  ~NcclCommunicator() override {
    std::lock_guard<std::mutex> lock(mu_);
    cudaSetDevice(options_.device);
    if (comm_ != nullptr) {
      if (broken_.ok()) {
        ncclCommFinalize(comm_);
        WaitComm(DeadlineAfter(std::chrono::milliseconds(10'000))).IgnoreError();
        ncclCommDestroy(comm_);
      } else {
        ncclCommAbort(comm_);
      }
    }
    if (scratch_ != nullptr) cudaFree(scratch_);
    cudaEventDestroy(event_);
    cudaStreamDestroy(stream_);
  }

  int rank() const override { return options_.rank; }
  int world_size() const override { return options_.world_size; }
  Backend backend() const override { return Backend::kNccl; }
  bool Supports(DataType) const override { return true; }
  WireCounters wire_bytes() const override {
    return {counters_[0].Load(), counters_[1].Load(), counters_[2].Load()};
  }

  Status AllReduce(void* data, size_t count, DataType type, ReduceOp op,
                   Deadline deadline) override {
    std::string what =
        "AllReduce of " + std::to_string(count) + " " + std::string(DataTypeName(type));
    const int64_t n = options_.world_size;
    const int64_t ring = 2 * (n - 1) * static_cast<int64_t>(count * DataTypeSize(type)) / n;
    return Counted(0, {ring, ring}, Run(what, count, data, deadline, [&] {
                     return ncclAllReduce(data, data, count, NcclType(type),
                                          op == ReduceOp::kMean ? ncclAvg : ncclSum, comm_,
                                          stream_);
                   }));
  }

  Status Broadcast(void* data, size_t count, DataType type, int root, Deadline deadline) override {
    std::string what = "Broadcast of " + std::to_string(count) + " " +
                       std::string(DataTypeName(type)) + " from rank " + std::to_string(root);
    if (root < 0 || root >= options_.world_size) {
      return InvalidArgument(Prefix() + what + ": root is not a rank");
    }
    // Ring: every rank but the root receives the buffer, every rank but the
    // root's left neighbour forwards it.
    const int n = options_.world_size;
    const auto bytes = static_cast<int64_t>(count * DataTypeSize(type));
    const int position = (options_.rank - root + n) % n;
    const WireBytes wire{position == n - 1 ? 0 : bytes, position == 0 ? 0 : bytes};
    return Counted(2, n == 1 ? WireBytes{} : wire, Run(what, count, data, deadline, [&] {
                     return ncclBroadcast(data, data, count, NcclType(type), root, comm_, stream_);
                   }));
  }

  Status AllGather(const void* in, size_t count, DataType type, void* out,
                   Deadline deadline) override {
    std::string what =
        "AllGather of " + std::to_string(count) + " " + std::string(DataTypeName(type));
    const auto ring = static_cast<int64_t>((options_.world_size - 1) * count * DataTypeSize(type));
    return Counted(1, {ring, ring}, Run(what, count, out, deadline, [&] {
                     return ncclAllGather(in, out, count, NcclType(type), comm_, stream_);
                   }));
  }

  // NCCL has no all-gather-v; one broadcast per rank into its slice, grouped
  // into a single NCCL launch.
  Status AllGatherv(const void* in, const std::vector<size_t>& counts, DataType type, void* out,
                    Deadline deadline) override {
    if (counts.size() != static_cast<size_t>(options_.world_size)) {
      return InvalidArgument(Prefix() + "AllGatherv: " + std::to_string(counts.size()) +
                             " counts given for a world of " + std::to_string(options_.world_size));
    }
    size_t total = 0;
    for (size_t c : counts) total += c;
    std::string what =
        "AllGatherv of " + std::to_string(total) + " " + std::string(DataTypeName(type));
    // Ring model: sends every slice but the next rank's, receives every
    // slice but its own.
    const int n = options_.world_size;
    const auto esize = static_cast<int64_t>(DataTypeSize(type));
    const WireBytes wire{
        n == 1 ? 0 : static_cast<int64_t>(total - counts[(options_.rank + 1) % n]) * esize,
        n == 1 ? 0 : static_cast<int64_t>(total - counts[options_.rank]) * esize};
    return Counted(1, wire, Run(what, total, out, deadline, [&] {
                     ncclResult_t r = ncclGroupStart();
                     if (r != ncclSuccess) return r;
                     size_t offset = 0;
                     for (int peer = 0; peer < options_.world_size; ++peer) {
                       char* slice = static_cast<char*>(out) + offset * DataTypeSize(type);
                       const void* src = peer == options_.rank ? in : slice;
                       r = ncclBroadcast(src, slice, counts[peer], NcclType(type), peer, comm_,
                                         stream_);
                       if (r != ncclSuccess && r != ncclInProgress) break;
                       offset += counts[peer];
                     }
                     ncclResult_t end = ncclGroupEnd();
                     return r != ncclSuccess && r != ncclInProgress ? r : end;
                   }));
  }

  Status Barrier(Deadline deadline) override {
    return Run("Barrier", 1, scratch_, deadline, [&] {
      return ncclAllReduce(scratch_, scratch_, 1, ncclInt32, ncclSum, comm_, stream_);
    });
  }

  // Aborts the communicator after a failed setup.
  void Abandon(const Status& why) {
    std::lock_guard<std::mutex> lock(mu_);
    Fail(why).IgnoreError();
  }

  // Waits for a non-blocking communicator's pending work to be accepted.
  Status WaitComm(Deadline deadline) {
    while (true) {
      ncclResult_t state = ncclSuccess;
      ncclCommGetAsyncError(comm_, &state);
      if (state == ncclSuccess) return Status::Ok();
      if (state != ncclInProgress) return Unavailable(ncclGetErrorString(state));
      if (std::chrono::steady_clock::now() >= deadline)
        return DeadlineExceeded("NCCL still in progress");
      std::this_thread::yield();
    }
  }

 private:
  std::string Prefix() const { return RankName(options_) + ": "; }

  template <typename Enqueue>
  Status Run(const std::string& what, size_t count, const void* data, Deadline deadline,
             Enqueue enqueue) {
    if (data == nullptr && count > 0) return InvalidArgument(Prefix() + what + ": null buffer");
    std::lock_guard<std::mutex> lock(mu_);
    if (!broken_.ok()) {
      return FailedPrecondition(Prefix() + what + ": communicator is broken by an earlier error (" +
                                broken_.message() + "); start a new attempt");
    }
    cudaSetDevice(options_.device);
    ncclResult_t r = enqueue();
    if (r != ncclSuccess && r != ncclInProgress) {
      return Fail(Internal(Prefix() + what + " could not be enqueued: " + ncclGetErrorString(r) +
                           " (" + ncclGetLastError(comm_) + ")"));
    }
    Status s = WaitComm(deadline);
    if (!s.ok()) return Fail(Status(s.code(), Prefix() + what + ": " + s.message()));
    cudaError_t e = cudaEventRecord(event_, stream_);
    if (e != cudaSuccess) return Fail(Internal(Prefix() + what + ": " + CudaError(e)));
    while (true) {
      e = cudaEventQuery(event_);
      if (e == cudaSuccess) return Status::Ok();
      if (e != cudaErrorNotReady) return Fail(Internal(Prefix() + what + ": " + CudaError(e)));
      ncclResult_t async = ncclSuccess;
      ncclCommGetAsyncError(comm_, &async);
      if (async != ncclSuccess && async != ncclInProgress) {
        return Fail(Unavailable(Prefix() + what + " failed: a peer is gone (" +
                                ncclGetErrorString(async) + ")"));
      }
      if (std::chrono::steady_clock::now() >= deadline) {
        return Fail(DeadlineExceeded(Prefix() + what + " did not finish before its deadline: a " +
                                     "peer did not take part (is every rank alive?)"));
      }
      std::this_thread::yield();
    }
  }

  // Adds `wire` to counter `kind` (0 all-reduce, 1 all-gather, 2 other)
  // when `s` is OK; returns `s`.
  Status Counted(int kind, WireBytes wire, Status s) {
    if (s.ok()) {
      counters_[kind].sent.fetch_add(wire.sent, std::memory_order_relaxed);
      counters_[kind].received.fetch_add(wire.received, std::memory_order_relaxed);
    }
    return s;
  }

  Status Fail(Status s) {
    broken_ = s;
    if (comm_ != nullptr) ncclCommAbort(comm_);  // unblocks kernels waiting on a dead peer
    comm_ = nullptr;
    return s;
  }

  struct Counter {
    std::atomic<int64_t> sent{0};
    std::atomic<int64_t> received{0};
    WireBytes Load() const {
      return {sent.load(std::memory_order_relaxed), received.load(std::memory_order_relaxed)};
    }
  };

  const CommunicatorOptions options_;
  Counter counters_[3];  // any thread; see wire_bytes()
  std::mutex mu_;
  ncclComm_t comm_;      // guarded by mu_; null once aborted
  cudaStream_t stream_;  // guarded by mu_
  cudaEvent_t event_;    // guarded by mu_
  void* scratch_;        // one int32 on the device, for Barrier
  Status broken_;        // guarded by mu_
};

}  // namespace

StatusOr<std::unique_ptr<Communicator>> CreateNcclCommunicator(const CommunicatorOptions& options,
                                                               RendezvousStore* store) {
  const std::string who = RankName(options);
  int devices = 0;
  cudaError_t e = cudaGetDeviceCount(&devices);
  if (e != cudaSuccess || devices == 0) {
    return FailedPrecondition(who + ": NCCL requested but no CUDA device is visible: " +
                              (e != cudaSuccess ? CudaError(e) : std::string("0 devices")) +
                              "; use the gloo backend on CPU hosts or check CUDA_VISIBLE_DEVICES");
  }
  if (options.device < 0 || options.device >= devices) {
    return InvalidArgument(who + ": CUDA device " + std::to_string(options.device) +
                           " does not exist; " + std::to_string(devices) + " visible");
  }
  const std::string key = options.key_prefix + "/nccl_unique_id";
  ncclUniqueId id;
  if (options.rank == 0) {
    ncclResult_t r = ncclGetUniqueId(&id);
    if (r != ncclSuccess) return Internal(who + ": ncclGetUniqueId: " + ncclGetErrorString(r));
    PX_RETURN_IF_ERROR(store->Set(key, std::string(id.internal, sizeof(id.internal))));
  } else {
    StatusOr<std::vector<std::string>> v =
        store->Get({key}, DeadlineAfter(options.rendezvous_timeout));
    if (!v.ok()) {
      return Status(v.status().code(), who + ": rank 0 did not publish the NCCL id \"" + key +
                                           "\": " + v.status().message());
    }
    if (v.value()[0].size() != sizeof(id.internal)) {
      return InvalidArgument(who + ": the NCCL id under \"" + key + "\" has the wrong size");
    }
    std::memcpy(id.internal, v.value()[0].data(), sizeof(id.internal));
  }
  e = cudaSetDevice(options.device);
  if (e != cudaSuccess) return FailedPrecondition(who + ": cudaSetDevice: " + CudaError(e));
  cudaStream_t stream = nullptr;
  cudaEvent_t event = nullptr;
  void* scratch = nullptr;
  if ((e = cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking)) != cudaSuccess ||
      (e = cudaEventCreateWithFlags(&event, cudaEventDisableTiming)) != cudaSuccess ||
      (e = cudaMalloc(&scratch, sizeof(int32_t))) != cudaSuccess) {
    return Internal(who + ": CUDA setup: " + CudaError(e));
  }
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  ncclComm_t comm = nullptr;
  ncclResult_t r = ncclCommInitRankConfig(&comm, options.world_size, id, options.rank, &config);
  auto comm_ptr = std::make_unique<NcclCommunicator>(options, comm, stream, event, scratch);
  if (r != ncclSuccess && r != ncclInProgress) {
    Status s = Unavailable(who + ": ncclCommInitRank: " + ncclGetErrorString(r));
    comm_ptr->Abandon(s);
    return s;
  }
  Status s = comm_ptr->WaitComm(DeadlineAfter(options.rendezvous_timeout));
  if (!s.ok()) {
    comm_ptr->Abandon(s);
    return Status(s.code(), who + ": NCCL communicator setup under \"" + key +
                                "\" did not complete: " + s.message() + "; is every rank running?");
  }
  return std::unique_ptr<Communicator>(std::move(comm_ptr));
}

}  // namespace internal

#else  // !PARALLAX_HAVE_NCCL

bool NcclCompiledIn() { return false; }

int VisibleCudaDevices() { return 0; }

namespace internal {
StatusOr<std::unique_ptr<Communicator>> CreateNcclCommunicator(const CommunicatorOptions& options,
                                                               RendezvousStore*) {
  return FailedPrecondition(RankName(options) +
                            ": NCCL requested but this build has no CUDA/NCCL (configure with "
                            "CUDA and NCCL under /usr/local/cuda); use the gloo backend");
}
}  // namespace internal

#endif  // PARALLAX_HAVE_NCCL

}  // namespace parallax::comm
