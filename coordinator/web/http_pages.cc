#include "coordinator/web/http_pages.h"

#include <cstdio>

#include "coordinator/web/http_chart.h"
#include "coordinator/web/http_html.h"
#include "core/base/format_bytes.h"
#include "core/base/time_format.h"
#include "core/metrics/rank_table.h"

namespace parallax::coordinator {
namespace {

std::string StateBadge(const std::string& state) {
  return "<span class=\"state s-" + HtmlEscape(state) + "\">" + HtmlEscape(state) + "</span>";
}

std::string JobLink(const JobRecord& job) {
  return "<a href=\"/jobs/" + std::to_string(job.id) + "\">" + std::to_string(job.id) + "</a>";
}

std::string Progress(int64_t step, std::optional<int64_t> total) {
  if (!total || *total <= 0) return HtmlEscape(std::to_string(step));
  return "<progress value=\"" + std::to_string(std::min(step, *total)) + "\" max=\"" +
         std::to_string(*total) + "\"></progress> " + std::to_string(step) + " / " +
         std::to_string(*total);
}

std::string AgentState(const rpc::AgentInfo& a) {
  return !a.alive ? "lost" : a.draining ? "draining" : "alive";
}

std::string TaskStateText(const TaskRecord& t) {
  auto it = rpc::_TaskState_VALUES_TO_NAMES.find(static_cast<int>(t.state));
  std::string s = it == rpc::_TaskState_VALUES_TO_NAMES.end() ? "?" : it->second;
  if (t.exit_code) s += " " + std::to_string(*t.exit_code);
  if (t.signal) s += " (signal " + std::to_string(*t.signal) + ")";
  return s;
}

std::string JobsTable(const JobsPageData& d) {
  std::vector<std::vector<Cell>> rows;
  for (const JobRecord& j : d.jobs) {
    auto total = d.total_steps.find(j.id);
    rows.push_back({Raw(JobLink(j)), Text(j.name),
                    Raw(StateBadge(std::string(JobStateName(j.state)))),
                    Raw(Progress(j.step, total == d.total_steps.end()
                                             ? std::nullopt
                                             : std::optional<int64_t>(total->second))),
                    Num(std::to_string(j.workers)), Num(std::to_string(j.attempt)),
                    Num(std::to_string(j.restarts)), Text(j.submitted_by),
                    Text(Ago(j.updated, d.now)), Text(j.reason)});
  }
  return Table("jobs",
               {"id", "name", "state", "progress", "workers", "attempt", "restarts", "submitted by",
                "updated", "reason"},
               rows);
}

std::string AgentsTable(const JobsPageData& d) {
  std::vector<std::vector<Cell>> rows;
  for (const rpc::AgentInfo& a : d.agents) {
    const bool ps_host = a.__isset.role && a.role == rpc::AgentRole::PS;
    rows.push_back({Text(a.name), Text(a.hostname), Text(a.address),
                    Text(ps_host ? "ps" : "worker"), Num(std::to_string(a.slots)),
                    Num(std::to_string(a.gpus)), Raw(StateBadge(AgentState(a))),
                    Text(Ago(a.last_seen, d.now)), Text(a.version)});
  }
  return Table(
      "agents",
      {"name", "host", "address", "role", "slots", "GPUs", "state", "last heartbeat", "version"},
      rows);
}

std::string FactsList(const JobPageData& d) {
  const JobRecord& j = d.job;
  std::string html = "<dl class=\"facts\">";
  auto fact = [&](const std::string& name, const std::string& value_html) {
    html += "<dt>" + HtmlEscape(name) + "</dt><dd>" + value_html + "</dd>";
  };
  fact("state", StateBadge(std::string(JobStateName(j.state))));
  fact("progress", Progress(j.step, d.total_steps));
  if (d.figures.has_points) {
    fact("loss", HtmlEscape(Fixed(d.figures.loss, 4)));
    fact("samples/s", HtmlEscape(Fixed(d.figures.samples_per_second, 1)));
    if (d.figures.steps_per_second >= 0) {
      fact("steps/s", HtmlEscape(Fixed(d.figures.steps_per_second, 2)));
    }
  }
  fact("workers", std::to_string(j.workers));
  fact("attempt", std::to_string(j.attempt) + " (" + std::to_string(j.restarts) + " restarts)");
  fact("submitted", HtmlEscape(FormatRfc3339(j.created) + " by " + j.submitted_by));
  fact("updated", HtmlEscape(Ago(j.updated, d.now)));
  if (!j.job_path.empty()) fact("job file", HtmlEscape(j.job_path));
  if (!j.reason.empty())
    fact("reason", "<span class=\"error\">" + HtmlEscape(j.reason) + "</span>");
  if (!d.waiting_for.empty()) fact("waiting for", HtmlEscape(d.waiting_for));
  return html + "</dl>";
}

std::string RanksTable(const JobPageData& d) {
  std::vector<RankPoint> points;
  for (const auto& [rank, p] : d.newest_per_rank) {
    points.push_back({rank, p.step, p.loss, p.throughput, &p.values});
  }
  const RankTable table = BuildRankTable(points, RankTableStyle::kPage);
  std::vector<std::vector<Cell>> rows;
  for (const std::vector<std::string>& row : table.rows) {
    std::vector<Cell> cells;
    // Numbers right-aligned; the "sent / received" pairs as text.
    for (size_t i = 0; i < row.size(); ++i) cells.push_back(i < 7 ? Num(row[i]) : Text(row[i]));
    rows.push_back(std::move(cells));
  }
  return Table("ranks", table.columns, rows);
}

std::string PlanSection(const JobPageData& d) {
  std::string html = "<h2>Plan</h2>";
  if (d.plan.columns.empty()) {
    return html + "<p class=\"muted\" id=\"plan-note\">" + HtmlEscape(d.plan_note) + "</p>";
  }
  std::vector<std::vector<Cell>> rows;
  for (const std::vector<std::string>& row : d.plan.rows) {
    std::vector<Cell> cells;
    // ALPHA and PARTITIONS right-aligned.
    for (size_t i = 0; i < row.size(); ++i) cells.push_back(i == 2 || i == 4 ? Num(row[i]) : Text(row[i]));
    rows.push_back(std::move(cells));
  }
  return html + Table("plan", d.plan.columns, rows);
}

std::string TasksAndShards(const JobPageData& d) {
  std::vector<std::vector<Cell>> rows;
  for (const TaskRow& t : d.tasks) {
    rows.push_back({Text(TaskName(t.task)), Num(std::to_string(t.task.attempt)),
                    Text(TaskStateText(t.task)), Text(t.task.agent_name), Text(t.host),
                    Text(Ago(t.task.updated, d.now))});
  }
  std::string html = "<h2>Tasks</h2>" +
                     Table("tasks", {"task", "attempt", "state", "agent", "host", "updated"}, rows);
  if (d.shards.empty()) return html;
  rows.clear();
  for (const rpc::ShardStatsReport& s : d.shards) {
    int64_t pushes = 0;
    for (int64_t b : s.staleness_buckets) pushes += b;
    rows.push_back({Text("ps/" + std::to_string(s.shard)), Num(std::to_string(s.rows_held)),
                    Num(std::to_string(s.pulls + s.pushes + s.push_pulls + s.clocks)),
                    Num(std::to_string(s.rows_pulled)), Num(std::to_string(s.rows_pushed)),
                    Num(pushes > 0 ? Fixed(static_cast<double>(s.staleness_sum) / pushes, 2) : "-"),
                    Num(std::to_string(s.errors))});
  }
  html += "<h2>PS shards</h2>" +
          Table("shards",
                {"shard", "rows held", "requests", "rows pulled", "rows pushed",
                 "mean push staleness", "errors"},
                rows);
  // Dynamic tables: each one's part on each shard.
  rows.clear();
  for (const rpc::ShardStatsReport& s : d.shards) {
    for (const rpc::DynamicTableReport& t : s.dynamic_tables) {
      rows.push_back({Text("ps/" + std::to_string(s.shard)), Text(t.name),
                      Num(std::to_string(t.rows)), Num(std::to_string(t.admitted)),
                      Num(std::to_string(t.not_admitted_reads)),
                      Num(std::to_string(t.dropped_gradients)), Num(std::to_string(t.evicted_ttl)),
                      Num(std::to_string(t.evicted_budget)), Num(std::to_string(t.bytes))});
    }
  }
  if (rows.empty()) return html;
  return html + "<h2>Dynamic tables</h2>" +
         Table("dynamic-tables",
               {"shard", "table", "rows", "admitted", "reads not admitted", "gradients dropped",
                "evicted (ttl)", "evicted (budget)", "bytes"},
               rows);
}

std::string EventsAndLogs(const JobPageData& d) {
  std::vector<std::vector<Cell>> rows;
  for (auto it = d.events.rbegin(); it != d.events.rend(); ++it) {
    rows.push_back({Text(FormatRfc3339(it->time)), Text(it->kind), Text(it->message)});
  }
  std::string html = "<h2>Recent events</h2>" + Table("events", {"time", "kind", "message"}, rows);
  html += "<h2>Logs</h2><div id=\"logs\">";
  if (d.logs.empty()) html += "<p class=\"muted\">no task of this attempt</p>";
  bool first = true;
  for (const LogTail& l : d.logs) {
    // The first is open: one log is in view without a click.
    html += std::string("<details class=\"log\"") + (first ? " open" : "") + "><summary>" +
            HtmlEscape(l.task) + (l.host.empty() ? "" : " on " + HtmlEscape(l.host)) +
            " - <a href=\"/jobs/" + std::to_string(d.job.id) + "/logs/" + HtmlEscape(l.task) +
            "\">more</a></summary>";
    html += l.error.empty() ? "<pre class=\"log\">" + HtmlEscape(l.text) + "</pre>"
                            : "<p class=\"error\">" + HtmlEscape(l.error) + "</p>";
    html += "</details>";
    first = false;
  }
  return html + "</div>";
}

}  // namespace

std::string TaskName(const TaskRecord& task) {
  return std::string(task.role == TaskRole::kPs ? "ps/" : "trainer/") + std::to_string(task.index);
}

std::string RenderJobsPage(const JobsPageData& d) {
  std::string body = "<h1>Jobs</h1><p class=\"muted\">";
  bool first = true;
  for (const auto& [state, n] : d.jobs_by_state) {
    if (n == 0) continue;
    body += (first ? "" : " &middot; ") + std::to_string(n) + " " +
            HtmlEscape(std::string(JobStateName(state)));
    first = false;
  }
  if (first) body += "no job yet: submit one with <code>parallax submit JOB.toml</code>";
  body += "</p>" + JobsTable(d);
  if (d.more_jobs) {
    body += "<p class=\"muted\">newest " + std::to_string(d.jobs.size()) +
            " shown; <a href=\"/?limit=1000\">more</a></p>";
  }
  body += "<h2>Agents</h2>" + AgentsTable(d);
  return Page("jobs", body, /*refresh_s=*/10);
}

std::string RenderJobPage(const JobPageData& d) {
  std::string body = "<h1>Job " + std::to_string(d.job.id) + " &middot; " + HtmlEscape(d.job.name) +
                     "</h1>" + FactsList(d);
  body += "<h2>Curves</h2><div class=\"charts\">";
  body += SvgLineChart(d.loss, {"loss-chart", "loss (mean over ranks)"});
  body += SvgLineChart(d.throughput, {"throughput-chart", "samples/s (all ranks)"});
  body += "</div>";
  if (d.curves_from_step > 0) {
    body += "<p class=\"muted\">the newest steps, from step " + std::to_string(d.curves_from_step) +
            "</p>";
  }
  if (!d.newest_per_rank.empty()) body += "<h2>Ranks now</h2>" + RanksTable(d);
  // The plan last: one row per variable, the longest table.
  body += TasksAndShards(d) + EventsAndLogs(d) + PlanSection(d);
  return Page("job " + std::to_string(d.job.id), body, /*refresh_s=*/15);
}

std::string RenderErrorPage(int status, const std::string& message) {
  return Page(std::to_string(status),
              "<h1>" + std::to_string(status) + "</h1><p>" + HtmlEscape(message) +
                  "</p><p><a href=\"/\">all jobs</a></p>",
              0);
}

}  // namespace parallax::coordinator
