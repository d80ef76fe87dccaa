#include "cli/plan_view.h"

#include <cstdio>
#include <map>
#include <nlohmann/json.hpp>

namespace parallax::cli {

StatusOr<std::vector<std::vector<std::string>>> PlanTableRows(const std::string& plan_json) {
  std::vector<std::vector<std::string>> rows = {
      {"VARIABLE", "SHAPE", "ALPHA", "PATH", "PARTITIONS", "WHY"}};
  try {
    const nlohmann::json doc = nlohmann::json::parse(plan_json);
    std::map<std::string, int64_t> partitions;
    if (doc.contains("ps") && doc["ps"].contains("variables")) {
      for (const auto& v : doc["ps"]["variables"]) {
        partitions[v.at("name").get<std::string>()] = v.value("partitions", int64_t{1});
      }
    }
    for (const auto& v : doc.at("variables")) {
      const std::string name = v.at("name").get<std::string>();
      const bool sparse = v.value("kind", std::string()) == "sparse";
      const std::string shape =
          sparse ? std::to_string(v.value("rows", int64_t{0})) + "x" +
                       std::to_string(v.value("dim", int64_t{0}))
                 : std::to_string(v.value("size", int64_t{0}));
      std::string alpha = "dense";
      if (sparse) {
        const double d = v.value("density", -1.0);
        char buf[32];
        std::snprintf(buf, sizeof(buf), "%.4g", d);
        alpha = d < 0 ? "?" : buf;
      }
      const auto p = partitions.find(name);
      rows.push_back({name, shape, alpha, v.value("path", std::string("?")),
                      p == partitions.end() ? "-" : std::to_string(p->second),
                      v.value("reason", std::string())});
    }
  } catch (const nlohmann::json::exception& e) {
    return InvalidArgument(std::string("the stored plan is not valid plan JSON: ") + e.what());
  }
  return rows;
}

}  // namespace parallax::cli
