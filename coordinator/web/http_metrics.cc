#include "coordinator/web/http_metrics.h"

#include <algorithm>
#include <charconv>
#include <cmath>

#include "schemas/metric_names.h"

namespace parallax::coordinator {
namespace {

std::string Number(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  char buf[64];
  auto [end, ec] = std::to_chars(buf, buf + sizeof(buf), v);
  return ec == std::errc() ? std::string(buf, end) : "NaN";
}

// Backslash, double quote and newline escaped (label values); help texts
// escape only backslash and newline.
std::string Escape(std::string_view s, bool quote) {
  std::string out;
  out.reserve(s.size());
  for (char c : s) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '"' && quote) {
      out += "\\\"";
    } else {
      out += c;
    }
  }
  return out;
}

std::string Lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

using Labels = PrometheusText::Labels;

Labels JobLabels(const JobSeries& job) {
  return {{"job_id", std::to_string(job.id)}, {"job_name", job.name}};
}

Labels With(Labels labels, std::string name, std::string value) {
  labels.emplace_back(std::move(name), std::move(value));
  return labels;
}

void RenderCluster(const ClusterFigures& f, PrometheusText& out) {
  out.Family("parallax_jobs", "gauge", "Jobs in the coordinator's database, by state.");
  for (JobState s : {JobState::kPending, JobState::kPlacing, JobState::kRunning,
                     JobState::kSucceeded, JobState::kFailed, JobState::kCancelled}) {
    auto it = f.jobs_by_state.find(s);
    out.Sample("parallax_jobs", {{"state", Lower(JobStateName(s))}},
               it == f.jobs_by_state.end() ? 0 : static_cast<double>(it->second));
  }
  int64_t alive = 0, draining = 0, lost = 0;
  for (const rpc::AgentInfo& a : f.agents) {
    if (!a.alive) {
      ++lost;
    } else if (a.draining) {
      ++draining;
    } else {
      ++alive;
    }
  }
  out.Family("parallax_agents", "gauge",
             "Registered agents: alive (taking tasks), draining (alive, taking none), lost "
             "(silent for longer than --agent-timeout-ms).");
  out.Sample("parallax_agents", {{"state", "alive"}}, static_cast<double>(alive));
  out.Sample("parallax_agents", {{"state", "draining"}}, static_cast<double>(draining));
  out.Sample("parallax_agents", {{"state", "lost"}}, static_cast<double>(lost));

  out.Family("parallax_coordinator_rpc_duration_seconds", "histogram",
             "Coordinator calls served, by method (Heartbeat, SubmitJob, ...), and the time each "
             "took from reading its arguments to writing its reply.");
  const std::vector<double> bounds(RpcStats::kBucketSeconds.begin(),
                                   RpcStats::kBucketSeconds.end());
  for (const RpcStats::Method& m : f.rpc) {
    out.Histogram("parallax_coordinator_rpc_duration_seconds", {{"method", m.name}}, bounds,
                  std::vector<int64_t>(m.buckets.begin(), m.buckets.end()), m.sum_seconds);
  }
}

// A gauge family of the jobs' metric figures: per job, a sample of each
// figure `name` it has, divided by `divisor`, labelled `label`="<value>" (no
// label when `label` is empty).
void JobFigures(const std::vector<JobSeries>& jobs, const char* family, const char* help,
                const char* label,
                std::initializer_list<std::pair<const char*, const char*>> figures, double divisor,
                PrometheusText& out) {
  out.Family(family, "gauge", help);
  for (const JobSeries& j : jobs) {
    for (const auto& [value, name] : figures) {
      auto it = j.figures.values.find(name);
      if (it == j.figures.values.end()) continue;
      out.Sample(family, *label ? With(JobLabels(j), label, value) : JobLabels(j),
                 it->second / divisor);
    }
  }
}

