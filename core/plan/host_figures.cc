#include "core/plan/host_figures.h"

#include <ctime>
#include <nlohmann/json.hpp>

namespace parallax::plan {
namespace {

// The host with the lowest positive `field`, or null.
const HostFigures* Slowest(std::span<const HostFigures> hosts, double HostFigures::*field) {
  const HostFigures* slowest = nullptr;
  for (const HostFigures& h : hosts) {
    if (h.*field > 0 && (slowest == nullptr || h.*field < slowest->*field)) slowest = &h;
  }
  return slowest;
}

}  // namespace

std::string MeasuredOn(const HostFigures& h) {
  const std::time_t t = static_cast<std::time_t>(h.measured_unix_s);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char when[32];
  std::strftime(when, sizeof(when), "%Y-%m-%d %H:%M UTC", &tm);
  return "measured on " + h.host + " at " + when;
}

std::string HostFiguresKey(const std::string& hostname) { return "host/" + hostname + "/figures"; }

std::string HostFiguresToJson(const HostFigures& h) {
  return nlohmann::json{{"host", h.host},
                        {"measured_unix_s", h.measured_unix_s},
                        {"link_bytes_per_s", h.link_bytes_per_s},
                        {"loopback_bytes_per_s", h.loopback_bytes_per_s},
                        {"shm_bytes_per_s", h.shm_bytes_per_s}}
      .dump();
}

StatusOr<HostFigures> ParseHostFigures(std::string_view json) {
  const nlohmann::json j = nlohmann::json::parse(json, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object() || !j.contains("host") || !j["host"].is_string()) {
    return InvalidArgument("host figures: expected a JSON object with \"host\", got '" +
                           std::string(json.substr(0, 80)) + "'");
  }
  HostFigures h;
  h.host = j["host"].get<std::string>();
  h.measured_unix_s = j.value("measured_unix_s", int64_t{0});
  h.link_bytes_per_s = j.value("link_bytes_per_s", 0.0);
  h.loopback_bytes_per_s = j.value("loopback_bytes_per_s", 0.0);
  h.shm_bytes_per_s = j.value("shm_bytes_per_s", 0.0);
  return h;
}

FigureSources ApplyFigures(const JobConfig::Plan& plan, std::span<const HostFigures> hosts,
                           int cluster_hosts, CostOptions* cost) {
  FigureSources s;
  const std::string job_file = "job file [plan]";
  if (plan.loopback_bytes_per_s) {
    cost->loopback_bytes_per_s = *plan.loopback_bytes_per_s;
    s.loopback = job_file;
  } else if (const HostFigures* h = Slowest(hosts, &HostFigures::loopback_bytes_per_s)) {
    cost->loopback_bytes_per_s = h->loopback_bytes_per_s;
    s.loopback = MeasuredOn(*h);
  }
  if (plan.shm_bytes_per_s) {
    cost->shm_bytes_per_s = *plan.shm_bytes_per_s;
    s.shm = job_file;
  } else if (const HostFigures* h = Slowest(hosts, &HostFigures::shm_bytes_per_s)) {
    cost->shm_bytes_per_s = h->shm_bytes_per_s;
    s.shm = MeasuredOn(*h);
  }
  if (plan.link_bytes_per_s) {
    cost->bandwidth_bytes_per_s = *plan.link_bytes_per_s;
    s.link = job_file;
  } else if (cluster_hosts <= 1 && cost->loopback_bytes_per_s > 0) {
    cost->bandwidth_bytes_per_s = cost->loopback_bytes_per_s;
    s.link = s.loopback + " (loopback: one host)";
  } else if (const HostFigures* h = Slowest(hosts, &HostFigures::link_bytes_per_s)) {
    cost->bandwidth_bytes_per_s = h->link_bytes_per_s;
    s.link = MeasuredOn(*h);
  }
  if (plan.collective_latency_us) {
    cost->collective_latency_s = *plan.collective_latency_us * 1e-6;
    s.collective = job_file;
  }
  if (plan.ps_rtt_us) {
    cost->ps_rtt_s = *plan.ps_rtt_us * 1e-6;
    s.ps_rtt = job_file;
  }
  return s;
}

}  // namespace parallax::plan
