#include "trainer/search_trial.h"

#include <algorithm>
#include <cstdio>
#include <limits>
#include <string>

#include <nlohmann/json.hpp>

#include "core/rpc/coordinator_client.h"
#include "schemas/kv_keys.h"

namespace parallax::trainer {

Status ApplySearchSpec(CoordinatorClient* coord, SessionOptions* o) {
  if (coord == nullptr || o->job_id <= 0 || o->num_shards <= 0 || o->config.ps.partitions != 0) {
    return Status::Ok();
  }
  const std::string key = kv_keys::TrialSpec(o->job_id, o->attempt);
  StatusOr<std::optional<std::string>> got = coord->KvGetIfSet(key);
  if (!got.ok()) return got.status().WithContext("reading the partition-search settings");
  if (!*got) return Status::Ok();  // no search
  const nlohmann::json doc = nlohmann::json::parse(**got, nullptr, /*allow_exceptions=*/false);
  const auto get = [&](const char* name, int64_t min, int64_t* out) -> Status {
    if (!doc.contains(name)) return Status::Ok();
    const nlohmann::json& v = doc[name];
    if (!v.is_number_integer() || v.get<int64_t>() < min ||
        v.get<int64_t>() > std::numeric_limits<int>::max()) {
      return InvalidArgument("the coordinator's \"" + key + "\" has a bad \"" + name +
                             "\": " + v.dump());
    }
    *out = v.get<int64_t>();
    return Status::Ok();
  };
  if (doc.is_discarded() || !doc.is_object()) {
    return InvalidArgument("the coordinator's \"" + key + "\" is not a JSON object");
  }
  int64_t partitions = 0, steps = 0, warmup = 0;
  PX_RETURN_IF_ERROR(get("partitions", 1, &partitions));
  PX_RETURN_IF_ERROR(get("trial_steps", 1, &steps));
  PX_RETURN_IF_ERROR(get("warmup_steps", 0, &warmup));
  o->config.ps.partitions = static_cast<int>(partitions);
  if (steps > 0) {
    o->trial_steps = steps;
    o->trial_warmup_steps = warmup;
    o->config.trainer.checkpoint_dir.clear();  // a trial leaves no checkpoint behind
    o->config.trainer.metrics_every = std::numeric_limits<int64_t>::max();  // nor metric points
  }
  return Status::Ok();
}

Status PublishTrial(CoordinatorClient* coord, const SessionOptions& o, double seconds) {
  if (coord == nullptr) return Status::Ok();
  char buf[40];
  std::snprintf(buf, sizeof(buf), "%.9g", seconds);
  return coord->KvSet(kv_keys::TrialStepSeconds(o.job_id, o.attempt), buf)
      .WithContext("publishing the partition-search trial's step time");
}

bool TrialTimer::Add(double seconds) {
  if (steps_ <= 0 || seen_ >= warmup_ + steps_) return false;
  if (seen_++ >= warmup_) timed_.push_back(seconds);
  return seen_ == warmup_ + steps_;
}

double TrialTimer::Median() const {
  std::vector<double> v = timed_;
  if (v.empty()) return 0;
  const size_t mid = v.size() / 2;
  std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(mid), v.end());
  double m = v[mid];
  if (v.size() % 2 == 0) m = (m + *std::max_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(mid))) / 2;
  return m;
}

}  // namespace parallax::trainer
