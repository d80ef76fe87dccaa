// ConnectToCoordinator: a CoordinatorClient of a CoordinatorProcess. Header
// only, so that test binaries that never talk Thrift need not link px_rpc.
#ifndef PARALLAX_TESTS_TESTING_COORDINATOR_CONNECT_H_
#define PARALLAX_TESTS_TESTING_COORDINATOR_CONNECT_H_

#include <memory>

#include "core/rpc/coordinator_client.h"
#include "tests/testing/coordinator_process.h"

namespace parallax::testing {

// Connects to `coordinator` with `options` (its address is filled in).
inline StatusOr<std::unique_ptr<CoordinatorClient>> ConnectToCoordinator(
    const CoordinatorProcess& coordinator, CoordinatorClientOptions options = {}) {
  options.address = coordinator.address();
  return CoordinatorClient::Connect(options);
}

}  // namespace parallax::testing

#endif  // PARALLAX_TESTS_TESTING_COORDINATOR_CONNECT_H_
