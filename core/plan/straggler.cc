#include "core/plan/straggler.h"

#include <algorithm>
#include <nlohmann/json.hpp>
#include <numeric>

#include "core/base/time_format.h"
#include "schemas/kv_keys.h"

namespace parallax::plan {

void StragglerMeter::Add(std::span<const double> compute_s, int64_t steps) {
  if (compute_s.size() < 2 || steps <= 0) return;
  const double slowest = *std::max_element(compute_s.begin(), compute_s.end());
  const double mean = std::accumulate(compute_s.begin(), compute_s.end(), 0.0) /
                      static_cast<double>(compute_s.size());
  weighted_sum_ += (slowest - mean) * static_cast<double>(steps);
  steps_ += steps;
  ++points_;
}

std::string StragglerToJson(const MeasuredStraggler& s) {
  return nlohmann::json{{"measured_unix_s", s.measured_unix_s},
                        {"job_id", s.job_id},
                        {"workers", s.workers},
                        {"hosts", s.hosts},
                        {"straggler_s", s.straggler_s},
                        {"steps", s.steps},
                        {"steps_per_point", s.steps_per_point}}
      .dump();
}

StatusOr<MeasuredStraggler> ParseStraggler(std::string_view json) {
  const nlohmann::json j = nlohmann::json::parse(json, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object() || !j.contains("straggler_s") || !j["straggler_s"].is_number() ||
      !j.contains("workers") || !j["workers"].is_number_integer()) {
    return InvalidArgument(
        "measured straggler: expected a JSON object with \"straggler_s\" and \"workers\", got '" +
        std::string(json.substr(0, 80)) + "'");
  }
  MeasuredStraggler s;
  s.measured_unix_s = j.value("measured_unix_s", int64_t{0});
  s.job_id = j.value("job_id", int64_t{0});
  s.workers = j.value("workers", 0);
  s.hosts = j.value("hosts", 0);
  s.straggler_s = j.value("straggler_s", 0.0);
  s.steps = j.value("steps", int64_t{0});
  s.steps_per_point = j.value("steps_per_point", int64_t{1});
  return s;
}

std::string StragglerSource(const MeasuredStraggler& s) {
  return "measured by job " + std::to_string(s.job_id) + " over " + std::to_string(s.steps) +
         " steps, " + std::to_string(s.workers) + " workers on " + std::to_string(s.hosts) +
         " hosts, at " + FormatUtcMinute(s.measured_unix_s * 1000);
}

}  // namespace parallax::plan