void RenderJobs(const std::vector<JobSeries>& jobs, PrometheusText& out) {
  auto gauge = [&](const char* name, const char* help, auto value_of, bool need_points) {
    out.Family(name, "gauge", help);
    for (const JobSeries& j : jobs) {
      if (need_points && !j.figures.has_points) continue;
      double v = value_of(j);
      if (v >= 0) out.Sample(name, JobLabels(j), v);
    }
  };
  gauge(
      "parallax_job_step", "Newest step any rank of the job reported.",
      [](const JobSeries& j) { return static_cast<double>(j.step); }, false);
  gauge(
      "parallax_job_attempt", "The job's current attempt (1 for the first).",
      [](const JobSeries& j) { return static_cast<double>(j.attempt); }, false);
  gauge(
      "parallax_job_restarts", "Automatic restarts since the job was submitted or resumed.",
      [](const JobSeries& j) { return static_cast<double>(j.restarts); }, false);
  gauge(
      "parallax_job_steps_per_second", "Steps per second over the newest metric points.",
      [](const JobSeries& j) { return j.figures.steps_per_second; }, true);
  gauge(
      "parallax_job_samples_per_second",
      "Samples (tokens for the lm model) per second, summed over ranks.",
      [](const JobSeries& j) { return j.figures.samples_per_second; }, true);
  gauge(
      "parallax_job_loss", "Training loss, the mean of the ranks' newest points.",
      [](const JobSeries& j) { return j.figures.loss; }, true);

  out.Family("parallax_job_step_bytes", "gauge",
             "Bytes per step and rank through each path, counted at the transport (mean over "
             "ranks).");
  for (const JobSeries& j : jobs) {
    for (metric_names::Path p : metric_names::kPaths) {
      const char* path = metric_names::PathName(p);
      for (auto [direction, name] : {std::pair{"sent", metric_names::SentBytes(p)},
                                     std::pair{"received", metric_names::RecvBytes(p)}}) {
        auto it = j.figures.values.find(name);
        if (it == j.figures.values.end()) continue;
        out.Sample("parallax_job_step_bytes",
                   With(With(JobLabels(j), "path", path), "direction", direction), it->second);
      }
    }
  }
  JobFigures(jobs, "parallax_job_ps_messages_per_step",
             "Messages per step and rank to the PS shards (a batch of a step's tables, [ps] "
             "batch, counts once; mean over ranks).",
             "", {{"", metric_names::kPsRequests}}, 1.0, out);
  JobFigures(jobs, "parallax_job_row_cache_rows_per_step",
             "Distinct rows per step and rank the row cache ([ps] cache_staleness) served "
             "(hit), pulled as not held (miss) or pulled again as too old (stale_refresh); mean "
             "over ranks.",
             "result",
             {{"hit", metric_names::kRowCacheHits},
              {"miss", metric_names::kRowCacheMisses},
              {"stale_refresh", metric_names::kRowCacheStaleRefreshes}},
             1.0, out);
  JobFigures(jobs, "parallax_job_row_cache_saved_bytes_per_step",
             "Pull bytes per step and rank the row cache's hits did not send or receive (mean "
             "over ranks).",
             "", {{"", metric_names::kRowCacheBytesSaved}}, 1.0, out);
  JobFigures(jobs, "parallax_job_hot_rows_per_step",
             "Distinct rows per step and rank of the tables with hot rows ([ps] hot_rows) that "
             "were hot, kept on the ranks (hit), or went through the PS (miss); mean over ranks.",
             "result",
             {{"hit", metric_names::kHotRowHits}, {"miss", metric_names::kHotRowMisses}}, 1.0,
             out);
  JobFigures(jobs, "parallax_job_step_phase_seconds",
             "Time per step and rank in computing, waiting for dense (all-reduce) and for sparse "
             "(PS, all-gather) communication (mean over ranks).",
             "phase",
             {{"compute", metric_names::kComputeMs},
              {"dense_wait", metric_names::kDenseWaitMs},
              {"sparse_wait", metric_names::kSparseWaitMs}},
             1000.0, out);
}

