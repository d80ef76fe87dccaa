#include "core/ps/consistency_schedule.h"

#include <charconv>
#include <optional>
#include <iterator>

namespace parallax::ps {

StatusOr<ConsistencyMode> ParseConsistencyMode(std::string_view text) {
  const size_t colon = text.find(':');
  const std::string_view name = text.substr(0, colon);
  std::optional<Consistency> c = ParseConsistency(name);
  if (!c) {
    return InvalidArgument("consistency \"" + std::string(name) +
                           "\" is not one of sync, async, ssp");
  }
  ConsistencyMode mode{*c, 0};
  if (colon == std::string_view::npos) return mode;
  const std::string_view k = text.substr(colon + 1);
  if (*c != Consistency::kSsp) {
    return InvalidArgument("a staleness (\"" + std::string(text) +
                           "\") applies only to consistency ssp");
  }
  auto [end, ec] = std::from_chars(k.data(), k.data() + k.size(), mode.staleness);
  if (ec != std::errc() || end != k.data() + k.size() || mode.staleness < 0 ||
      mode.staleness > 1'000'000) {
    return InvalidArgument("staleness \"" + std::string(k) +
                           "\" is not an integer in [0, 1000000]");
  }
  return mode;
}

std::string FormatConsistencyMode(const ConsistencyMode& mode) {
  std::string s = ConsistencyName(mode.consistency);
  if (mode.consistency == Consistency::kSsp) {
    s += ':';
    s += std::to_string(mode.staleness);
  }
  return s;
}

ConsistencySchedule::ConsistencySchedule(const PsPlan& plan) {
  const ConsistencyMode planned{plan.consistency,
                                plan.consistency == Consistency::kSsp ? plan.staleness : 0};
  if (plan.sync_warmup_steps > 0 && plan.consistency != Consistency::kSync) {
    from_step_[0] = ConsistencyMode{Consistency::kSync, 0};
    from_step_[plan.sync_warmup_steps] = planned;
  } else {
    from_step_[0] = planned;
  }
}

void ConsistencySchedule::Set(int64_t from, const ConsistencyMode& mode) {
  from_step_[from < 0 ? 0 : from] = mode;
}

const ConsistencyMode& ConsistencySchedule::At(int64_t step) const {
  auto it = from_step_.upper_bound(step);
  return it == from_step_.begin() ? from_step_.begin()->second : std::prev(it)->second;
}

int64_t ConsistencySchedule::PeriodStart(int64_t step) const {
  auto it = from_step_.upper_bound(step);
  if (it == from_step_.begin()) return 0;
  --it;
  // Walk back over switches to the same mode: they do not start a period.
  while (it != from_step_.begin() && std::prev(it)->second == it->second) --it;
  return it->first;
}

bool ConsistencySchedule::EverNotSync() const {
  for (const auto& [step, mode] : from_step_) {
    if (mode.consistency != Consistency::kSync) return true;
  }
  return false;
}

}  // namespace parallax::ps
