// Placement of one job's tasks on agents' slots: a pure function, so that it
// is tested without a cluster.
//
// Trainer ranks take one slot each and are packed on as few agents as
// possible, with the ranks of one agent contiguous. PS shards take no slot:
// by default one per agent the job uses, otherwise spread round-robin over
// those agents.
#ifndef PARALLAX_COORDINATOR_SCHEDULER_H_
#define PARALLAX_COORDINATOR_SCHEDULER_H_

#include <string>
#include <vector>

namespace parallax::coordinator {

struct AgentCapacity {
  std::string name;
  int slots = 0;  // all of the agent's slots
  int free = 0;   // slots not held by a live task
};

struct PlacementRequest {
  int workers = 1;
  // PS shards: -1 none, 0 one per agent used, N exactly N.
  int shards = 0;
  // Agents of the previous attempt, by rank: reused when they still fit.
  std::vector<std::string> previous;
};

struct Placement {
  enum class Fit {
    kPlaced,
    kWait,       // fits the cluster, not its free slots now: later jobs wait too (FIFO)
    kTooLarge,   // more workers than the cluster's slots: later jobs may go first
  };
  Fit fit = Fit::kWait;
  std::vector<std::string> trainer_agents;  // per rank
  std::vector<std::string> ps_agents;       // per shard
  std::string reason;                       // for kWait / kTooLarge, shown by `status`
};

// `agents` are the agents that may take tasks (alive, not draining).
Placement PlaceJob(const PlacementRequest& request, const std::vector<AgentCapacity>& agents);

}  // namespace parallax::coordinator

#endif  // PARALLAX_COORDINATOR_SCHEDULER_H_
