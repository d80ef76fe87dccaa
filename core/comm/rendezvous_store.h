// RendezvousStore: the seam through which ranks exchange their addresses (and
// NCCL's unique id) before they can talk to each other. In a job it is the
// coordinator's key-value store (coordinator_store.h), so no shared
// filesystem is needed; tests use the in-memory or file stores below, which
// are Gloo's HashStore and FileStore behind this interface.
//
// Thread-safe. Keys are set once per rendezvous; values are opaque bytes.
#ifndef PARALLAX_CORE_COMM_RENDEZVOUS_STORE_H_
#define PARALLAX_CORE_COMM_RENDEZVOUS_STORE_H_

#include <memory>
#include <string>
#include <vector>

#include "core/comm/communicator.h"
#include "parallax/status.h"

namespace parallax::comm {

class RendezvousStore {
 public:
  virtual ~RendezvousStore() = default;

  virtual Status Set(const std::string& key, const std::string& value) = 0;

  // Waits until every key exists, then returns their values in order.
  // DEADLINE_EXCEEDED names the keys still missing at the deadline.
  virtual StatusOr<std::vector<std::string>> Get(const std::vector<std::string>& keys,
                                                 Deadline deadline) = 0;
};

// A store in this process's memory (Gloo's HashStore): ranks that are
// threads share one.
std::unique_ptr<RendezvousStore> NewInMemoryRendezvousStore();

// A store of one file per key under `directory` (Gloo's FileStore), which
// must exist and be shared by the ranks (processes on one host, or a shared
// filesystem).
StatusOr<std::unique_ptr<RendezvousStore>> NewFileRendezvousStore(const std::string& directory);

}  // namespace parallax::comm

#endif  // PARALLAX_CORE_COMM_RENDEZVOUS_STORE_H_
