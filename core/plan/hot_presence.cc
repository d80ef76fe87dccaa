#include "core/plan/hot_presence.h"

#include <algorithm>
#include <vector>
#include <nlohmann/json.hpp>

namespace parallax::plan {

void PresenceCounter::AddStep(std::span<const int64_t> ids) {
  if (calls_++ % every_ != 0) return;
  for (int64_t id : ids) {
    Count& c = counts_[id];
    if (c.last == steps_) continue;
    c.last = steps_;
    ++c.steps;
  }
  ++steps_;
  if (counts_.size() > 4 * capacity_) Prune();
}

// Keeps the `capacity_` rows of most steps (ties by id, so that the same
// counts keep the same rows).
void PresenceCounter::Prune() {
  std::vector<std::pair<int64_t, Count>> rows(counts_.begin(), counts_.end());
  const size_t keep = std::min(capacity_, rows.size());
  std::nth_element(rows.begin(), rows.begin() + static_cast<std::ptrdiff_t>(keep), rows.end(),
                   [](const auto& a, const auto& b) {
                     return a.second.steps != b.second.steps ? a.second.steps > b.second.steps
                                                             : a.first < b.first;
                   });
  rows.resize(keep);
  counts_ = absl::flat_hash_map<int64_t, Count>(rows.begin(), rows.end());
}

TablePresence PresenceCounter::Take() const {
  PresenceCounter copy = *this;
  if (copy.counts_.size() > capacity_) copy.Prune();
  TablePresence out{steps_, {}};
  out.row_steps.reserve(copy.counts_.size());
  for (const auto& [id, c] : copy.counts_) out.row_steps.emplace(id, c.steps);
  return out;
}

void PresenceCounter::Reset() {
  steps_ = calls_ = 0;
  counts_.clear();
}

std::string FormatPresence(const MeasuredPresence& m) {
  nlohmann::json j;
  j["version"] = 1;
  j["attempt"] = m.attempt;
  j["first_step"] = m.first_step;
  j["step"] = m.step;
  nlohmann::json tables = nlohmann::json::object();
  for (const auto& [name, t] : m.tables) {
    std::vector<std::pair<int64_t, int64_t>> rows(t.row_steps.begin(), t.row_steps.end());
    std::sort(rows.begin(), rows.end());
    nlohmann::json flat = nlohmann::json::array();
    for (const auto& [id, c] : rows) {
      flat.push_back(id);
      flat.push_back(c);
    }
    tables[name] = {{"steps", t.steps}, {"rows", std::move(flat)}};
  }
  j["tables"] = std::move(tables);
  return j.dump();
}

StatusOr<MeasuredPresence> ParsePresence(std::string_view text) {
  const nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  auto bad = [](const std::string& what) {
    return InvalidArgument("hot-row presence: " + what);
  };
  if (!j.is_object() || j.value("version", 0) != 1) return bad("not a version-1 JSON object");
  MeasuredPresence m;
  if (!j.contains("attempt") || !j["attempt"].is_number_integer() || !j.contains("step") ||
      !j["step"].is_number_integer() || !j.contains("first_step") ||
      !j["first_step"].is_number_integer() || !j.contains("tables") || !j["tables"].is_object())
    return bad("\"attempt\", \"first_step\", \"step\" and \"tables\" are required");
  m.attempt = j["attempt"].get<int>();
  m.first_step = j["first_step"].get<int64_t>();
  m.step = j["step"].get<int64_t>();
  for (const auto& [name, t] : j["tables"].items()) {
    if (!t.is_object() || !t.contains("steps") || !t["steps"].is_number_integer() ||
        !t.contains("rows") || !t["rows"].is_array() || t["rows"].size() % 2 != 0)
      return bad("table \"" + name + "\" needs \"steps\" and an even \"rows\" array of id, count");
    TablePresence p;
    p.steps = t["steps"].get<int64_t>();
    if (p.steps < 0) return bad("table \"" + name + "\" has negative steps");
    const auto& rows = t["rows"];
    for (size_t i = 0; i < rows.size(); i += 2) {
      if (!rows[i].is_number_integer() || !rows[i + 1].is_number_integer())
        return bad("table \"" + name + "\": rows must be integers");
      const int64_t c = rows[i + 1].get<int64_t>();
      if (c < 1 || c > p.steps)
        return bad("table \"" + name + "\": row " + rows[i].dump() + " counted " +
                   std::to_string(c) + " of " + std::to_string(p.steps) + " steps");
      p.row_steps[rows[i].get<int64_t>()] = c;
    }
    m.tables[name] = std::move(p);
  }
  return m;
}

}  // namespace parallax::plan
