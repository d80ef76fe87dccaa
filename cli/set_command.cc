#include "cli/set_command.h"

#include <map>
#include <thread>

#include "core/ps/consistency_schedule.h"

namespace parallax::cli {

StatusOr<std::string> ParseSetArguments(const std::vector<std::string>& words) {
  std::map<std::string, std::string> given;
  for (const std::string& w : words) {
    const size_t eq = w.find('=');
    const std::string name = w.substr(0, eq);
    if (eq == std::string::npos || (name != "consistency" && name != "staleness")) {
      return InvalidArgument("'" + w +
                             "' is not a setting; give consistency=async|ssp|sync and, with ssp, "
                             "staleness=K");
    }
    if (!given.emplace(name, w.substr(eq + 1)).second) {
      return InvalidArgument("'" + name + "' is given twice");
    }
  }
  auto c = given.find("consistency");
  if (c == given.end()) {
    return InvalidArgument("nothing to set: give consistency=async|ssp|sync (and staleness=K with ssp)");
  }
  std::string text = c->second;
  if (auto k = given.find("staleness"); k != given.end()) text += ":" + k->second;
  StatusOr<ps::ConsistencyMode> mode = ps::ParseConsistencyMode(text);
  if (!mode.ok()) return InvalidArgument(mode.status().message());
  return ps::FormatConsistencyMode(*mode);
}

Status RunSetConsistency(CoordinatorClient& client, int64_t job_id, const std::string& consistency,
                         std::chrono::milliseconds wait, std::ostream& out) {
  const auto deadline = std::chrono::steady_clock::now() + wait;
  rpc::ConsistencySwitch placed;
  while (true) {
    Status s = client.Call(
        [&](rpc::CoordinatorClient& c) { c.SetConsistency(placed, client.Header(), job_id, consistency); });
    if (s.ok()) break;
    // UNAVAILABLE: a rank has not checked in yet, or the coordinator is away.
    if (s.code() != StatusCode::kUnavailable || std::chrono::steady_clock::now() >= deadline) return s;
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  out << "job " << job_id << ": consistency " << placed.consistency << " from step "
      << placed.from_step << "\n";
  return Status::Ok();
}

}  // namespace parallax::cli
