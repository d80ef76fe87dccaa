#include "coordinator/orchestration/partition_trials.h"

#include "core/plan/job_plan.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <set>
#include <stdexcept>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/base/logging.h"
#include "core/plan/partition_search.h"
#include "schemas/kv_keys.h"

namespace parallax::coordinator {
namespace {

using json = nlohmann::json;

constexpr char kEventKind[] = "search";
// The most partitions a PS variable may have (core/plan/plan_builder.cc clamps to it).
constexpr uint32_t kMaxPartitions = 65536;

struct TrialRecord {
  int attempt = 0;
  plan::Trial trial;
};

struct SearchState {
  std::vector<TrialRecord> trials;  // finished trials, in order
  int attempt = 0;                  // the trial attempt under way; 0: none
  uint32_t partitions = 0;          // its P
  uint32_t limit = 0;               // most P the searched variables can take; 0: unknown
  bool done = false;
  uint32_t chosen = 0;  // the P of the real attempts; 0: the default
};

std::string Ms(double seconds) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.3f ms/step", seconds * 1e3);
  return buf;
}

StatusOr<std::optional<SearchState>> Load(StateStore* store, int64_t job_id) {
  PX_ASSIGN_OR_RETURN(std::optional<std::string> text, store->KvGet(kv_keys::SearchState(job_id)));
  if (!text) return std::optional<SearchState>();
  json doc = json::parse(*text, nullptr, /*allow_exceptions=*/false);
  SearchState s;
  try {
    if (doc.is_discarded() || !doc.is_object()) throw std::runtime_error("not a JSON object");
    for (const json& t : doc.at("trials")) {
      TrialRecord r;
      r.attempt = t.at("attempt").get<int>();
      r.trial.partitions = t.at("partitions").get<uint32_t>();
      r.trial.seconds = t.at("seconds").get<double>();
      s.trials.push_back(r);
    }
    s.attempt = doc.at("attempt").get<int>();
    s.partitions = doc.at("partitions").get<uint32_t>();
    s.limit = doc.at("limit").get<uint32_t>();
    s.done = doc.at("done").get<bool>();
    s.chosen = doc.at("chosen").get<uint32_t>();
  } catch (const std::exception& e) {
    // Never stall the coordinator on it: the job runs with the default P.
    PX_LOG(WARNING) << "the partition search state of job \"" << job_id << "\" under \""
                    << kv_keys::SearchState(job_id) << "\" is not readable (" << e.what()
                    << "); the job runs with the default P";
    SearchState fallback;
    fallback.done = true;
    return std::optional<SearchState>(fallback);
  }
  return std::optional<SearchState>(std::move(s));
}

Status Save(StateStore* store, int64_t job_id, const SearchState& s, int64_t now) {
  json doc{{"attempt", s.attempt}, {"partitions", s.partitions}, {"limit", s.limit},
           {"done", s.done},       {"chosen", s.chosen},         {"trials", json::array()}};
  for (const TrialRecord& r : s.trials) {
    doc["trials"].push_back(
        {{"attempt", r.attempt}, {"partitions", r.trial.partitions}, {"seconds", r.trial.seconds}});
  }
  return store->KvSet(kv_keys::SearchState(job_id), doc.dump(), now);
}

Status Event(StateStore* store, int64_t job_id, const std::string& message, int64_t now) {
  return store->AppendEvent(job_id, kEventKind, "partition search: " + message, now).status();
}

plan::PartitionSearch MakeSearch(const SearchState& s, const JobConfig& config, int shards) {
  plan::PartitionSearchOptions o;
  o.start = static_cast<uint32_t>(config.plan.search_min_partitions > 0
                                      ? config.plan.search_min_partitions
                                      : std::max(1, shards));
  o.max = static_cast<uint32_t>(config.plan.search_max_partitions);
  if (s.limit > 0) o.max = std::min(o.max, s.limit);
  o.min_trials = 3;
  o.max_trials = config.plan.search_max_trials;
  plan::PartitionSearch search(o);
  for (const TrialRecord& r : s.trials) search.Record(r.trial.partitions, r.trial.seconds);
  return search;
}

// The PS variables of a trial's plan whose P comes from [ps] partitions
// ([[variable]] partitions fixes the others), and the most partitions they
// can take (rows, capped). Empty when the plan has none.
struct Searched {
  std::vector<std::string> names;
  uint32_t limit = kMaxPartitions;
};

StatusOr<Searched> SearchedVariables(StateStore* store, int64_t job_id, int attempt,
                                     const JobConfig& config) {
  Searched out;
  PX_ASSIGN_OR_RETURN(std::optional<std::string> text, store->GetPlan(job_id, attempt));
  if (!text) return out;  // no plan stored: treat as nothing to search
  std::set<std::string> fixed;
  for (const VariableOverride& o : config.variables) {
    if (o.partitions) fixed.insert(o.name);
  }
  StatusOr<plan::JobPlan> plan = plan::ParseJobPlan(*text);
  if (!plan.ok()) {
    return Internal("the plan of job " + std::to_string(job_id) + " attempt " +
                    std::to_string(attempt) + " is not readable: " + plan.status().ToString());
  }
  for (const ps::VariableSpec& v : plan->ps.variables) {
    if (fixed.count(v.name)) continue;
    out.names.push_back(v.name);
    out.limit = static_cast<uint32_t>(std::min<int64_t>(out.limit, std::max<int64_t>(1, v.rows)));
  }
  return out;
}

// What the attempt's trainer ranks read (trainer/search_trial.h): its P
// (0: the default; nothing is published) and, for a trial, its budget.
Status PublishSpec(StateStore* store, int64_t job_id, int attempt, uint32_t partitions,
                   const JobConfig::Plan* trial, int64_t now) {
  if (partitions == 0) return Status::Ok();
  json doc{{"partitions", partitions}};
  if (trial != nullptr) {
    doc["trial_steps"] = trial->search_steps;
    doc["warmup_steps"] = trial->search_warmup_steps;
  }
  return store->KvSet(kv_keys::TrialSpec(job_id, attempt), doc.dump(), now);
}

// Ends the search with `chosen` and requeues the job for its real attempt.
Status Finish(StateStore* store, const JobRecord& job, SearchState* s, uint32_t chosen,
              const std::string& why, int64_t now) {
  s->done = true;
  s->chosen = chosen;
  s->attempt = 0;
  PX_RETURN_IF_ERROR(Save(store, job.id, *s, now));
  PX_RETURN_IF_ERROR(Event(store, job.id, why, now));
  return store->RequeueJob(job.id, "partition search over", now).status();
}

}  // namespace

