// A RendezvousStore on the coordinator's key-value RPCs (KvSet / KvGet), so
// ranks on different hosts bootstrap Gloo and NCCL with no shared
// filesystem. Keys are used as given; pass CommunicatorOptions::key_prefix =
// kv_keys::CommPrefix(job, attempt) so they carry the attempt.
//
// Thread-safe: each call borrows a connection from a small pool (a
// CoordinatorClient is one connection and not thread-safe), so one rank's
// blocking Get never holds up another thread's Set.
#ifndef PARALLAX_CORE_COMM_COORDINATOR_STORE_H_
#define PARALLAX_CORE_COMM_COORDINATOR_STORE_H_

#include <memory>

#include "core/comm/rendezvous_store.h"
#include "core/rpc/coordinator_client.h"
#include "parallax/status.h"

namespace parallax::comm {

// Connects once to check the address and token (UNAVAILABLE or
// PERMISSION_DENIED otherwise); later calls reconnect as needed.
StatusOr<std::unique_ptr<RendezvousStore>> ConnectCoordinatorRendezvousStore(
    const CoordinatorClientOptions& options);

}  // namespace parallax::comm

#endif  // PARALLAX_CORE_COMM_COORDINATOR_STORE_H_
