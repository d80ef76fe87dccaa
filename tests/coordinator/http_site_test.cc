// The web site's answers, from a real CoordinatorService over a real SQLite
// file with jobs, tasks, plans and metric points written through the store,
// and a fake log reader in place of the agents.
#include "coordinator/web/http_site.h"

#include <gtest/gtest.h>

#include <mutex>

#include "core/metrics/rank_table.h"
#include "core/plan/job_plan.h"
#include "schemas/metric_names.h"
#include "tests/coordinator/sqlite_service.h"

namespace parallax::coordinator {
namespace {

constexpr char kJobText[] = R"(
[job]
name = "site-test"
workers = 2

[trainer]
model = "mlp"
steps = 300

[model]
features = 8
classes = 4
hidden = [16]
)";

// The stored plan: a table on the PS in 3 partitions and a dense variable,
// written by the plan's one writer.
std::string PlanJson() {
  plan::JobPlan p;
  plan::PlannedVariable emb;
  emb.id = 0;
  emb.name = "emb";
  emb.sparse = true;
  emb.rows = 1000;
  emb.dim = 16;
  emb.density = 0.025;
  emb.path = VariablePath::kPs;
  emb.partitions = 3;
  emb.reason = "PS moves 3.2 KB a step, all-gather 40 KB";
  plan::PlannedVariable w;
  w.id = 1;
  w.name = "dense/w";
  w.size = 4096;
  w.rows = 4;
  w.dim = 1024;
  w.reason = "dense: every element changes every step";
  p.variables = {emb, w};
  ps::VariableSpec spec;
  spec.name = "emb";
  spec.rows = 1000;
  spec.dim = 16;
  spec.partitions = 3;
  p.ps.variables = {spec};
  return plan::JobPlanToJson(p);
}

// Returns canned text per task; counts calls.
class FakeLogReader : public TaskLogReader {
 public:
  StatusOr<std::string> Tail(const std::string& address, const rpc::TaskKey& task,
                             int32_t max_bytes, int timeout_ms) override {
    std::lock_guard<std::mutex> lock(mu_);
    ++calls_;
    last_timeout_ms_ = timeout_ms;
    if (address == "unreachable:1") return Unavailable("cannot reach the agent at unreachable:1");
    return "log of rank " + std::to_string(task.index) + " <script>x</script> max " +
           std::to_string(max_bytes) + "\n";
  }
  int calls() {
    std::lock_guard<std::mutex> lock(mu_);
    return calls_;
  }
  int last_timeout_ms() {
    std::lock_guard<std::mutex> lock(mu_);
    return last_timeout_ms_;
  }

