// Placement of one job's tasks on agents' slots: a pure function of the
// request and the cluster's free slots, so that it is tested without a
// cluster.
//
// Trainer ranks take one slot each and are packed on as few agents as
// possible, with the ranks of one agent contiguous; PS hosts (agents started
// with --role ps) take none. PS shards take no slot. By default ([ps] hosts
// = "workers") they go on the agents the job's ranks use: one per agent, or
// a fixed count round-robin over them. With [ps] hosts = "ps" they go on the
// PS hosts only: one per PS host, or a fixed count round-robin over them,
// the PS hosts running the fewest live shards first (ties: by name), so
// that the jobs of a cluster spread over its PS hosts.
//
// The free slots are kept in a Capacity, indexed by name and by free count,
// so that placing a job costs O(log A + agents it uses), not O(A), and a
// pass over thousands of queued jobs on a cluster of thousands of agents
// stays cheap.
#ifndef PARALLAX_COORDINATOR_SCHEDULER_H_
#define PARALLAX_COORDINATOR_SCHEDULER_H_

#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "parallax/settings.h"

namespace parallax::coordinator {

struct AgentCapacity {
  std::string name;
  int slots = 0;  // all of the agent's slots
  int free = 0;   // slots not held by a live task (may be negative after a re-registration
                  // with fewer slots; counts as 0)
  // Started with --role ps: hosts PS shards only, and its slots are not
  // trainer slots.
  bool ps_host = false;
  int shards = 0;  // PS hosts: live PS shards on it
};

// The agents that may take tasks (alive, not draining) and their free slots.
// Not thread-safe.
class Capacity {
 public:
  Capacity() = default;
  explicit Capacity(const std::vector<AgentCapacity>& agents);

  // Adds an agent, or replaces the one of that name.
  void Set(const AgentCapacity& agent);
  // Takes `n` free slots of `name` (known, with at least `n` free).
  void Take(const std::string& name, int n);
  // Counts `n` more live shards on the PS host `name` (ignored for others).
  void AddShards(const std::string& name, int n);

  int total_slots() const { return total_; }
  int free_slots() const { return free_; }
  size_t agents() const { return by_name_.size(); }
  // Free slots of `name`; 0 when unknown.
  int FreeOf(const std::string& name) const;
  // The agent with the fewest free slots that still holds `n` (ties: the
  // first name), or nullptr.
  const std::string* BestFit(int n) const;
  // Agents with free slots, most free first (ties: by name).
  std::vector<std::pair<std::string, int>> MostFreeFirst(int enough) const;
  // The PS hosts, fewest live shards first (ties: by name).
  std::vector<std::string> PsHostsByLoad() const;
  size_t ps_hosts() const { return ps_shards_.size(); }

 private:
  struct Entry {
    int slots = 0;
    int free = 0;  // >= 0
  };
  void Remove(const std::string& name);

  std::map<std::string, Entry> by_name_;
  std::set<std::pair<int, std::string>> by_free_;  // (free, name) of agents with free > 0
  std::map<std::string, int> ps_shards_;           // PS hosts: live shards on each
  int total_ = 0;
  int free_ = 0;
};

struct PlacementRequest {
  int workers = 1;
  // PS shards: -1 none, 0 one per agent used (per PS host with kPs), N
  // exactly N.
  int shards = 0;
  // Agents of the previous attempt, by rank: reused when they still fit.
  std::vector<std::string> previous;
  PsHosts ps_hosts = PsHosts::kWorkers;  // [ps] hosts: where the shards go
};

struct Placement {
  enum class Fit {
    kPlaced,
    kWait,      // fits the cluster, not its free slots now: later jobs wait too (FIFO)
    kTooLarge,  // more workers than the cluster's slots, or shards for PS hosts and no PS
                // host: later jobs may go first
  };
  Fit fit = Fit::kWait;
  std::vector<std::string> trainer_agents;  // per rank
  std::vector<std::string> ps_agents;       // per shard
  std::string reason;                       // for kWait / kTooLarge, shown by `status`
};

// Places the request on `capacity` (which is not changed: the caller takes
// the slots of a placement it keeps).
Placement PlaceJobIn(const PlacementRequest& request, const Capacity& capacity);

// The same on a list of agents (alive, not draining), in name order.
Placement PlaceJob(const PlacementRequest& request, const std::vector<AgentCapacity>& agents);

}  // namespace parallax::coordinator

#endif  // PARALLAX_COORDINATOR_SCHEDULER_H_
