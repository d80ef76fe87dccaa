// DeviceSync: dense gradients in CUDA memory (Session::GradientDevice),
// averaged over the job's ranks in device memory through an NCCL
// communicator that every rank joins at its first call, then copied to the
// host. Compiles without CUDA or NCCL (core/comm/device_memory.h then
// refuses every address); untested on a GPU: the development machine has
// none.
//
// Thread-compatible: the training thread calls it.
#ifndef PARALLAX_TRAINER_DEVICE_SYNC_H_
#define PARALLAX_TRAINER_DEVICE_SYNC_H_

#include <chrono>
#include <cstddef>
#include <memory>
#include <vector>

#include "core/comm/communicator.h"
#include "parallax/status.h"

namespace parallax::trainer {

class DeviceSync {
 public:
  struct Options {
    // The job's collectives (Gloo's): the NCCL communicator takes their
    // ranks, under their key prefix + "/nccl".
    comm::CommunicatorOptions world;
    std::chrono::milliseconds step_timeout{300'000};
  };

  // `store` (null with one rank) must outlive this.
  DeviceSync(const Options& options, comm::RendezvousStore* store)
      : options_(options), store_(store) {}

  // The CUDA device that holds `device_grad`. FAILED_PRECONDITION when it
  // is not device memory or the build has no CUDA.
  static StatusOr<int> DeviceOf(const void* device_grad);

  // The `count` float32 values at `device_grad` (on `device`, from
  // DeviceOf) into *host: averaged over the ranks first (in place, in device
  // memory) when `reduce` and there is more than one rank. Every rank calls
  // it for the same variables in the same order.
  Status ToHost(int device, const void* device_grad, size_t count, bool reduce,
                std::vector<float>* host);

 private:
  const Options options_;
  comm::RendezvousStore* const store_;
  std::unique_ptr<comm::Communicator> nccl_;  // made at the first reducing call
};

}  // namespace parallax::trainer

#endif  // PARALLAX_TRAINER_DEVICE_SYNC_H_
