// The NCCL backend on a real device. Skipped (with the reason) where no CUDA
// device is visible. One process, one device: world of 1.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <vector>

#include "core/comm/communicator.h"
#include "core/comm/rendezvous_store.h"

namespace parallax::comm {
namespace {

using std::chrono::milliseconds;

class NcclGpuTest : public ::testing::Test {
 protected:
  void SetUp() override {
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess) GTEST_SKIP() << "no CUDA device: " << cudaGetErrorString(e);
    if (n == 0) GTEST_SKIP() << "no CUDA device: cudaGetDeviceCount returned 0";
  }
};

TEST_F(NcclGpuTest, AllReduceBroadcastAllGatherOnOneDevice) {
  auto store = NewInMemoryRendezvousStore();
  CommunicatorOptions options;
  options.backend = Backend::kNccl;
  auto comm = Communicator::Create(options, store.get());
  ASSERT_TRUE(comm.ok()) << comm.status().ToString();
  const size_t n = 1001;
  std::vector<float> host(n);
  for (size_t i = 0; i < n; ++i) host[i] = float(i);
  void* dev = nullptr;
  ASSERT_EQ(cudaMalloc(&dev, n * sizeof(float)), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(dev, host.data(), n * sizeof(float), cudaMemcpyHostToDevice), cudaSuccess);
  auto deadline = DeadlineAfter(milliseconds(30'000));
  ASSERT_TRUE(comm.value()->AllReduce(dev, n, DataType::kFloat32, ReduceOp::kMean, deadline).ok());
  ASSERT_TRUE(comm.value()->Broadcast(dev, n, DataType::kFloat32, 0, deadline).ok());
  ASSERT_TRUE(comm.value()->Barrier(deadline).ok());
  std::vector<float> back(n);
  ASSERT_EQ(cudaMemcpy(back.data(), dev, n * sizeof(float), cudaMemcpyDeviceToHost), cudaSuccess);
  EXPECT_EQ(back, host);
  cudaFree(dev);
}

}  // namespace
}  // namespace parallax::comm