// Each dynamic table's part on each shard (core/ps/dynamic_table.h).
void RenderDynamicTables(const std::vector<rpc::ShardStatsReport>& shards, PrometheusText& out) {
  const bool any = std::any_of(shards.begin(), shards.end(),
                               [](const auto& s) { return !s.dynamic_tables.empty(); });
  if (!any) return;  // no families without samples
  auto labels = [](const rpc::ShardStatsReport& s, const rpc::DynamicTableReport& t) {
    return Labels{{"job_id", std::to_string(s.job_id)},
                  {"shard", std::to_string(s.shard)},
                  {"table", t.name}};
  };
  auto each = [&](const char* name, const char* type, const char* help, auto value_of) {
    out.Family(name, type, help);
    for (const auto& s : shards) {
      for (const rpc::DynamicTableReport& t : s.dynamic_tables) {
        out.Sample(name, labels(s, t), static_cast<double>(value_of(t)));
      }
    }
  };
  each("parallax_ps_dynamic_rows", "gauge", "Rows a dynamic table holds on a PS shard now.",
       [](const auto& t) { return t.rows; });
  each("parallax_ps_dynamic_bytes", "gauge",
       "Bytes of a dynamic table on a PS shard: rows, their bookkeeping, the index and the "
       "admission sketch.",
       [](const auto& t) { return t.bytes; });
  each("parallax_ps_dynamic_admitted_total", "counter", "Ids a dynamic table admitted as rows.",
       [](const auto& t) { return t.admitted; });
  each("parallax_ps_dynamic_not_admitted_reads_total", "counter",
       "Reads of ids that are not rows of a dynamic table (answered with the initializer's "
       "values).",
       [](const auto& t) { return t.not_admitted_reads; });
  each("parallax_ps_dynamic_dropped_gradients_total", "counter",
       "Gradients of ids a dynamic table has not (yet) admitted, dropped.",
       [](const auto& t) { return t.dropped_gradients; });
  out.Family("parallax_ps_dynamic_evicted_total", "counter",
             "Rows a dynamic table evicted, by reason: ttl (untouched for ttl_steps) or budget "
             "(room for a new row at max_rows).");
  for (const auto& s : shards) {
    for (const rpc::DynamicTableReport& t : s.dynamic_tables) {
      out.Sample("parallax_ps_dynamic_evicted_total", With(labels(s, t), "reason", "ttl"),
                 static_cast<double>(t.evicted_ttl));
      out.Sample("parallax_ps_dynamic_evicted_total", With(labels(s, t), "reason", "budget"),
                 static_cast<double>(t.evicted_budget));
    }
  }
}

void RenderShards(const std::vector<rpc::ShardStatsReport>& shards, PrometheusText& out) {
  auto labels = [](const rpc::ShardStatsReport& s) {
    return Labels{{"job_id", std::to_string(s.job_id)}, {"shard", std::to_string(s.shard)}};
  };
  out.Family("parallax_ps_requests_total", "counter",
             "Requests a PS shard served since it started, by operation.");
  for (const auto& s : shards) {
    for (auto [op, n] : {std::pair{"pull", s.pulls}, std::pair{"push", s.pushes},
                         std::pair{"push_pull", s.push_pulls}, std::pair{"clock", s.clocks}}) {
      out.Sample("parallax_ps_requests_total", With(labels(s), "op", op), static_cast<double>(n));
    }
  }
  auto counter = [&](const char* name, const char* type, const char* help, auto value_of) {
    out.Family(name, type, help);
    for (const auto& s : shards) out.Sample(name, labels(s), static_cast<double>(value_of(s)));
  };
  counter("parallax_ps_rows_pulled_total", "counter", "Rows a PS shard sent to pulls.",
          [](const auto& s) { return s.rows_pulled; });
  counter("parallax_ps_rows_pushed_total", "counter", "Rows a PS shard applied from pushes.",
          [](const auto& s) { return s.rows_pushed; });
  counter("parallax_ps_errors_total", "counter", "Requests a PS shard answered with an error.",
          [](const auto& s) { return s.errors; });
  counter("parallax_ps_rows_held", "gauge", "Rows a PS shard stores now, every variable together.",
          [](const auto& s) { return s.rows_held; });
  RenderDynamicTables(shards, out);

  out.Family("parallax_ps_push_staleness_steps", "histogram",
             "Staleness of the pushes a PS shard applied under async or ssp: how many updates "
             "the rows had received since the pusher pulled them.");
  for (const auto& s : shards) {
    // Bucket 0 is τ = 0, bucket b is τ in [2^(b-1), 2^b): its upper bound is
    // 2^b - 1; the last bucket has none.
    std::vector<double> bounds;
    for (size_t b = 0; b + 1 < s.staleness_buckets.size(); ++b) {
      bounds.push_back(b == 0 ? 0.0 : std::ldexp(1.0, static_cast<int>(b)) - 1);
    }
    std::vector<int64_t> counts(s.staleness_buckets.begin(), s.staleness_buckets.end());
    if (counts.empty()) counts.push_back(0);
    out.Histogram("parallax_ps_push_staleness_steps", labels(s), bounds, counts,
                  static_cast<double>(s.staleness_sum));
  }
}

}  // namespace

