#include "schemas/metric_names.h"

namespace parallax::metric_names {

const char* PathName(Path path) {
  switch (path) {
    case Path::kAllReduce: return "allreduce";
    case Path::kAllGather: return "allgather";
    case Path::kPsPush: return "ps_push";
    case Path::kPsPull: return "ps_pull";
    case Path::kLocalAgg: return "local_agg";
  }
  return "?";
}

std::string SentBytes(Path path) { return std::string(PathName(path)) + "_sent_bytes"; }
std::string RecvBytes(Path path) { return std::string(PathName(path)) + "_recv_bytes"; }

double ValueOf(const std::map<std::string, double>& values, std::string_view name) {
  auto it = values.find(std::string(name));
  return it == values.end() ? 0 : it->second;
}

}  // namespace parallax::metric_names
