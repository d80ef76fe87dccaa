#include "coordinator/scheduler.h"

#include <algorithm>
#include <map>

namespace parallax::coordinator {
namespace {

std::string Slots(int n) { return std::to_string(n) + (n == 1 ? " slot" : " slots"); }

// The agents used, in rank order, each once.
std::vector<std::string> Hosts(const std::vector<std::string>& by_rank) {
  std::vector<std::string> hosts;
  for (const std::string& a : by_rank) {
    if (std::find(hosts.begin(), hosts.end(), a) == hosts.end()) hosts.push_back(a);
  }
  return hosts;
}

}  // namespace

Placement PlaceJob(const PlacementRequest& request, const std::vector<AgentCapacity>& agents) {
  Placement p;
  int total = 0, free = 0;
  for (const AgentCapacity& a : agents) {
    total += a.slots;
    free += std::max(0, a.free);
  }
  if (request.workers > total) {
    p.fit = Placement::Fit::kTooLarge;
    p.reason = "needs " + Slots(request.workers) + "; the cluster has " + Slots(total) + " on " +
               std::to_string(agents.size()) + " available agent(s)";
    return p;
  }
  if (request.workers > free) {
    p.fit = Placement::Fit::kWait;
    p.reason = "needs " + Slots(request.workers) + "; " + Slots(free) + " free now";
    return p;
  }

  std::map<std::string, int> free_of;
  for (const AgentCapacity& a : agents) free_of[a.name] = std::max(0, a.free);

  // Same placement as the previous attempt, if it still fits.
  bool reuse = static_cast<int>(request.previous.size()) == request.workers;
  if (reuse) {
    std::map<std::string, int> need;
    for (const std::string& a : request.previous) ++need[a];
    for (const auto& [name, n] : need) {
      auto it = free_of.find(name);
      if (it == free_of.end() || it->second < n) reuse = false;
    }
  }
  if (reuse) {
    p.trainer_agents = request.previous;
  } else {
    // Best fit on one agent: the smallest free count that holds every rank.
    const AgentCapacity* best = nullptr;
    for (const AgentCapacity& a : agents) {
      if (a.free >= request.workers && (best == nullptr || a.free < best->free)) best = &a;
    }
    if (best != nullptr) {
      p.trainer_agents.assign(request.workers, best->name);
    } else {
      // Fewest agents: take the ones with the most free slots first.
      std::vector<const AgentCapacity*> order;
      for (const AgentCapacity& a : agents) {
        if (a.free > 0) order.push_back(&a);
      }
      std::stable_sort(order.begin(), order.end(),
                       [](const AgentCapacity* x, const AgentCapacity* y) { return x->free > y->free; });
      int left = request.workers;
      for (const AgentCapacity* a : order) {
        int take = std::min(left, a->free);
        p.trainer_agents.insert(p.trainer_agents.end(), take, a->name);
        left -= take;
        if (left == 0) break;
      }
    }
  }
  std::vector<std::string> hosts = Hosts(p.trainer_agents);
  int shards = request.shards == 0 ? static_cast<int>(hosts.size()) : std::max(0, request.shards);
  for (int s = 0; s < shards; ++s) p.ps_agents.push_back(hosts[s % hosts.size()]);
  p.fit = Placement::Fit::kPlaced;
  return p;
}

}  // namespace parallax::coordinator