bool WantsPartitionSearch(const JobConfig& config) {
  return config.ps.search_partitions && config.ps.partitions == 0 &&
         (config.job.arch == Arch::kHybrid || config.job.arch == Arch::kPs);
}

StatusOr<AttemptStart> BeginAttempt(StateStore* store, const JobRecord& job,
                                    const JobConfig& config, int shards, int64_t now) {
  AttemptStart start;
  if (!WantsPartitionSearch(config) || shards <= 0) return start;
  PX_ASSIGN_OR_RETURN(std::optional<SearchState> loaded, Load(store, job.id));
  SearchState s = loaded.value_or(SearchState{});
  const int attempt = job.attempt + 1;
  if (s.done) {
    start.partitions = s.chosen;
    if (s.chosen > 0) start.message = "P=" + std::to_string(s.chosen) + " from the partition search";
    PX_RETURN_IF_ERROR(PublishSpec(store, job.id, attempt, s.chosen, nullptr, now));
    return start;
  }
  plan::PartitionSearch search = MakeSearch(s, config, shards);
  // A trial that never ended (cancelled and resumed, or its start failed)
  // runs again at the same P.
  std::optional<uint32_t> next = s.attempt != 0 ? std::optional<uint32_t>(s.partitions)
                                                : search.Next();
  if (!next) {
    const uint32_t best = search.Best();
    s.done = true;
    s.chosen = best;
    PX_RETURN_IF_ERROR(Save(store, job.id, s, now));
    PX_RETURN_IF_ERROR(Event(store, job.id,
                             std::to_string(s.trials.size()) + " trials: " + search.Describe() +
                                 "; the job runs with P=" + std::to_string(best),
                             now));
    start.partitions = best;
    start.message = "P=" + std::to_string(best) + " from the partition search";
    PX_RETURN_IF_ERROR(PublishSpec(store, job.id, attempt, best, nullptr, now));
    return start;
  }
  s.attempt = attempt;
  s.partitions = *next;
  PX_RETURN_IF_ERROR(Save(store, job.id, s, now));
  PX_RETURN_IF_ERROR(PublishSpec(store, job.id, attempt, *next, &config.plan, now));
  PX_RETURN_IF_ERROR(Event(
      store, job.id,
      "trial " + std::to_string(s.trials.size() + 1) + " at P=" + std::to_string(*next) +
          " (attempt " + std::to_string(s.attempt) + ": " +
          std::to_string(config.plan.search_warmup_steps) + " warm-up + " +
          std::to_string(config.plan.search_steps) + " timed steps)",
      now));
  start.trial = true;
  start.partitions = *next;
  start.message = "partition-search trial at P=" + std::to_string(*next);
  return start;
}

