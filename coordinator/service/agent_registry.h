// AgentRegistry: what the coordinator knows of each agent besides its stored
// record (coordinator/store/state_store.h), kept in memory only: the workdir id it
// registered with, whether it deregistered on a clean stop, and what looks
// wrong in its registration. It decides who may take over a live agent's
// name at once:
//   - the same agent restarted: its registration carries the workdir id of
//     the last one (the new process holds the workdir's lock, so the one
//     that registered before has exited);
//   - any agent after the name's holder deregistered.
// Anyone else waits for the holder's silence to pass the agent timeout
// (CoordinatorService::RegisterAgent). A restarted coordinator has an empty
// registry: until an agent registers again, only the timeout rule holds.
//
// Thread-safe.
#ifndef PARALLAX_COORDINATOR_AGENT_REGISTRY_H_
#define PARALLAX_COORDINATOR_AGENT_REGISTRY_H_

#include <map>
#include <mutex>
#include <string>

#include "schemas/coordinator_types.h"

namespace parallax::coordinator {

class AgentRegistry {
 public:
  // `coordinator_on_loopback`: the coordinator listens on loopback only,
  // so every agent is on its host and loopback addresses are right.
  explicit AgentRegistry(bool coordinator_on_loopback)
      : coordinator_on_loopback_(coordinator_on_loopback) {}

  // Whether `agent` may take its name over from a live registration at
  // another address (see the file comment).
  bool MayTakeOver(const rpc::AgentInfo& agent) const;

  // Records a registration. Returns a warning for the operator ("" when
  // none): the agent's log service or its tasks are on loopback while the
  // coordinator is reached from other hosts, so ranks on other hosts and
  // `parallax logs` cannot reach them.
  std::string Registered(const rpc::AgentInfo& agent);

  // Records a clean stop of `name`. False (nothing changed) when
  // `workdir_id` is not the one the name registered with.
  bool Deregistered(const std::string& name, const std::string& workdir_id);

  // Sets `info`'s stopped and warning fields; a stopped agent is not alive.
  void Describe(rpc::AgentInfo* info) const;

 private:
  struct Entry {
    std::string workdir_id;
    bool stopped = false;
    std::string warning;
  };

  const bool coordinator_on_loopback_;
  mutable std::mutex mu_;
  std::map<std::string, Entry> agents_;  // GUARDED_BY(mu_)
};

// The host of "HOST:PORT" or "[V6]:PORT".
std::string HostOfAddress(const std::string& address);

}  // namespace parallax::coordinator

#endif  // PARALLAX_COORDINATOR_AGENT_REGISTRY_H_
