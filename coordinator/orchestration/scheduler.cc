#include "coordinator/orchestration/scheduler.h"

#include <algorithm>
#include <unordered_set>

namespace parallax::coordinator {
namespace {

std::string Slots(int n) { return std::to_string(n) + (n == 1 ? " slot" : " slots"); }

// The agents used, in rank order, each once.
std::vector<std::string> Hosts(const std::vector<std::string>& by_rank) {
  std::vector<std::string> hosts;
  std::unordered_set<std::string> seen;
  for (const std::string& a : by_rank) {
    if (seen.insert(a).second) hosts.push_back(a);
  }
  return hosts;
}

}  // namespace

Capacity::Capacity(const std::vector<AgentCapacity>& agents) {
  for (const AgentCapacity& a : agents) Set(a);
}

void Capacity::Remove(const std::string& name) {
  auto it = by_name_.find(name);
  if (it == by_name_.end()) return;
  total_ -= it->second.slots;
  free_ -= it->second.free;
  by_free_.erase({it->second.free, name});
  by_name_.erase(it);
}

void Capacity::Set(const AgentCapacity& agent) {
  Remove(agent.name);
  ps_shards_.erase(agent.name);
  if (agent.ps_host) {
    ps_shards_[agent.name] = std::max(0, agent.shards);
    return;
  }
  Entry e{agent.slots, std::max(0, agent.free)};
  total_ += e.slots;
  free_ += e.free;
  if (e.free > 0) by_free_.insert({e.free, agent.name});
  by_name_[agent.name] = e;
}

void Capacity::Take(const std::string& name, int n) {
  auto it = by_name_.find(name);
  if (it == by_name_.end() || n <= 0) return;
  Entry& e = it->second;
  by_free_.erase({e.free, name});
  const int taken = std::min(n, e.free);
  e.free -= taken;
  free_ -= taken;
  if (e.free > 0) by_free_.insert({e.free, name});
}

void Capacity::AddShards(const std::string& name, int n) {
  auto it = ps_shards_.find(name);
  if (it != ps_shards_.end()) it->second += n;
}

std::vector<std::string> Capacity::PsHostsByLoad() const {
  std::vector<std::pair<int, std::string>> load;
  for (const auto& [name, shards] : ps_shards_) load.emplace_back(shards, name);
  std::sort(load.begin(), load.end());
  std::vector<std::string> out;
  for (auto& [shards, name] : load) out.push_back(std::move(name));
  return out;
}

int Capacity::FreeOf(const std::string& name) const {
  auto it = by_name_.find(name);
  return it == by_name_.end() ? 0 : it->second.free;
}

const std::string* Capacity::BestFit(int n) const {
  auto it = by_free_.lower_bound({n, std::string()});
  return it == by_free_.end() ? nullptr : &it->second;
}

std::vector<std::pair<std::string, int>> Capacity::MostFreeFirst(int enough) const {
  std::vector<std::pair<std::string, int>> out;
  int sum = 0;
  // Groups of equal free counts, largest first; each group in name order.
  auto end = by_free_.end();
  while (end != by_free_.begin() && sum < enough) {
    const int free = std::prev(end)->first;
    auto begin = by_free_.lower_bound({free, std::string()});
    for (auto it = begin; it != end && sum < enough; ++it) {
      out.emplace_back(it->second, it->first);
      sum += it->first;
    }
    end = begin;
  }
  return out;
}

Placement PlaceJobIn(const PlacementRequest& request, const Capacity& capacity) {
  Placement p;
  const bool on_ps_hosts = request.ps_hosts == PsHosts::kPs && request.shards >= 0;
  if (on_ps_hosts && capacity.ps_hosts() == 0) {
    p.fit = Placement::Fit::kTooLarge;
    p.reason =
        "its PS shards go on PS hosts ([ps] hosts = \"ps\") and no PS host is available: start "
        "one with `parallax-agent --role ps`, or set [ps] hosts = \"workers\"";
    return p;
  }
  if (request.workers > capacity.total_slots()) {
    p.fit = Placement::Fit::kTooLarge;
    p.reason = "needs " + Slots(request.workers) + "; the cluster has " +
               Slots(capacity.total_slots()) + " on " + std::to_string(capacity.agents()) +
               " available agent(s)";
    return p;
  }
  if (request.workers > capacity.free_slots()) {
    p.fit = Placement::Fit::kWait;
    p.reason = "needs " + Slots(request.workers) + "; " + Slots(capacity.free_slots()) +
               " free now";
    return p;
  }

  // Same placement as the previous attempt, if it still fits.
  bool reuse = static_cast<int>(request.previous.size()) == request.workers;
  if (reuse) {
    std::map<std::string, int> need;
    for (const std::string& a : request.previous) ++need[a];
    for (const auto& [name, n] : need) {
      if (capacity.FreeOf(name) < n) reuse = false;
    }
  }
  if (reuse) {
    p.trainer_agents = request.previous;
  } else if (const std::string* best = capacity.BestFit(request.workers)) {
    // Best fit on one agent: the smallest free count that holds every rank.
    p.trainer_agents.assign(request.workers, *best);
  } else {
    // Fewest agents: take the ones with the most free slots first.
    int left = request.workers;
    for (const auto& [name, free] : capacity.MostFreeFirst(request.workers)) {
      const int take = std::min(left, free);
      p.trainer_agents.insert(p.trainer_agents.end(), take, name);
      left -= take;
    }
  }
  std::vector<std::string> hosts = on_ps_hosts ? capacity.PsHostsByLoad() : Hosts(p.trainer_agents);
  int shards = request.shards == 0 ? static_cast<int>(hosts.size()) : std::max(0, request.shards);
  for (int s = 0; s < shards; ++s) p.ps_agents.push_back(hosts[s % hosts.size()]);
  p.fit = Placement::Fit::kPlaced;
  return p;
}

Placement PlaceJob(const PlacementRequest& request, const std::vector<AgentCapacity>& agents) {
  return PlaceJobIn(request, Capacity(agents));
}

}  // namespace parallax::coordinator
