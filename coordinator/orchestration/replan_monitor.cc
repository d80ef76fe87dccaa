#include "coordinator/orchestration/replan_monitor.h"

#include <algorithm>
#include <cmath>
#include <iterator>
#include <limits>

#include "core/base/logging.h"
#include "core/config/job_config.h"
#include "core/plan/job_plan.h"
#include "core/plan/plan_correction.h"
#include "schemas/kv_keys.h"
#include "schemas/metric_names.h"

namespace parallax::coordinator {
namespace {

// Steps some rank has not reported yet, kept per attempt; beyond this the
// oldest go (a rank that stopped reporting ends its attempt anyway).
constexpr size_t kMaxPartialSteps = 64;
// Jobs watched at once; beyond this the oldest job's watch goes.
constexpr size_t kMaxWatches = 1024;
// An attempt's first steps (connections, first pulls, caches) are not its
// ranks' usual spread; a stored straggler figure is renewed every this many
// measured steps.
constexpr int64_t kStragglerWarmupSteps = 5;
constexpr int64_t kStragglerStoreSteps = 10;

}  // namespace

StatusOr<ReplanMonitor::Watch*> ReplanMonitor::WatchOf(int64_t job_id, int attempt) {
  auto found = watches_.find(job_id);
  if (found != watches_.end() && found->second.attempt >= attempt) {
    return found->second.attempt == attempt ? &found->second : nullptr;
  }
  if (found == watches_.end() && watches_.size() >= kMaxWatches) watches_.erase(watches_.begin());
  Watch& w = watches_[job_id];
  w = Watch{};
  w.attempt = attempt;
  PX_ASSIGN_OR_RETURN(std::optional<std::string> plan_json, store_->GetPlan(job_id, attempt));
  PX_ASSIGN_OR_RETURN(JobRecord job, store_->GetJob(job_id));
  StatusOr<std::shared_ptr<const JobConfig>> parsed = store_->ParsedConfig(job);
  if (!plan_json || !parsed.ok()) return &w;  // not watched
  const JobConfig* config = parsed->get();
  StatusOr<plan::JobPlan> plan = plan::ParseJobPlan(*plan_json);
  if (!plan.ok()) return &w;
  const JobConfig::Plan& p = config->plan;
  w.replan = p.replan;
  w.ranks = plan->world_size();
  w.sync = config->job.consistency == Consistency::kSync;
  w.hosts = plan->cluster.hosts;
  w.steps_per_point = std::max<int64_t>(1, config->trainer.metrics_every);
  w.options = plan::DisagreementOptions{.factor = p.replan_factor,
                                        .after_steps = p.replan_after_steps,
                                        .window_steps = p.replan_window_steps,
                                        .min_intervals = 2};
  double hot_served = 0, distinct = 0;
  for (const plan::PlannedVariable& v : plan->variables) {
    if (v.hot_rows.empty()) continue;
    const double k = std::max(0.0, v.density) * static_cast<double>(std::max<int64_t>(1, v.rows));
    hot_served += v.hot_share * k;
    distinct += k;
  }
  w.hot_expected = distinct > 0 ? hot_served / distinct : 0;
  w.detector = std::make_unique<plan::DisagreementDetector>(plan::PredictedCommOf(*plan), w.options);
  return &w;
}

std::optional<ReplanMonitor::HotDrift> ReplanMonitor::FeedHotRows(Watch* w, int64_t first_step,
                                                                   int64_t last_step, double hits,
                                                                   double rows) {
  if (w->hot_expected <= 0 || w->hot_reported || first_step < w->options.after_steps) return std::nullopt;
  if (w->hot_first < 0) w->hot_first = first_step;
  w->hot_hits += hits;
  w->hot_rows += rows;
  ++w->hot_intervals;
  if (last_step - w->hot_first + 1 < w->options.window_steps ||
      w->hot_intervals < w->options.min_intervals) {
    return std::nullopt;
  }
  HotDrift d{w->hot_first, last_step, w->hot_rows > 0 ? w->hot_hits / w->hot_rows : 0, w->hot_expected};
  // The window is judged, then a new one begins.
  w->hot_first = -1;
  w->hot_hits = w->hot_rows = 0;
  w->hot_intervals = 0;
  if (d.measured * w->options.factor >= d.expected) return std::nullopt;
  w->hot_reported = true;
  return d;
}

std::optional<plan::Disagreement> ReplanMonitor::FeedComplete(Watch* w, std::optional<HotDrift>* drift) {
  std::optional<plan::Disagreement> found;
  for (auto it = w->partial.begin(); it != w->partial.end();) {
    const int64_t step = it->first;
    if (step <= w->last_fed) {
      it = w->partial.erase(it);
      continue;
    }
    if (static_cast<int>(it->second.size()) < w->ranks) {
      ++it;
      continue;
    }
    plan::CommInterval interval;
    double steps = 0;
    std::vector<double> compute_s;
    double least_wait = std::numeric_limits<double>::infinity();
    double hot_hits = 0, hot_rows = 0;  // over the ranks and the interval's steps
    for (const auto& [rank, p] : it->second) {
      const double n = metric_names::ValueOf(p.values, metric_names::kSteps);
      steps = std::max(steps, n);
      const double hits = metric_names::ValueOf(p.values, metric_names::kHotRowHits);
      hot_hits += hits * n;
      hot_rows += (hits + metric_names::ValueOf(p.values, metric_names::kHotRowMisses)) * n;
      const double dense_s = metric_names::ValueOf(p.values, metric_names::kDenseWaitMs) / 1e3;
      const double sparse_s = metric_names::ValueOf(p.values, metric_names::kSparseWaitMs) / 1e3;
      if (w->sync) {
        // A sync rank also waits for the slowest rank's compute, which the
        // plan's communication does not hold: the rank that waited least
        // (the one the others waited for) measures the communication.
        compute_s.push_back(metric_names::ValueOf(p.values, metric_names::kComputeMs) / 1e3);
        if (dense_s + sparse_s < least_wait) {
          least_wait = dense_s + sparse_s;
          interval.dense_s = dense_s;
          interval.sparse_s = sparse_s;
        }
      } else {
        interval.dense_s += dense_s / w->ranks;
        interval.sparse_s += sparse_s / w->ranks;
      }
    }
    interval.last_step = step;
    interval.first_step = step - static_cast<int64_t>(std::max(1.0, steps)) + 1;
    w->last_fed = step;
    if (w->first_step < 0) w->first_step = interval.first_step;
    if (w->sync && interval.first_step >= w->first_step + kStragglerWarmupSteps) {
      w->straggler.Add(compute_s, interval.steps());
    }
    if (std::optional<HotDrift> h = FeedHotRows(w, interval.first_step, step, hot_hits, hot_rows);
        h && !*drift) {
      *drift = h;
    }
    std::optional<plan::Disagreement> d = w->detector->Add(interval);
    if (d && !found) found = d;
    it = w->partial.erase(it);
  }
  while (w->partial.size() > kMaxPartialSteps) w->partial.erase(w->partial.begin());
  return found;
}

StatusOr<std::vector<ReplanRequest>> ReplanMonitor::Observe(
    const std::vector<MetricRecord>& points, int64_t now) {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<ReplanRequest> requests;
  std::map<int64_t, Watch*> touched;
  for (const MetricRecord& p : points) {
    if (!p.values.count("steps")) continue;  // not a trainer's step metrics
    PX_ASSIGN_OR_RETURN(Watch * w, WatchOf(p.job_id, p.attempt));
    // A detector that reported wants no more; a sync job's straggler does.
    if (w == nullptr || !w->detector || (w->detector->reported() && !w->sync)) continue;
    w->partial[p.step][p.rank] = p;
    touched[p.job_id] = w;
  }
  for (auto& [job_id, w] : touched) {
    std::optional<HotDrift> drift;
    const std::optional<plan::Disagreement> d = FeedComplete(w, &drift);
    PX_RETURN_IF_ERROR(StoreStraggler(job_id, w, now));
    if (d) {
      PX_ASSIGN_OR_RETURN(std::optional<ReplanRequest> request, Report(job_id, *w, *d, now));
      if (request) requests.push_back(*std::move(request));
    }
    if (drift) {
      PX_ASSIGN_OR_RETURN(std::optional<ReplanRequest> request, ReportHotDrift(job_id, *w, *drift, now));
      if (request) requests.push_back(*std::move(request));
    }
  }
  return requests;
}

Status ReplanMonitor::StoreStraggler(int64_t job_id, Watch* w, int64_t now) {
  if (w->straggler.steps() - w->straggler_stored_steps < kStragglerStoreSteps) {
    return Status::Ok();
  }
  plan::MeasuredStraggler s;
  s.measured_unix_s = now / 1000;  // `now`: the coordinator clock's milliseconds
  s.job_id = job_id;
  s.workers = w->ranks;
  s.hosts = w->hosts;
  s.straggler_s = w->straggler.mean_s();
  s.steps = w->straggler.steps();
  s.steps_per_point = w->steps_per_point;
  w->straggler_stored_steps = s.steps;
  return store_->KvSet(kv_keys::Straggler(s.workers), plan::StragglerToJson(s), now);
}

StatusOr<std::optional<ReplanRequest>> ReplanMonitor::RequestReplan(int64_t job_id,
                                                                     const Watch& w,
                                                                     const plan::PlanCorrection& c,
                                                                     std::string* message,
                                                                     int64_t now) {
  if (!w.replan) {
    *message += "; [plan] replan = true would re-plan at the next checkpoint";
    return std::optional<ReplanRequest>();
  }
  PX_ASSIGN_OR_RETURN(std::optional<std::string> earlier,
                      store_->KvGet(kv_keys::PlanCorrection(job_id)));
  if (earlier) {
    *message += "; the job re-planned once already and does not again";
    return std::optional<ReplanRequest>();
  }
  PX_RETURN_IF_ERROR(
      store_->KvSet(kv_keys::PlanCorrection(job_id), plan::PlanCorrectionToJson(c), now));
  *message += "; the job re-plans at its next checkpoint (" + c.source + ")";
  return std::optional<ReplanRequest>(ReplanRequest{job_id, w.attempt, c.source});
}

StatusOr<std::optional<ReplanRequest>> ReplanMonitor::Report(int64_t job_id, const Watch& w,
                                                              const plan::Disagreement& d,
                                                              int64_t now) {
  std::string message = d.Describe() + " on attempt " + std::to_string(w.attempt);
  std::optional<ReplanRequest> request;
  if (w.replan) {
    PX_ASSIGN_OR_RETURN(std::optional<std::string> plan_json, store_->GetPlan(job_id, w.attempt));
    PX_ASSIGN_OR_RETURN(plan::JobPlan plan, plan::ParseJobPlan(plan_json.value_or("")));
    PX_ASSIGN_OR_RETURN(request,
                        RequestReplan(job_id, w, plan::CorrectionFor(plan, d, w.attempt), &message, now));
  } else {
    PX_ASSIGN_OR_RETURN(request, RequestReplan(job_id, w, {}, &message, now));
  }
  PX_LOG(INFO) << "job " << job_id << ": " << message;
  PX_RETURN_IF_ERROR(store_->AppendEvent(job_id, "replan", message, now).status());
  return request;
}

StatusOr<std::optional<ReplanRequest>> ReplanMonitor::ReportHotDrift(int64_t job_id, const Watch& w,
                                                                      const HotDrift& d, int64_t now) {
  auto percent = [](double x) { return std::to_string(static_cast<int>(std::lround(100 * x))) + "%"; };
  const std::string what = "hot rows served " + percent(d.measured) +
                           " of their tables' distinct rows a step over steps " +
                           std::to_string(d.first_step) + "-" + std::to_string(d.last_step) +
                           ", the plan expected " + percent(d.expected);
  std::string message = what + " on attempt " + std::to_string(w.attempt);
  // The model's time scales stay 1 (RequestReplan re-plans only a job that
  // never re-planned, so no correction scaled them); what changes is the
  // data the hot rows are chosen from.
  plan::PlanCorrection c;
  c.from_attempt = w.attempt;
  c.source = "re-planned from attempt " + std::to_string(w.attempt) + "'s " + what +
             ": hot rows re-measured";
  PX_ASSIGN_OR_RETURN(std::optional<ReplanRequest> request, RequestReplan(job_id, w, c, &message, now));
  PX_LOG(INFO) << "job " << job_id << ": " << message;
  PX_RETURN_IF_ERROR(store_->AppendEvent(job_id, "replan", message, now).status());
  return request;
}

namespace {

// Hot rows re-measured (core/plan/hot_presence.h): which tables of `after`
// keep other hot rows than `before`, and how many rows warmed and cooled
// ("" when none).
std::string HotRowChange(const plan::JobPlan& before, const plan::JobPlan& after) {
  std::string changes;
  for (const plan::PlannedVariable& v : after.variables) {
    auto was = std::find_if(before.variables.begin(), before.variables.end(),
                            [&](const plan::PlannedVariable& b) { return b.name == v.name; });
    std::vector<int64_t> old_rows = was == before.variables.end() ? std::vector<int64_t>() : was->hot_rows;
    std::vector<int64_t> new_rows = v.hot_rows;
    if (old_rows.empty() && new_rows.empty()) continue;
    std::sort(old_rows.begin(), old_rows.end());
    std::sort(new_rows.begin(), new_rows.end());
    std::vector<int64_t> left, came;
    std::set_difference(old_rows.begin(), old_rows.end(), new_rows.begin(), new_rows.end(),
                        std::back_inserter(left));
    std::set_difference(new_rows.begin(), new_rows.end(), old_rows.begin(), old_rows.end(),
                        std::back_inserter(came));
    if (left.empty() && came.empty()) continue;
    changes += std::string(changes.empty() ? "" : "; ") + "\"" + v.name + "\" " +
               std::to_string(old_rows.size()) + " -> " + std::to_string(new_rows.size()) + " (" +
               std::to_string(came.size()) + " warmed, " + std::to_string(left.size()) + " cooled)";
  }
  return changes;
}

}  // namespace

// The plans of `attempt` and the attempt before are read once, for both
// events.
Status ReplanMonitor::PlanStored(int64_t job_id, int attempt, int64_t now) {
  if (attempt < 2) return Status::Ok();
  PX_ASSIGN_OR_RETURN(std::optional<std::string> before_json, store_->GetPlan(job_id, attempt - 1));
  PX_ASSIGN_OR_RETURN(std::optional<std::string> after_json, store_->GetPlan(job_id, attempt));
  if (!before_json || !after_json) return Status::Ok();
  PX_ASSIGN_OR_RETURN(plan::JobPlan before, plan::ParseJobPlan(*before_json));
  PX_ASSIGN_OR_RETURN(plan::JobPlan after, plan::ParseJobPlan(*after_json));
  if (const std::string changes = HotRowChange(before, after); !changes.empty()) {
    const std::string message = "attempt " + std::to_string(attempt) + " changed its hot rows: " + changes;
    PX_LOG(INFO) << "job " << job_id << ": " << message;
    PX_RETURN_IF_ERROR(store_->AppendEvent(job_id, "replan", message, now).status());
  }
  PX_ASSIGN_OR_RETURN(std::optional<std::string> stored,
                      store_->KvGet(kv_keys::PlanCorrection(job_id)));
  if (stored) {
    PX_ASSIGN_OR_RETURN(plan::PlanCorrection c, plan::ParsePlanCorrection(*stored));
    // An attempt whose rank 0 did not plan with the correction ([plan]
    // replan turned off in a resumed job file) did not re-plan.
    if (attempt == c.from_attempt + 1 && after.cost.collective_time_scale == c.collective_time_scale &&
        after.cost.ps_time_scale == c.ps_time_scale) {
      return store_
          ->AppendEvent(job_id, "replan",
                        "attempt " + std::to_string(attempt) + " " + c.source + ": " +
                            plan::DescribePlanChange(before, after),
                        now)
          .status();
    }
  }
  // Any other attempt plans again too (the hosts' figures its predecessor
  // measured, another cluster after a resize): say where variables moved.
  const std::string moved = plan::DescribePathChanges(before, after);
  if (moved.empty()) return Status::Ok();
  const std::string message = "attempt " + std::to_string(attempt) + " planned variables elsewhere than attempt " +
                              std::to_string(attempt - 1) + ": " + moved +
                              "; each resumes with its state from the checkpoint";
  PX_LOG(INFO) << "job " << job_id << ": " << message;
  return store_->AppendEvent(job_id, "replan", message, now).status();
}

}  // namespace parallax::coordinator
