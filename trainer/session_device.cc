// SessionImpl::GradientDevice (trainer/session_impl.h): dense gradients in
// CUDA memory, averaged by NCCL in device memory, then applied on the host
// like any gradient. Compiles without CUDA (core/comm/device_memory.h then
// refuses every address); untested on a GPU.
#include "core/comm/coordinator_store.h"
#include "core/comm/device_memory.h"
#include "trainer/session_impl.h"

namespace parallax::trainer {

Status SessionImpl::GradientDevice(int var, const void* device_grad, size_t count) {
  PX_RETURN_IF_ERROR(Usable("GradientDevice"));
  PX_RETURN_IF_ERROR(CheckVar(var, false, "GradientDevice"));
  Var& v = vars_[static_cast<size_t>(var)];
  if (count != v.plan.size) {
    return InvalidArgument(StepName() + ": device gradient of \"" + v.plan.name + "\" has " +
                           std::to_string(count) + " values, expected " +
                           std::to_string(v.plan.size));
  }
  if (v.grad_given) {
    return InvalidArgument(StepName() + ": gradient of \"" + v.plan.name + "\" given twice");
  }
  StatusOr<int> device = comm::DeviceOfPointer(device_grad);
  if (!device.ok())
    return device.status().WithContext(StepName() + ": gradient of \"" + v.plan.name + "\"");
  if (v.plan.path != VariablePath::kPs && options_.world_size > 1) {
    if (!device_comm_) {
      comm::CommunicatorOptions co;
      co.backend = comm::Backend::kNccl;
      co.rank = options_.rank;
      co.world_size = options_.world_size;
      co.key_prefix = comm::CommKeyPrefix(options_.job_id, options_.attempt) + "/nccl";
      co.device = *device;
      co.rendezvous_timeout = options_.rendezvous_timeout;
      auto comm = comm::Communicator::Create(co, store_.get());
      if (!comm.ok()) {
        return Fail(comm.status().WithContext("rank " + std::to_string(options_.rank) +
                                              " joining the NCCL communicator"));
      }
      device_comm_ = std::move(comm).value();
    }
    Status st =
        device_comm_->AllReduce(const_cast<void*>(device_grad), count, comm::DataType::kFloat32,
                                comm::ReduceOp::kMean, StepDeadline());
    if (!st.ok())
      return Fail(
          st.WithContext(StepName() + ": all-reduce of \"" + v.plan.name + "\" on the device"));
  }
  // The mean (or, on the PS path, this rank's gradient for the shards to
  // average) goes where a host gradient would.
  std::vector<float> host(count);
  PX_RETURN_IF_ERROR(comm::CopyDeviceToHost(device_grad, host.data(), count * sizeof(float)));
  PX_RETURN_IF_ERROR(CheckFinite(v, host));
  std::copy(host.begin(), host.end(), v.grad.begin());
  v.grad_given = true;  // Step() neither fuses nor zeroes it: it is reduced already
  return Status::Ok();
}

}  // namespace parallax::trainer