 private:
  std::mutex mu_;
  int calls_ = 0;
  int last_timeout_ms_ = 0;
};

bool Has(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

// Count the points of a chart's curve in a page.
size_t CurvePoints(const std::string& page, const std::string& chart) {
  size_t at = page.find("id=\"" + chart + "\"");
  if (at == std::string::npos) return 0;
  size_t points = page.find("points=\"", at);
  size_t end = page.find('"', points + 8);
  std::string list = page.substr(points + 8, end - points - 8);
  return static_cast<size_t>(std::count(list.begin(), list.end(), ','));
}

class HttpSiteTest : public ::testing::Test {
 protected:
  void SetUp() override {
    Status s = db_.Open();
    ASSERT_TRUE(s.ok()) << s.ToString();
    store_ = db_.store.get();
    service_ = db_.service.get();
  }

  void MakeSite(HttpSiteOptions options = {}) {
    site_ = std::make_unique<HttpSite>(store_, service_, &rpc_stats_, &logs_, &clock_, options);
  }

  HttpResponse Get(const std::string& path, std::multimap<std::string, std::string> params = {}) {
    HttpRequest r;
    r.method = "GET";
    r.path = path;
    r.params = std::move(params);
    return site_->Handle(r);
  }

  // Registers (or re-registers: a fresh heartbeat) an agent.
  void RegisterAgent(const std::string& name, const std::string& address) {
    rpc::AgentInfo a;
    a.name = name;
    a.address = address;
    a.slots = 4;
    a.gpus = 0;
    a.__set_hostname("host-of-" + name);
    service_->RegisterAgent(testing::SqliteService::Header(), a);
  }

  // A RUNNING job with two trainers on agent "a1" and a PS shard on "a2",
  // its plan, and metric points for steps 10..100 of both ranks.
  int64_t RunningJob() {
    NewJob n;
    n.name = "site-<b>test</b>";  // the store keeps any name; pages must escape it
    n.workers = 2;
    n.job_text = kJobText;
    n.submitted_by = "cli";
    JobRecord job = store_->CreateJob(n, clock_.NowMillis()).value();
    std::vector<TaskRecord> tasks;
    for (int rank = 0; rank < 2; ++rank) {
      TaskRecord t;
      t.job_id = job.id;
      t.index = rank;
      t.agent_name = "a1";
      tasks.push_back(t);
    }
    TaskRecord ps;
    ps.job_id = job.id;
    ps.role = TaskRole::kPs;
    ps.agent_name = "a2";
    tasks.push_back(ps);
    EXPECT_TRUE(store_->StartAttempt(job.id, tasks, "placed", clock_.NowMillis()).ok());
    EXPECT_TRUE(store_->TransitionJob(job.id, JobState::kRunning, "", clock_.NowMillis()).ok());
    EXPECT_TRUE(store_->PutPlan(job.id, 1, PlanJson(), clock_.NowMillis()).ok());
    for (int step = 10; step <= 100; step += 10) {
      std::vector<MetricRecord> points;
      for (int rank = 0; rank < 2; ++rank) {
        MetricRecord p;
        p.job_id = job.id;
        p.attempt = 1;
        p.rank = rank;
        p.step = step;
        p.loss = 10.0 - step / 20.0 + rank;  // ranks differ by 1
        p.throughput = 100.0 * (rank + 1);   // 100 and 200 samples/s
        p.values = {{"ps_pull_recv_bytes", 1000.0 * (rank + 1)}, {"compute_ms", 4.0},
                    {metric_names::kPsRequests, 2.0 * (rank + 1)},
                    {metric_names::kRowCacheHits, 30.0 * (rank + 1)},
                    {metric_names::kRowCacheMisses, 10.0},
                    {metric_names::kRowCacheStaleRefreshes, 4.0},
                    {metric_names::kRowCacheBytesSaved, 720.0 * (rank + 1)},
                    {metric_names::kHotRowHits, 100.0 * (rank + 1)},
                    {metric_names::kHotRowMisses, 300.0}};
        points.push_back(p);
      }
      clock_.Advance(1000);  // a step of 10 per second
      EXPECT_TRUE(store_->RecordMetrics(points, clock_.NowMillis()).ok());
    }
    return job.id;
  }

  testing::SqliteService db_;
  FakeClock& clock_ = db_.clock;
  StateStore* store_ = nullptr;
  CoordinatorService* service_ = nullptr;
  RpcStats rpc_stats_;
  FakeLogReader logs_;
  std::unique_ptr<HttpSite> site_;
};

TEST_F(HttpSiteTest, JobsListShowsJobsWithStateAndProgressAndAgents) {
  RegisterAgent("a1", "10.0.0.1:7071");
  const int64_t id = RunningJob();
  MakeSite();
  HttpResponse r = Get("/");
  EXPECT_EQ(r.status, 200);
  EXPECT_EQ(r.content_type, "text/html; charset=utf-8");
  EXPECT_TRUE(Has(r.body, "<a href=\"/jobs/" + std::to_string(id) + "\">")) << r.body;
  EXPECT_TRUE(Has(r.body, "site-&lt;b&gt;test&lt;/b&gt;"));
  EXPECT_FALSE(Has(r.body, "<b>test</b>"));
  EXPECT_TRUE(Has(r.body, "RUNNING"));
  EXPECT_TRUE(Has(r.body, "<progress value=\"100\" max=\"300\">"));
  EXPECT_TRUE(Has(r.body, "host-of-a1"));
  EXPECT_TRUE(Has(r.body, "10.0.0.1:7071"));
  EXPECT_FALSE(Has(r.body, "<script"));
}

TEST_F(HttpSiteTest, JobPageShowsPlanCurvesTasksEventsAndLogTails) {
  RegisterAgent("a1", "10.0.0.1:7071");
  RegisterAgent("a2", "unreachable:1");
  const int64_t id = RunningJob();
  MakeSite();
  HttpResponse r = Get("/jobs/" + std::to_string(id));
  ASSERT_EQ(r.status, 200) << r.body;
  // The plan: one row per variable with its path, partitions and reason.
  EXPECT_TRUE(Has(r.body,
                  "<td>emb</td><td>1000x16</td><td class=\"num\">0.025</td><td>ps</td>"
                  "<td class=\"num\">3</td><td>PS moves 3.2 KB a step, all-gather 40 KB"))
      << r.body;
  EXPECT_TRUE(Has(r.body,
                  "<td>dense/w</td><td>4096</td><td class=\"num\">dense</td>"
                  "<td>allreduce</td>"));
  // Both curves, ten steps each.
  EXPECT_EQ(CurvePoints(r.body, "loss-chart"), 10u);
  EXPECT_EQ(CurvePoints(r.body, "throughput-chart"), 10u);
  EXPECT_FALSE(Has(r.body, "the newest steps"));
  // Tasks of the attempt with their hosts; the PS shard's agent is away.
  EXPECT_TRUE(Has(r.body, "<td>trainer/1</td>"));
  EXPECT_TRUE(Has(r.body, "<td>ps/0</td>"));
  EXPECT_TRUE(Has(r.body, "host-of-a2"));
  EXPECT_TRUE(Has(r.body, "PLACING -&gt; RUNNING"));  // an event
  EXPECT_TRUE(Has(r.body, "log of rank 1 &lt;script&gt;x&lt;/script&gt; max 4096"));
  EXPECT_FALSE(Has(r.body, "<script>"));
  EXPECT_TRUE(Has(r.body, "cannot reach the agent at unreachable:1"));
  EXPECT_EQ(logs_.calls(), 3);
  EXPECT_LE(logs_.last_timeout_ms(), 2'000);
  // Figures of the newest points: loss (5.0 + 6.0) / 2, samples/s 100 + 200.
  EXPECT_TRUE(Has(r.body, "<dt>loss</dt><dd>5.5000</dd>"));
  EXPECT_TRUE(Has(r.body, "<dt>samples/s</dt><dd>300.0</dd>"));
  EXPECT_TRUE(Has(r.body, "<dt>steps/s</dt><dd>10.00</dd>"));
  // The ranks table has every column `parallax status JOB` prints (both are
  // core/metrics/rank_table's), local aggregation included; rank 1's newest
  // point pulled 2 KB a step.
  for (const std::string& column : BuildRankTable({}, RankTableStyle::kTerminal).columns) {
    EXPECT_TRUE(Has(r.body, "<th>" + column + "</th>")) << column;
  }
  EXPECT_TRUE(Has(r.body, "<td>0 B / 2.00 KB</td>")) << r.body;
}

TEST_F(HttpSiteTest, LongJobsCurvesShowTheNewestSteps) {
  RegisterAgent("a1", "10.0.0.1:7071");
  const int64_t id = RunningJob();  // steps 10..100, 2 ranks, a point every 10 steps
  HttpSiteOptions options;
  options.max_curve_points_read = 8;  // 4 steps of 2 ranks
  MakeSite(options);
  HttpResponse r = Get("/jobs/" + std::to_string(id));
  ASSERT_EQ(r.status, 200);
  EXPECT_EQ(CurvePoints(r.body, "loss-chart"), 4u);  // steps 70, 80, 90, 100
  EXPECT_TRUE(Has(r.body, "the newest steps, from step 61"));
  EXPECT_TRUE(Has(r.body, "<dt>loss</dt><dd>5.5000</dd>"));  // still the newest points
}

TEST_F(HttpSiteTest, JobPageReadsNoLogOnceItsTimeIsSpent) {
  RegisterAgent("a1", "10.0.0.1:7071");
  const int64_t id = RunningJob();
  HttpSiteOptions options;
  options.logs_budget_ms = 0;
  MakeSite(options);
  HttpResponse r = Get("/jobs/" + std::to_string(id));
  ASSERT_EQ(r.status, 200);
  EXPECT_EQ(logs_.calls(), 0);
  EXPECT_TRUE(Has(r.body, "this page&#39;s time for reading logs is spent"));
}

TEST_F(HttpSiteTest, BadRequestsAre4xxNamingTheProblem) {
  RegisterAgent("a1", "10.0.0.1:7071");
  const std::string id = std::to_string(RunningJob());
  MakeSite();
  const std::pair<std::string, int> cases[] = {
      {"/jobs/abc", 400},
      {"/jobs/0", 400},
      {"/jobs/-3", 400},
      {"/jobs/12345678901234567890", 400},
      {"/jobs/999", 404},
      {"/jobs/999/logs/trainer/0", 404},
      {"/jobs/" + id + "/logs/trainer/7", 404},
      {"/jobs/" + id + "/logs/worker/0", 400},
      {"/jobs/" + id + "/logs/trainer/x", 400},
      {"/jobs/" + id + "/plan", 404},
      {"/nothing/here", 404},
      {"/favicon.ico", 404},
  };
  for (const auto& [path, status] : cases) {
    HttpResponse r = Get(path);
    EXPECT_EQ(r.status, status) << path << "\n" << r.body;
  }
  EXPECT_EQ(Get("/", {{"limit", "0"}}).status, 400);
  EXPECT_EQ(Get("/", {{"limit", "1001"}}).status, 400);
  EXPECT_EQ(Get("/", {{"limit", "many"}}).status, 400);
  EXPECT_EQ(Get("/jobs/" + id + "/logs/trainer/0", {{"attempt", "2"}}).status, 400);
  EXPECT_TRUE(Has(Get("/jobs/999").body, "no job 999"));
  EXPECT_EQ(Get("/").status, 200);  // and it goes on serving
}

TEST_F(HttpSiteTest, TaskLogPageIsTheAgentsTextWithTheLargerLimit) {
  RegisterAgent("a1", "10.0.0.1:7071");
  const std::string id = std::to_string(RunningJob());
  MakeSite();
  HttpResponse r = Get("/jobs/" + id + "/logs/trainer/1", {{"attempt", "1"}});
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(r.content_type, "text/plain; charset=utf-8");
  EXPECT_EQ(r.body, "log of rank 1 <script>x</script> max 262144\n");
}

TEST_F(HttpSiteTest, JobsListSaysWhenThereAreMoreJobs) {
  for (int i = 0; i < 3; ++i) {
    NewJob n;
    n.name = "j" + std::to_string(i);
    n.job_text = kJobText;
    ASSERT_TRUE(store_->CreateJob(n, clock_.NowMillis()).ok());
  }
  MakeSite();
  HttpResponse r = Get("/", {{"limit", "2"}});
  ASSERT_EQ(r.status, 200);
  EXPECT_TRUE(Has(r.body, "<td>j2</td>"));
  EXPECT_TRUE(Has(r.body, "<td>j1</td>"));
  EXPECT_FALSE(Has(r.body, "<td>j0</td>"));
  EXPECT_TRUE(Has(r.body, "newest 2 shown"));
  EXPECT_TRUE(Has(r.body, "3 PENDING"));
}

TEST_F(HttpSiteTest, MetricsHaveSeriesOfRunningJobsOnly) {
  RegisterAgent("a1", "10.0.0.1:7071");
  const int64_t running = RunningJob();
  const int64_t ended = RunningJob();
  rpc::ShardStatsReport shard;
  shard.job_id = running;
  shard.attempt = 1;
  shard.shard = 0;
  shard.pulls = 12;
  shard.staleness_buckets = {3, 2, 1};
  shard.staleness_sum = 4;
  rpc::DynamicTableReport users;
  users.name = "users";
  users.rows = 70;
  users.admitted = 90;
  users.not_admitted_reads = 8;
  users.dropped_gradients = 3;
  users.evicted_ttl = 5;
  users.evicted_budget = 15;
  users.bytes = 9000;
  shard.__set_dynamic_tables({users});
  service_->ReportShardStats(testing::SqliteService::Header(), shard);
  shard.job_id = ended;
  service_->ReportShardStats(testing::SqliteService::Header(), shard);
  ASSERT_TRUE(
      store_->TransitionJob(ended, JobState::kCancelled, "by test", clock_.NowMillis()).ok());
  RegisterAgent("a1", "10.0.0.1:7071");  // a fresh heartbeat: alive now
  MakeSite();
  HttpResponse r = Get("/metrics");
  ASSERT_EQ(r.status, 200);
  EXPECT_EQ(r.content_type, "text/plain; version=0.0.4; charset=utf-8");
  const std::string job = "job_id=\"" + std::to_string(running) + "\"";
  const std::string labels = "{" + job + ",job_name=\"site-<b>test</b>\"}";
  EXPECT_TRUE(Has(r.body, "parallax_jobs{state=\"running\"} 1\n")) << r.body;
  EXPECT_TRUE(Has(r.body, "parallax_jobs{state=\"cancelled\"} 1\n"));
  EXPECT_TRUE(Has(r.body, "parallax_agents{state=\"alive\"} 1\n"));
  EXPECT_TRUE(Has(r.body, "parallax_job_step" + labels + " 100\n"));
  EXPECT_TRUE(Has(r.body, "parallax_job_loss" + labels + " 5.5\n"));
  EXPECT_TRUE(Has(r.body, "parallax_job_samples_per_second" + labels + " 300\n"));
  EXPECT_TRUE(Has(r.body, "parallax_job_steps_per_second" + labels + " 10\n"));
  EXPECT_TRUE(Has(r.body, "parallax_job_step_bytes{" + job +
                              ",job_name=\"site-<b>test</b>\",path=\"ps_pull\",direction="
                              "\"received\"} 1500\n"));
  EXPECT_TRUE(Has(r.body, "parallax_job_step_phase_seconds{" + job +
                              ",job_name=\"site-<b>test</b>\",phase=\"compute\"} 0.004\n"));
  EXPECT_TRUE(Has(r.body, "parallax_ps_requests_total{" + job + ",shard=\"0\",op=\"pull\"} 12\n"));
  // Messages a rank sends the shards a step (mean over the 2 ranks' 2 and 4).
  EXPECT_TRUE(Has(r.body, "parallax_job_ps_messages_per_step" + labels + " 3\n")) << r.body;
  // The row cache's figures, means over the two ranks.
  const std::string cache_labels = labels.substr(0, labels.size() - 1);
  EXPECT_TRUE(Has(r.body, "parallax_job_row_cache_rows_per_step" + cache_labels + ",result=\"hit\"} 45\n"))
      << r.body;
  EXPECT_TRUE(Has(r.body, "parallax_job_row_cache_rows_per_step" + cache_labels +
                              ",result=\"stale_refresh\"} 4\n"));
  EXPECT_TRUE(Has(r.body, "parallax_job_row_cache_saved_bytes_per_step" + labels + " 1080\n"));
  // The hot rows' figures, means over the two ranks' 100 and 200 hits.
  EXPECT_TRUE(Has(r.body, "parallax_job_hot_rows_per_step" + cache_labels + ",result=\"hit\"} 150\n"))
      << r.body;
  EXPECT_TRUE(Has(r.body, "parallax_job_hot_rows_per_step" + cache_labels + ",result=\"miss\"} 300\n"));
  EXPECT_TRUE(
      Has(r.body, "parallax_ps_push_staleness_steps_bucket{" + job + ",shard=\"0\",le=\"1\"} 5\n"));
  EXPECT_TRUE(Has(r.body, "parallax_ps_push_staleness_steps_count{" + job + ",shard=\"0\"} 6\n"));
  // A dynamic table's rows, admission and evictions, per shard and table.
  const std::string table = "{" + job + ",shard=\"0\",table=\"users\"";
  EXPECT_TRUE(Has(r.body, "parallax_ps_dynamic_rows" + table + "} 70\n")) << r.body;
  EXPECT_TRUE(Has(r.body, "parallax_ps_dynamic_bytes" + table + "} 9000\n"));
  EXPECT_TRUE(Has(r.body, "parallax_ps_dynamic_admitted_total" + table + "} 90\n"));
  EXPECT_TRUE(Has(r.body, "parallax_ps_dynamic_not_admitted_reads_total" + table + "} 8\n"));
  EXPECT_TRUE(Has(r.body, "parallax_ps_dynamic_dropped_gradients_total" + table + "} 3\n"));
  EXPECT_TRUE(Has(r.body, "parallax_ps_dynamic_evicted_total" + table + ",reason=\"ttl\"} 5\n"));
  EXPECT_TRUE(Has(r.body, "parallax_ps_dynamic_evicted_total" + table + ",reason=\"budget\"} 15\n"));
  // Nothing of the cancelled job: its series end with it.
  EXPECT_FALSE(Has(r.body, "job_id=\"" + std::to_string(ended) + "\"")) << r.body;
  // The job page shows the same dynamic-table counters.
  HttpResponse page = Get("/jobs/" + std::to_string(running));
  ASSERT_EQ(page.status, 200);
  EXPECT_TRUE(Has(page.body, "<td>ps/0</td><td>users</td><td class=\"num\">70</td>"
                             "<td class=\"num\">90</td>"))
      << page.body;
}

}  // namespace
}  // namespace parallax::coordinator