void PrometheusText::Family(std::string_view name, std::string_view type, std::string_view help) {
  out_ += "# HELP ";
  out_ += name;
  out_ += ' ';
  out_ += Escape(help, /*quote=*/false);
  out_ += "\n# TYPE ";
  out_ += name;
  out_ += ' ';
  out_ += type;
  out_ += '\n';
}

void PrometheusText::Sample(std::string_view name, const Labels& labels, double value) {
  out_ += name;
  if (!labels.empty()) {
    out_ += '{';
    for (size_t i = 0; i < labels.size(); ++i) {
      if (i > 0) out_ += ',';
      out_ += labels[i].first + "=\"" + Escape(labels[i].second, /*quote=*/true) + "\"";
    }
    out_ += '}';
  }
  out_ += ' ';
  out_ += Number(value);
  out_ += '\n';
}

void PrometheusText::Histogram(std::string_view name, const Labels& labels,
                               const std::vector<double>& bounds,
                               const std::vector<int64_t>& counts, double sum) {
  const std::string base(name);
  int64_t cumulative = 0;
  for (size_t b = 0; b < counts.size(); ++b) {
    cumulative += counts[b];
    const std::string le = b < bounds.size() ? Number(bounds[b]) : "+Inf";
    Sample(base + "_bucket", With(labels, "le", le), static_cast<double>(cumulative));
  }
  if (counts.size() <= bounds.size()) {  // no overflow bucket given
    Sample(base + "_bucket", With(labels, "le", "+Inf"), static_cast<double>(cumulative));
  }
  Sample(base + "_sum", labels, sum);
  Sample(base + "_count", labels, static_cast<double>(cumulative));
}

// The web server's own connections: what an attack on it costs shows here,
// on the page it is trying to make unreachable.
void RenderWebServer(const HttpServerStats& http, PrometheusText& out) {
  out.Family("parallax_http_connections", "gauge",
             "Connections the web server has open now (of parallax_http_max_connections).");
  out.Sample("parallax_http_connections", {}, http.open);
  out.Family("parallax_http_max_connections", "gauge",
             "The web server's connection cap (--http-max-connections).");
  out.Sample("parallax_http_max_connections", {}, http.max_connections);
  out.Family("parallax_http_connections_refused_total", "counter",
             "Web connections closed unanswered when accepted: at the cap with every open "
             "connection answering a request with the token, or out of file descriptors.");
  out.Sample("parallax_http_connections_refused_total", {}, static_cast<double>(http.refused));
  out.Family("parallax_http_connections_cut_total", "counter",
             "Web connections closed before their request was whole: reason=\"deadline\" (no "
             "whole request within --http-request-timeout-ms of accept), reason=\"cap\" (the "
             "oldest without a whole request, to make room at --http-max-connections).");
  out.Sample("parallax_http_connections_cut_total", {{"reason", "deadline"}},
             static_cast<double>(http.closed_deadline));
  out.Sample("parallax_http_connections_cut_total", {{"reason", "cap"}},
             static_cast<double>(http.closed_at_cap));
}

std::string RenderPrometheusText(const ClusterFigures& figures) {
  PrometheusText out;
  RenderCluster(figures, out);
  RenderWebServer(figures.http, out);
  RenderJobs(figures.live_jobs, out);
  RenderShards(figures.shards, out);
  return out.text();
}

}  // namespace parallax::coordinator
