// The NCCL backend on a host without a device (or without NCCL in the
// build): asking for it fails at once with a Status that says why.
#include <gtest/gtest.h>

#include "core/comm/communicator.h"
#include "core/comm/rendezvous_store.h"

namespace parallax::comm {
namespace {

TEST(NcclCommunicatorTest, WithoutADeviceCreateFailsClearly) {
  if (VisibleCudaDevices() > 0) GTEST_SKIP() << "a CUDA device is visible; see comm_gpu_tests";
  auto store = NewInMemoryRendezvousStore();
  CommunicatorOptions options;
  options.backend = Backend::kNccl;
  options.rank = 1;
  options.world_size = 2;
  auto start = std::chrono::steady_clock::now();
  auto comm = Communicator::Create(options, store.get());
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(10));
  ASSERT_FALSE(comm.ok());
  EXPECT_EQ(comm.status().code(), StatusCode::kFailedPrecondition) << comm.status().ToString();
  const std::string expected =
      NcclCompiledIn() ? "rank 1 of 2 (nccl): NCCL requested but no CUDA device is visible: "
                       : "rank 1 of 2 (nccl): NCCL requested but this build has no CUDA/NCCL";
  EXPECT_EQ(comm.status().message().rfind(expected, 0), 0u) << comm.status().ToString();
}

}  // namespace
}  // namespace parallax::comm