StatusOr<bool> EndTrialIfOver(StateStore* store, const JobRecord& job, const JobConfig& config,
                              const std::string& failure, bool trainers_done, int64_t now) {
  if (!WantsPartitionSearch(config)) return false;
  PX_ASSIGN_OR_RETURN(std::optional<SearchState> loaded, Load(store, job.id));
  if (!loaded || loaded->done || loaded->attempt != job.attempt) return false;
  SearchState s = std::move(loaded).value();
  const std::string trial = "trial at P=" + std::to_string(s.partitions) + " (attempt " +
                            std::to_string(job.attempt) + ")";
  const std::string fallback = "; the job runs with the default P (one partition per PS shard)";
  PX_ASSIGN_OR_RETURN(std::optional<std::string> result,
                      store->KvGet(kv_keys::TrialStepSeconds(job.id, job.attempt)));
  if (result) {
    char* end = nullptr;
    const double seconds = std::strtod(result->c_str(), &end);
    if (end == result->c_str() || *end != '\0' || !std::isfinite(seconds) || seconds <= 0) {
      PX_RETURN_IF_ERROR(Finish(store, job, &s, 0,
                                "failed: " + trial + ": rank 0 published the step time \"" +
                                    *result + "\", not a positive number of seconds" + fallback,
                                now));
      return true;
    }
    PX_ASSIGN_OR_RETURN(Searched searched, SearchedVariables(store, job.id, job.attempt, config));
    if (searched.names.empty()) {
      PX_RETURN_IF_ERROR(Finish(store, job, &s, 0,
                                "skipped: the plan of the " + trial +
                                    " puts no variable on the PS path whose partitions are "
                                    "\"auto\"" + fallback,
                                now));
      return true;
    }
    std::string names;
    for (const std::string& n : searched.names) names += (names.empty() ? "\"" : ", \"") + n + "\"";
    s.limit = searched.limit;
    s.trials.push_back(TrialRecord{job.attempt, plan::Trial{s.partitions, seconds}});
    s.attempt = 0;
    PX_RETURN_IF_ERROR(Save(store, job.id, s, now));
    PX_RETURN_IF_ERROR(Event(store, job.id,
                             trial + ": " + Ms(seconds) + " (median of " +
                                 std::to_string(config.plan.search_steps) + " steps; " + names +
                                 ")",
                             now));
    PX_RETURN_IF_ERROR(
        store->RequeueJob(job.id, "partition-search " + trial + " finished", now).status());
    return true;
  }
  if (failure.empty() && !trainers_done) return false;
  const std::string why =
      !failure.empty() ? failure
                       : "the trainers exited without publishing a step time (a trial needs " +
                             std::to_string(config.plan.search_warmup_steps +
                                            config.plan.search_steps) +
                             " steps; [trainer] steps = " + std::to_string(config.trainer.steps) +
                             ")";
  PX_RETURN_IF_ERROR(Finish(store, job, &s, 0, "failed: " + trial + ": " + why + fallback, now));
  return true;
}

}  // namespace parallax::coordinator
