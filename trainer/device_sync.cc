#include "trainer/device_sync.h"

#include "core/comm/device_memory.h"

namespace parallax::trainer {

StatusOr<int> DeviceSync::DeviceOf(const void* device_grad) {
  return comm::DeviceOfPointer(device_grad);
}

Status DeviceSync::ToHost(int device, const void* device_grad, size_t count, bool reduce,
                          std::vector<float>* host) {
  if (reduce && options_.world.world_size > 1) {
    if (!nccl_) {
      comm::CommunicatorOptions co = options_.world;
      co.backend = comm::Backend::kNccl;
      co.key_prefix += "/nccl";
      co.device = device;
      auto comm = comm::Communicator::Create(co, store_);
      if (!comm.ok()) return comm.status().WithContext("joining the NCCL communicator");
      nccl_ = std::move(comm).value();
    }
    PX_RETURN_IF_ERROR(nccl_
                           ->AllReduce(const_cast<void*>(device_grad), count,
                                       comm::DataType::kFloat32, comm::ReduceOp::kMean,
                                       std::chrono::steady_clock::now() + options_.step_timeout)
                           .WithContext("all-reduce on the device"));
  }
  host->resize(count);
  return comm::CopyDeviceToHost(device_grad, host->data(), count * sizeof(float));
}

}  // namespace parallax::trainer
