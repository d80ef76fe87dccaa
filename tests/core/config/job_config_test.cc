#include "core/config/job_config.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "core/config/suggest.h"
#include "parallax/status.h"

namespace parallax {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using ::testing::Not;

// The smallest valid job; tests append or replace tables.
constexpr char kMinimal[] = R"([job]
name = "t"
[trainer]
model = "lm"
)";

// The repository root, found from this file's path or by walking up from the
// current directory.
fs::path RepoRoot() {
  std::vector<fs::path> starts = {fs::path(__FILE__).parent_path(), fs::current_path()};
  for (fs::path dir : starts) {
    for (; !dir.empty(); dir = dir.parent_path()) {
      // canonical: __FILE__ may be relative (ccache's base_dir rewrites it).
      if (fs::exists(dir / "schemas" / "job.md") && fs::exists(dir / "examples")) {
        return fs::canonical(dir);
      }
      if (dir == dir.parent_path()) break;
    }
  }
  return {};
}

class JobConfigTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = (fs::temp_directory_path() / "px_job_config_XXXXXX").string();
    ASSERT_NE(mkdtemp(tmpl.data()), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }

  // Writes `text` to dir_/`name` and returns the path.
  std::string Write(const std::string& name, const std::string& text) {
    const fs::path p = dir_ / name;
    fs::create_directories(p.parent_path());
    std::ofstream(p) << text;
    return p.string();
  }

  // Parses `text` as "job.toml" and returns the error message ("" if it loads).
  static std::string Error(const std::string& text, JobLoadOptions options = {}) {
    StatusOr<JobConfig> c = ParseJobConfig(text, "job.toml", options);
    if (c.ok()) return "";
    EXPECT_EQ(c.status().code(), StatusCode::kInvalidArgument);
    return c.status().message();
  }

  fs::path dir_;
};

TEST_F(JobConfigTest, LoadsBrownLmExample) {
  const fs::path root = RepoRoot();
  ASSERT_FALSE(root.empty()) << "cannot find the repository root";
  const std::string path = (root / "examples" / "brown-lm.toml").string();
  // The data it names exists only after scripts/fetch-data.
  StatusOr<JobConfig> c = LoadJobConfig(path, {.check_paths = false});
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->source, path);
  EXPECT_EQ(c->base_dir, (root / "examples").string());
  EXPECT_EQ(c->job.name, "brown-lm");
  EXPECT_EQ(c->job.workers, 2);
  EXPECT_EQ(c->job.arch, Arch::kHybrid);
  EXPECT_EQ(c->job.consistency, Consistency::kSync);
  EXPECT_EQ(c->trainer.model, "lm");
  EXPECT_TRUE(c->trainer.command.empty());
  EXPECT_THAT(c->model_toml, HasSubstr("vocab = 50000"));
  EXPECT_THAT(c->model_toml, HasSubstr("hidden = 512"));
  EXPECT_EQ(c->dense_optimizer.type, OptimizerType::kAdam);
  EXPECT_FLOAT_EQ(c->dense_optimizer.lr, 2e-3);
  EXPECT_THAT(c->model_toml, HasSubstr((root / "data" / "brown" / "train.tok").string()));
  EXPECT_EQ(c->sparse_optimizer.type, OptimizerType::kAdagrad);
  EXPECT_EQ(c->ps.shards, 0);
  EXPECT_EQ(c->ps.partitions, 0);
}

TEST_F(JobConfigTest, LoadsCtrAsyncExample) {
  const fs::path root = RepoRoot();
  ASSERT_FALSE(root.empty()) << "cannot find the repository root";
  StatusOr<JobConfig> c = LoadJobConfig((root / "examples" / "ctr-async.toml").string());
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->job.consistency, Consistency::kSsp);
  EXPECT_EQ(c->job.staleness, 2);
  EXPECT_EQ(c->trainer.command, (std::vector<std::string>{"./my_trainer", "--flag"}));
  EXPECT_TRUE(c->trainer.model.empty());
  EXPECT_THAT(c->user_toml, HasSubstr("embedding_dim = 16"));
  ASSERT_EQ(c->variables.size(), 1u);
  EXPECT_EQ(c->variables[0].path, VariablePath::kPs);
}

TEST_F(JobConfigTest, MinimalJobGetsDefaults) {
  StatusOr<JobConfig> c = ParseJobConfig(kMinimal, "job.toml");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  const JobConfig defaults;
  EXPECT_EQ(c->job.workers, 1);
  EXPECT_EQ(c->job.arch, Arch::kHybrid);
  EXPECT_EQ(c->job.consistency, Consistency::kSync);
  EXPECT_EQ(c->job.staleness, 0);
  EXPECT_EQ(c->trainer.steps, defaults.trainer.steps);
  EXPECT_EQ(c->trainer.batch_size, defaults.trainer.batch_size);
  EXPECT_EQ(c->trainer.checkpoint_dir, "");
  EXPECT_EQ(c->dense_optimizer.type, OptimizerType::kSgd);
  EXPECT_EQ(c->ps.shards, 0);
  EXPECT_TRUE(c->ps.local_aggregation);
  EXPECT_EQ(c->ps.value_encoding, ValueEncoding::kFp32);
  EXPECT_EQ(c->ps.hosts, PsHosts::kWorkers);
  EXPECT_EQ(c->model_toml, "");
  EXPECT_EQ(c->user_toml, "");
  EXPECT_TRUE(c->variables.empty());
}

TEST_F(JobConfigTest, OutOfRangeValueNamesFileLineColumnAndKey) {
  EXPECT_EQ(Error(std::string(kMinimal) + "steps = 0\n"),
            "job.toml:5:9: key 'trainer.steps': expected an integer >= 1, got 0");
}

TEST_F(JobConfigTest, EveryRangeIsChecked) {
  struct Case {
    std::string text;
    std::string expected;
  };
  const std::string job = "[job]\nname = \"t\"\n";
  const std::string trainer = "[trainer]\nmodel = \"lm\"\n";
  const std::vector<Case> cases = {
      {"[job]\nname = \"t\"\nworkers = 0\n" + trainer,
       "key 'job.workers': expected an integer >= 1, got 0"},
      {"[job]\nname = \"t\"\nstaleness = -1\n" + trainer,
       "key 'job.staleness': expected an integer >= 0, got -1"},
      {"[job]\nname = \"t\"\nmax_restarts = -2\n" + trainer,
       "key 'job.max_restarts': expected an integer >= 0, got -2"},
      {"[job]\nname = \"t\"\nworkers = 3000000000\n" + trainer,
       "key 'job.workers': expected an integer <= 2147483647"},
      {job + trainer + "batch_size = 0\n",
       "key 'trainer.batch_size': expected an integer >= 1, got 0"},
      {job + trainer + "checkpoint_every = -1\n",
       "key 'trainer.checkpoint_every': expected an integer >= 0, got -1"},
      {job + trainer + "keep_checkpoints = 0\n",
       "key 'trainer.keep_checkpoints': expected an integer >= 1, got 0"},
      {job + trainer + "metrics_every = 0\n",
       "key 'trainer.metrics_every': expected an integer >= 1, got 0"},
      {job + trainer + "[optimizer.dense]\nlr = 0\n",
       "key 'optimizer.dense.lr': expected a number > 0, got 0"},
      {job + trainer + "[optimizer.dense]\nlr = -0.5\n",
       "key 'optimizer.dense.lr': expected a number > 0, got -0.5"},
      {job + trainer + "[optimizer.dense]\nlr = inf\n",
       "key 'optimizer.dense.lr': expected a number > 0, got inf"},
      {job + trainer + "[optimizer.dense]\ntype = \"momentum\"\nmomentum = 1.0\n",
       "key 'optimizer.dense.momentum': expected a number in [0, 1), got 1"},
      {job + trainer + "[optimizer.dense]\ntype = \"adam\"\nbeta1 = -0.1\n",
       "key 'optimizer.dense.beta1': expected a number in [0, 1), got -0.1"},
      {job + trainer + "[optimizer.dense]\ntype = \"adam\"\nbeta2 = 1\n",
       "key 'optimizer.dense.beta2': expected a number in [0, 1), got 1"},
      {job + trainer + "[optimizer.sparse]\ntype = \"adam\"\nepsilon = 0.0\n",
       "key 'optimizer.sparse.epsilon': expected a number > 0, got 0"},
      {job + trainer + "[optimizer.sparse]\ntype = \"adagrad\"\ninitial_accumulator = -1\n",
       "key 'optimizer.sparse.initial_accumulator': expected a number >= 0, got -1"},
      {job + trainer + "[ps]\nshards = 0\n",
       "key 'ps.shards': expected 'auto' or an integer >= 1, got 0"},
      {job + trainer + "[ps]\npartitions = \"many\"\n",
       "key 'ps.partitions': expected 'auto' or an integer >= 1, got 'many'"},
      {job + trainer + "[[variable]]\nname = \"emb\"\npartitions = 0\n",
       "key 'variable[0].partitions': expected an integer >= 1, got 0"},
      {job + trainer + "[[variable]]\nname = \"ids\"\nadmit_after = 0\n",
       "key 'variable[0].admit_after': expected an integer >= 1, got 0"},
      {job + trainer + "[[variable]]\nname = \"ids\"\nttl_steps = -1\n",
       "key 'variable[0].ttl_steps': expected an integer >= 0, got -1"},
      {job + trainer + "[[variable]]\nname = \"ids\"\nmax_rows = 0\n",
       "key 'variable[0].max_rows': expected an integer >= 1, got 0"},
      {job + trainer + "[[variable]]\nname = \"ids\"\neviction = \"fifo\"\n",
       "key 'variable[0].eviction': expected one of lru, lfu, got 'fifo'"},
  };
  for (const Case& c : cases) {
    EXPECT_THAT(Error(c.text), HasSubstr(c.expected)) << c.text;
  }
}

TEST_F(JobConfigTest, ZeroAndBoundaryValuesAreAccepted) {
  StatusOr<JobConfig> c =
      ParseJobConfig(std::string(kMinimal) +
                         "checkpoint_every = 0\n"
                         "[optimizer.dense]\ntype = \"momentum\"\nmomentum = 0\n"
                         "[optimizer.sparse]\ntype = \"adagrad\"\n"
                         "initial_accumulator = 0\n",
                     "job.toml");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_FLOAT_EQ(c->dense_optimizer.momentum, 0.0);
  EXPECT_FLOAT_EQ(c->sparse_optimizer.initial_accumulator, 0.0);
  EXPECT_EQ(c->trainer.keep_checkpoints, 3);
  EXPECT_EQ(c->trainer.metrics_every, 10);
}

TEST_F(JobConfigTest, CheckpointAndMetricsKeysAreRead) {
  StatusOr<JobConfig> c = ParseJobConfig(
      std::string(kMinimal) + "keep_checkpoints = 1\nmetrics_every = 7\n", "job.toml");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->trainer.keep_checkpoints, 1);
  EXPECT_EQ(c->trainer.metrics_every, 7);
}

TEST_F(JobConfigTest, WrongTypeNamesExpectedAndActualTypes) {
  EXPECT_EQ(Error("[job]\nname = \"t\"\nworkers = \"two\"\n[trainer]\nmodel = \"lm\"\n"),
            "job.toml:3:11: key 'job.workers': expected an integer, got a string");
  EXPECT_THAT(Error(std::string(kMinimal) + "steps = 1.5\n"),
              HasSubstr("key 'trainer.steps': expected an integer, got a float"));
  EXPECT_THAT(Error(std::string(kMinimal) + "[ps]\nlocal_aggregation = \"yes\"\n"),
              HasSubstr("key 'ps.local_aggregation': expected a boolean, got a string"));
  EXPECT_THAT(Error(std::string(kMinimal) + "[optimizer.dense]\nlr = \"fast\"\n"),
              HasSubstr("key 'optimizer.dense.lr': expected a number, got a string"));
  EXPECT_THAT(Error("job = 3\n[trainer]\nmodel = \"lm\"\n"),
              HasSubstr("job.toml:1:7: key 'job': expected a table, got an integer"));
}

TEST_F(JobConfigTest, LrAcceptsAnInteger) {
  StatusOr<JobConfig> c =
      ParseJobConfig(std::string(kMinimal) + "[optimizer.dense]\nlr = 2\n", "job.toml");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_FLOAT_EQ(c->dense_optimizer.lr, 2.0);
}

TEST_F(JobConfigTest, UnknownKeySuggestsTheClosest) {
  EXPECT_EQ(Error("[job]\nname = \"t\"\nworker = 2\n[trainer]\nmodel = \"lm\"\n"),
            "job.toml:3:1: unknown key 'job.worker'; did you mean 'workers'?");
}

TEST_F(JobConfigTest, UnknownKeyWithNothingCloseHasNoSuggestion) {
  EXPECT_EQ(Error(std::string(kMinimal) + "  zebra = 1\n"),
            "job.toml:5:3: unknown key 'trainer.zebra'");
}

TEST_F(JobConfigTest, KeyInTheWrongTableNamesItsHome) {
  EXPECT_EQ(Error("[job]\nname = \"t\"\nsteps = 5\n[trainer]\nmodel = \"lm\"\n"),
            "job.toml:3:1: unknown key 'job.steps'; 'steps' belongs in [trainer]");
}

TEST_F(JobConfigTest, UnknownTopLevelTableSuggestsTheClosest) {
  EXPECT_EQ(Error(std::string(kMinimal) + "[optimiser.dense]\ntype = \"sgd\"\n"),
            "job.toml:5:2: unknown table 'optimiser'; did you mean 'optimizer'?");
}

TEST_F(JobConfigTest, UnknownEnumValueListsAllowedValuesAndSuggests) {
  EXPECT_EQ(Error("[job]\nname = \"t\"\narch = \"hybird\"\n[trainer]\nmodel = \"lm\"\n"),
            "job.toml:3:8: key 'job.arch': expected one of hybrid, allreduce, allgather, ps, "
            "got 'hybird'; did you mean 'hybrid'?");
  EXPECT_EQ(Error(std::string(kMinimal) + "[ps]\nvalue_encoding = \"int8\"\n"),
            "job.toml:6:18: key 'ps.value_encoding': expected one of fp32, fp16, got 'int8'");
  EXPECT_EQ(Error(std::string(kMinimal) + "[ps]\nhosts = \"worker\"\n"),
            "job.toml:6:9: key 'ps.hosts': expected one of workers, ps, got 'worker'; did you "
            "mean 'workers'?");
}

TEST_F(JobConfigTest, PsHostsPutTheShardsOnAgentsOfTheirOwn) {
  StatusOr<JobConfig> c =
      ParseJobConfig(std::string(kMinimal) + "[ps]\nhosts = \"ps\"\n", "job.toml");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->ps.hosts, PsHosts::kPs);
}

TEST_F(JobConfigTest, MalformedTomlReportsLineAndColumn) {
  const std::string message = Error("[job]\nname = \"t\"\nworkers = = 2\n");
  EXPECT_THAT(message, testing::StartsWith("job.toml:3:11: ")) << message;
  EXPECT_EQ(message.find('\n'), std::string::npos);
}

TEST_F(JobConfigTest, DuplicateKeyIsASyntaxError) {
  EXPECT_THAT(Error("[job]\nname = \"t\"\nname = \"u\"\n"), testing::StartsWith("job.toml:3:"));
}

TEST_F(JobConfigTest, ReportsEveryErrorSortedByPosition) {
  const std::string message = Error(
      "[ps]\n"                 // 1
      "shards = 0\n"           // 2
      "[job]\n"                // 3
      "name = \"bad name\"\n"  // 4
      "workers = 0\n"          // 5
      "[trainer]\n"            // 6
      "model = \"lm\"\n"       // 7
      "stepz = 5\n");          // 8
  EXPECT_EQ(message,
            "job.toml:2:10: key 'ps.shards': expected 'auto' or an integer >= 1, got 0\n"
            "job.toml:4:8: key 'job.name': expected a name of 1 to 64 characters from "
            "[A-Za-z0-9._-], got 'bad name'\n"
            "job.toml:5:11: key 'job.workers': expected an integer >= 1, got 0\n"
            "job.toml:8:1: unknown key 'trainer.stepz'; did you mean 'steps'?");
}

TEST_F(JobConfigTest, MissingRequiredKeysAreReportedAtTheirTable) {
  EXPECT_EQ(Error("[trainer]\nmodel = \"lm\"\n\n[job]\nworkers = 2\n"),
            "job.toml:4:1: key 'job.name': missing; expected a name of 1 to 64 characters "
            "from [A-Za-z0-9._-]");
  EXPECT_THAT(Error("[trainer]\nmodel = \"lm\"\n"),
              HasSubstr("job.toml:1:1: key 'job.name': missing"));
}

TEST_F(JobConfigTest, JobNameRules) {
  EXPECT_EQ(Error("[job]\nname = \"a.B_9-z\"\n[trainer]\nmodel = \"lm\"\n"), "");
  EXPECT_EQ(Error("[job]\nname = \"" + std::string(64, 'x') + "\"\n[trainer]\nmodel = \"lm\"\n"),
            "");
  EXPECT_THAT(Error("[job]\nname = \"" + std::string(65, 'x') + "\"\n[trainer]\nmodel = \"lm\"\n"),
              HasSubstr("key 'job.name'"));
  EXPECT_THAT(Error("[job]\nname = \"\"\n[trainer]\nmodel = \"lm\"\n"),
              HasSubstr("key 'job.name'"));
  EXPECT_THAT(Error("[job]\nname = \"a/b\"\n[trainer]\nmodel = \"lm\"\n"),
              HasSubstr("key 'job.name'"));
}

TEST_F(JobConfigTest, ExactlyOneOfModelAndCommand) {
  EXPECT_EQ(Error("[job]\nname = \"t\"\n[trainer]\nsteps = 5\n"),
            "job.toml:3:1: key 'trainer.model': missing; set model (a built-in model) or command "
            "(a custom trainer's argv), exactly one");
  EXPECT_THAT(Error("[job]\nname = \"t\"\n"), HasSubstr("job.toml:1:1: key 'trainer.model'"));
  EXPECT_THAT(Error(std::string(kMinimal) + "command = [\"./x\"]\n"),
              HasSubstr("job.toml:5:11: key 'trainer.command': trainer.model and "
                        "trainer.command are mutually exclusive"));
  EXPECT_THAT(Error("[job]\nname = \"t\"\n[trainer]\ncommand = [\"./x\", 3]\n"),
              HasSubstr("job.toml:4:19: key 'trainer.command[1]': expected a string, got an "
                        "integer"));
  EXPECT_THAT(Error("[job]\nname = \"t\"\n[trainer]\ncommand = []\n"),
              HasSubstr("key 'trainer.command': expected a non-empty array"));
}

TEST_F(JobConfigTest, StalenessOnlyAppliesToSsp) {
  EXPECT_THAT(Error("[job]\nname = \"t\"\nstaleness = 3\n[trainer]\nmodel = \"lm\"\n"),
              HasSubstr("job.toml:3:13: key 'job.staleness': staleness only applies to "
                        "consistency = 'ssp', but consistency is 'sync'"));
  EXPECT_THAT(Error("[job]\nname = \"t\"\nconsistency = \"async\"\nstaleness = 1\n"
                    "[trainer]\nmodel = \"lm\"\n"),
              HasSubstr("but consistency is 'async'"));
  // staleness = 0 is the default and harmless anywhere.
  EXPECT_EQ(Error("[job]\nname = \"t\"\nstaleness = 0\n[trainer]\nmodel = \"lm\"\n"), "");
}

TEST_F(JobConfigTest, SyncWarmupOnlyAppliesToAsyncOrSsp) {
  EXPECT_THAT(Error("[job]\nname = \"t\"\nsync_warmup_steps = 5\n[trainer]\nmodel = \"lm\"\n"),
              HasSubstr("job.toml:3:21: key 'job.sync_warmup_steps': sync_warmup_steps starts a "
                        "job in sync mode before its consistency applies, but consistency is "
                        "'sync'"));
  EXPECT_THAT(Error("[job]\nname = \"t\"\nconsistency = \"async\"\nsync_warmup_steps = -1\n"
                    "[trainer]\nmodel = \"lm\"\n"),
              HasSubstr("expected an integer >= 0"));
  EXPECT_EQ(Error("[job]\nname = \"t\"\nconsistency = \"ssp\"\nstaleness = 2\n"
                  "sync_warmup_steps = 100\n[trainer]\nmodel = \"lm\"\n"),
            "");
}

TEST_F(JobConfigTest, OptimizerKeysMustFitTheType) {
  EXPECT_EQ(Error(std::string(kMinimal) + "[optimizer.dense]\ntype = \"sgd\"\nbeta1 = 0.9\n"),
            "job.toml:7:9: key 'optimizer.dense.beta1': applies only to adam, not to type 'sgd'");
  EXPECT_THAT(Error(std::string(kMinimal) + "[optimizer.sparse]\nmomentum = 0.5\n"),
              HasSubstr("not to type 'sgd' (the default; set type)"));
  EXPECT_THAT(
      Error(std::string(kMinimal) + "[optimizer.sparse]\ntype = \"momentum\"\nepsilon = 1\n"),
      HasSubstr("applies only to adagrad and adam"));
  StatusOr<JobConfig> c = ParseJobConfig(std::string(kMinimal) +
                                             "[optimizer.dense]\ntype = \"adam\"\nlr = 0.5\nbeta1 "
                                             "= 0.8\nbeta2 = 0.99\nepsilon = 1e-6\n",
                                         "job.toml");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_FLOAT_EQ(c->dense_optimizer.beta1, 0.8);
  EXPECT_FLOAT_EQ(c->dense_optimizer.beta2, 0.99);
  EXPECT_FLOAT_EQ(c->dense_optimizer.epsilon, 1e-6);
}

// Elastic workers: min_workers defaults to workers (not elastic) and may
// not exceed it; scale_lr_with_workers is a job optimizer table's key only.
TEST_F(JobConfigTest, ElasticKeys) {
  const std::string trainer = "[trainer]\nmodel = \"lm\"\n";
  StatusOr<JobConfig> plain = ParseJobConfig("[job]\nname = \"t\"\nworkers = 4\n" + trainer, "job.toml");
  ASSERT_TRUE(plain.ok()) << plain.status().ToString();
  EXPECT_EQ(plain->job.min_workers, 4);
  EXPECT_EQ(plain->job.replace_timeout_s, 60);
  EXPECT_FALSE(plain->dense_scale_lr_with_workers);
  StatusOr<JobConfig> c = ParseJobConfig(
      "[job]\nname = \"t\"\nworkers = 4\nmin_workers = 2\nreplace_timeout_s = 5\n" + trainer +
          "[optimizer.sparse]\nscale_lr_with_workers = true\n",
      "job.toml");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->job.min_workers, 2);
  EXPECT_EQ(c->job.replace_timeout_s, 5);
  EXPECT_TRUE(c->sparse_scale_lr_with_workers);
  EXPECT_FALSE(c->dense_scale_lr_with_workers);
  EXPECT_EQ(Error("[job]\nname = \"t\"\nworkers = 2\nmin_workers = 3\n" + trainer),
            "job.toml:4:15: key 'job.min_workers': min_workers 3 is more than workers 2; it must "
            "be between 1 and workers");
  EXPECT_EQ(Error("[job]\nname = \"t\"\nmin_workers = 0\n" + trainer),
            "job.toml:3:15: key 'job.min_workers': expected an integer >= 1, got 0");
  EXPECT_NE(Error("[job]\nname = \"t\"\n" + trainer +
                  "[[variable]]\nname = \"emb\"\n[variable.optimizer]\nscale_lr_with_workers = true\n")
                .find("scale_lr_with_workers"),
            std::string::npos);
}

TEST_F(JobConfigTest, PsCountsAndAuto) {
  StatusOr<JobConfig> c =
      ParseJobConfig(std::string(kMinimal) +
                         "[ps]\nshards = 3\npartitions = \"auto\"\nlocal_aggregation = false\n"
                         "value_encoding = \"fp16\"\n",
                     "job.toml");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->ps.shards, 3);
  EXPECT_EQ(c->ps.partitions, 0);
  EXPECT_TRUE(c->ps.search_partitions);
  EXPECT_FALSE(c->ps.local_aggregation);
  EXPECT_EQ(c->ps.value_encoding, ValueEncoding::kFp16);
}

TEST_F(JobConfigTest, StalenessLrOnlyWhereAPushCanBeStale) {
  StatusOr<JobConfig> off = ParseJobConfig(kMinimal, "job.toml");
  ASSERT_TRUE(off.ok()) << off.status().ToString();
  EXPECT_FALSE(off->ps.staleness_lr);
  StatusOr<JobConfig> on = ParseJobConfig(
      "[job]\nname = \"t\"\nconsistency = \"async\"\n[trainer]\nmodel = \"lm\"\n"
      "[ps]\nstaleness_lr = true\n",
      "job.toml");
  ASSERT_TRUE(on.ok()) << on.status().ToString();
  EXPECT_TRUE(on->ps.staleness_lr);
  EXPECT_THAT(Error(std::string(kMinimal) + "[ps]\nstaleness_lr = true\n"),
              HasSubstr("job.toml:6:16: key 'ps.staleness_lr': staleness_lr only applies to "
                        "consistency = 'async' or 'ssp'"));
}

TEST_F(JobConfigTest, RowCacheOnlyWhereReadsMayBeStale) {
  StatusOr<JobConfig> off = ParseJobConfig(kMinimal, "job.toml");
  ASSERT_TRUE(off.ok()) << off.status().ToString();
  EXPECT_EQ(off->ps.cache_staleness, 0);
  EXPECT_EQ(off->ps.cache_rows, 100'000);
  StatusOr<JobConfig> on = ParseJobConfig(
      "[job]\nname = \"t\"\nconsistency = \"ssp\"\nstaleness = 2\n[trainer]\nmodel = \"lm\"\n"
      "[ps]\ncache_staleness = 4\ncache_rows = 5000\ncache_accumulate = true\n"
      "cache_rule = \"version\"\n",
      "job.toml");
  ASSERT_TRUE(on.ok()) << on.status().ToString();
  EXPECT_FALSE(off->ps.cache_accumulate);
  EXPECT_TRUE(on->ps.cache_accumulate);
  EXPECT_FALSE(off->ps.cache_check_versions);
  EXPECT_TRUE(on->ps.cache_check_versions);
  EXPECT_EQ(on->ps.cache_staleness, 4);
  EXPECT_EQ(on->ps.cache_rows, 5000);
  EXPECT_THAT(Error(std::string(kMinimal) + "[ps]\ncache_staleness = 4\n"),
              HasSubstr("key 'ps.cache_staleness': cache_staleness only applies to "
                        "consistency = 'async' or 'ssp'"));
  EXPECT_THAT(Error(std::string(kMinimal) + "[ps]\ncache_rows = 0\n"),
              HasSubstr("key 'ps.cache_rows': expected an integer >= 1, got 0"));
  EXPECT_THAT(Error(std::string(kMinimal) + "[ps]\ncache_rule = \"versions\"\n"),
              HasSubstr("key 'ps.cache_rule'"));
  EXPECT_THAT(Error(std::string(kMinimal) + "[ps]\ncache_rule = \"version\"\n"),
              HasSubstr("key 'ps.cache_rule': cache_rule = 'version' checks cached rows against "
                        "cache_staleness, and there is no cache"));
  // The cache's settings without a cache would do nothing: refused by name.
  const std::string async = "[job]\nname = \"t\"\nconsistency = \"async\"\n[trainer]\nmodel = \"lm\"\n";
  EXPECT_THAT(Error(async + "[ps]\ncache_rows = 5000\n"),
              HasSubstr("job.toml:7:14: key 'ps.cache_rows': cache_rows bounds the row cache, and "
                        "there is no cache: set cache_staleness"));
  EXPECT_THAT(Error(async + "[ps]\ncache_accumulate = true\n"),
              HasSubstr("key 'ps.cache_accumulate': cache_accumulate sums the gradients of cached "
                        "rows, and there is no cache"));
  EXPECT_TRUE(ParseJobConfig(async + "[ps]\ncache_accumulate = false\n", "job.toml").ok());
}

TEST_F(JobConfigTest, HotRowsAreOffByDefaultAutoOrACountAndOnlySync) {
  StatusOr<JobConfig> off = ParseJobConfig(kMinimal, "job.toml");
  ASSERT_TRUE(off.ok()) << off.status().ToString();
  EXPECT_EQ(off->ps.hot_rows, 0);
  StatusOr<JobConfig> autod = ParseJobConfig(std::string(kMinimal) + "[ps]\nhot_rows = \"auto\"\n", "job.toml");
  ASSERT_TRUE(autod.ok()) << autod.status().ToString();
  EXPECT_EQ(autod->ps.hot_rows, JobConfig::Ps::kHotRowsAuto);
  StatusOr<JobConfig> count = ParseJobConfig(std::string(kMinimal) + "[ps]\nhot_rows = 512\n", "job.toml");
  ASSERT_TRUE(count.ok()) << count.status().ToString();
  EXPECT_EQ(count->ps.hot_rows, 512);
  EXPECT_THAT(Error(std::string(kMinimal) + "[ps]\nhot_rows = \"many\"\n"),
              HasSubstr("key 'ps.hot_rows': expected 'auto' or an integer from 0 to 1000000, got 'many'"));
  EXPECT_THAT(Error(std::string(kMinimal) + "[ps]\nhot_rows = -3\n"),
              HasSubstr("key 'ps.hot_rows': expected 'auto' or an integer from 0 to 1000000, got -3"));
  EXPECT_THAT(Error("[job]\nname = \"t\"\nconsistency = \"async\"\n[trainer]\nmodel = \"lm\"\n"
                    "[ps]\nhot_rows = \"auto\"\n"),
              HasSubstr("key 'ps.hot_rows': hot_rows only applies to consistency = 'sync'"));
}

TEST_F(JobConfigTest, SharedMemoryIsOptInWithABoundedRegionSize) {
  StatusOr<JobConfig> off = ParseJobConfig(kMinimal, "job.toml");
  ASSERT_TRUE(off.ok()) << off.status().ToString();
  EXPECT_FALSE(off->ps.shared_memory);
  EXPECT_EQ(off->ps.shared_memory_mb, 64);
  StatusOr<JobConfig> on =
      ParseJobConfig(std::string(kMinimal) + "[ps]\nshared_memory = true\nshared_memory_mb = 16\n", "job.toml");
  ASSERT_TRUE(on.ok()) << on.status().ToString();
  EXPECT_TRUE(on->ps.shared_memory);
  EXPECT_EQ(on->ps.shared_memory_mb, 16);
  EXPECT_THAT(Error(std::string(kMinimal) + "[ps]\nshared_memory_mb = 0\n"),
              HasSubstr("job.toml:6:20: key 'ps.shared_memory_mb': shared_memory_mb must be an integer from 1 to 4096"));
  EXPECT_THAT(Error(std::string(kMinimal) + "[ps]\nshared_memory = \"yes\"\n"), HasSubstr("ps.shared_memory"));
}

// Without the key P is one partition per shard and nothing is searched.
TEST_F(JobConfigTest, PartitionSearchIsOnlyForAnExplicitAuto) {
  StatusOr<JobConfig> c = ParseJobConfig(kMinimal, "job.toml");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_FALSE(c->ps.search_partitions);
  EXPECT_EQ(c->plan.search_steps, 20);
  EXPECT_EQ(c->plan.search_warmup_steps, 5);
  EXPECT_EQ(c->plan.search_min_partitions, 0);
  EXPECT_EQ(c->plan.search_max_partitions, 64);
  EXPECT_EQ(c->plan.search_max_trials, 6);
  c = ParseJobConfig(std::string(kMinimal) + "[ps]\npartitions = 8\n", "job.toml");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_FALSE(c->ps.search_partitions);
}

TEST_F(JobConfigTest, PlanSearchKeys) {
  StatusOr<JobConfig> c = ParseJobConfig(
      std::string(kMinimal) +
          "[plan]\nsearch_steps = 30\nsearch_warmup_steps = 0\nsearch_min_partitions = 2\n"
          "search_max_partitions = 16\nsearch_max_trials = 4\n",
      "job.toml");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->plan.search_steps, 30);
  EXPECT_EQ(c->plan.search_warmup_steps, 0);
  EXPECT_EQ(c->plan.search_min_partitions, 2);
  EXPECT_EQ(c->plan.search_max_partitions, 16);
  EXPECT_EQ(c->plan.search_max_trials, 4);
  EXPECT_THAT(Error(std::string(kMinimal) + "[plan]\nsearch_steps = 0\n"),
              HasSubstr("job.toml:6:16: key 'plan.search_steps': expected an integer >= 1, got 0"));
  EXPECT_THAT(Error(std::string(kMinimal) + "[plan]\nsearch_max_trials = 2\n"),
              HasSubstr("key 'plan.search_max_trials': expected an integer >= 3, got 2"));
  EXPECT_THAT(Error(std::string(kMinimal) + "[plan]\nsearch_min_partitions = \"many\"\n"),
              HasSubstr("key 'plan.search_min_partitions': expected 'auto' or an integer >= 1"));
  EXPECT_THAT(
      Error(std::string(kMinimal) + "[plan]\nsearch_min_partitions = 8\nsearch_max_partitions = 4\n"),
      HasSubstr("key 'plan.search_max_partitions': expected an integer >= search_min_partitions "
                "(8), got 4"));
  EXPECT_THAT(Error(std::string(kMinimal) + "[plan]\nsearch_stepz = 3\n"),
              HasSubstr("plan.search_stepz"));
}

TEST_F(JobConfigTest, ReplanKeys) {
  StatusOr<JobConfig> c = ParseJobConfig(kMinimal, "job.toml");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_FALSE(c->plan.replan);
  EXPECT_EQ(c->plan.replan_factor, 2.0);
  EXPECT_EQ(c->plan.replan_after_steps, 100);
  EXPECT_EQ(c->plan.replan_window_steps, 100);
  c = ParseJobConfig(std::string(kMinimal) +
                         "[plan]\nreplan = true\nreplan_factor = 3.5\nreplan_after_steps = 0\n"
                         "replan_window_steps = 20\n",
                     "job.toml");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_TRUE(c->plan.replan);
  EXPECT_EQ(c->plan.replan_factor, 3.5);
  EXPECT_EQ(c->plan.replan_after_steps, 0);
  EXPECT_EQ(c->plan.replan_window_steps, 20);
  EXPECT_THAT(Error(std::string(kMinimal) + "[plan]\nreplan_factor = 1\n"),
              HasSubstr("key 'plan.replan_factor': expected a number > 1"));
  EXPECT_THAT(Error(std::string(kMinimal) + "[plan]\nreplan_window_steps = 0\n"),
              HasSubstr("key 'plan.replan_window_steps': expected an integer >= 1, got 0"));
  EXPECT_THAT(Error(std::string(kMinimal) + "[plan]\nreplan = \"yes\"\n"),
              HasSubstr("plan.replan"));
}

TEST_F(JobConfigTest, PsCurveIsOnByDefaultAndMustBeABoolean) {
  StatusOr<JobConfig> c = ParseJobConfig(kMinimal, "job.toml");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_TRUE(c->ps.curve);
  c = ParseJobConfig(std::string(kMinimal) + "[ps]\ncurve = false\n", "job.toml");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_FALSE(c->ps.curve);
  EXPECT_THAT(Error(std::string(kMinimal) + "[ps]\ncurve = \"off\"\n"),
              HasSubstr("key 'ps.curve': expected a boolean, got a string"));
}

TEST_F(JobConfigTest, PlanFiguresAreReadAndChecked) {
  StatusOr<JobConfig> c = ParseJobConfig(kMinimal, "job.toml");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_FALSE(c->plan.link_bytes_per_s.has_value());
  EXPECT_FALSE(c->plan.collective_latency_us.has_value());
  c = ParseJobConfig(std::string(kMinimal) +
                         "[plan]\nlink_bytes_per_s = 2.5e9\ncollective_latency_us = 800\n"
                         "ps_rtt_us = 0\n",
                     "job.toml");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_DOUBLE_EQ(c->plan.link_bytes_per_s.value_or(0), 2.5e9);
  EXPECT_DOUBLE_EQ(c->plan.collective_latency_us.value_or(0), 800);
  EXPECT_DOUBLE_EQ(c->plan.ps_rtt_us.value_or(-1), 0);
  EXPECT_THAT(Error(std::string(kMinimal) + "[plan]\nlink_bytes_per_s = 0\n"),
              HasSubstr("job.toml:6:20: key 'plan.link_bytes_per_s': expected a number > 0"));
  EXPECT_THAT(Error(std::string(kMinimal) + "[plan]\nps_rtt_us = -3\n"),
              HasSubstr("job.toml:6:13: key 'plan.ps_rtt_us': expected a number >= 0"));
  EXPECT_THAT(Error(std::string(kMinimal) + "[plan]\ncollective_latency_us = \"1ms\"\n"),
              HasSubstr("key 'plan.collective_latency_us': expected a number, got a string"));
  EXPECT_THAT(Error(std::string(kMinimal) + "[plan]\nps_rtt = 5\n"),
              HasSubstr("job.toml:6:1: unknown key 'plan.ps_rtt'"));
}

TEST_F(JobConfigTest, VariableOverrides) {
  StatusOr<JobConfig> c =
      ParseJobConfig(std::string(kMinimal) +
                         "[[variable]]\nname = \"emb\"\npath = \"ps\"\npartitions = 4\n"
                         "optimizer = { type = \"adagrad\", lr = 0.2 }\n"
                         "[[variable]]\nname = \"dense/w\"\n",
                     "job.toml");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  ASSERT_EQ(c->variables.size(), 2u);
  EXPECT_EQ(c->variables[0].name, "emb");
  EXPECT_EQ(c->variables[0].path, VariablePath::kPs);
  EXPECT_EQ(c->variables[0].partitions, 4);
  ASSERT_TRUE(c->variables[0].optimizer.has_value());
  EXPECT_EQ(c->variables[0].optimizer->type, OptimizerType::kAdagrad);
  EXPECT_FLOAT_EQ(c->variables[0].optimizer->lr, 0.2);
  EXPECT_FALSE(c->variables[1].path.has_value());
  EXPECT_FALSE(c->variables[1].optimizer.has_value());
  EXPECT_FALSE(c->variables[1].sets_dynamic());

  // A dynamic table's settings.
  c = ParseJobConfig(std::string(kMinimal) +
                         "[[variable]]\nname = \"ids\"\nadmit_after = 3\nttl_steps = 0\n"
                         "max_rows = 1000000\neviction = \"lfu\"\n",
                     "job.toml");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  ASSERT_EQ(c->variables.size(), 1u);
  EXPECT_TRUE(c->variables[0].sets_dynamic());
  EXPECT_EQ(c->variables[0].admit_after, 3);
  EXPECT_EQ(c->variables[0].ttl_steps, 0);
  EXPECT_EQ(c->variables[0].max_rows, 1000000);
  EXPECT_EQ(c->variables[0].eviction, EvictionPolicy::kLfu);

  EXPECT_EQ(Error(std::string(kMinimal) + "[[variable]]\npath = \"ps\"\n"),
            "job.toml:5:1: key 'variable[0].name': missing; expected the name of the variable "
            "to override");
  EXPECT_THAT(
      Error(std::string(kMinimal) + "[[variable]]\nname = \"a\"\n[[variable]]\nname = \"a\"\n"),
      HasSubstr("job.toml:8:8: key 'variable[1].name': duplicate override for variable "
                "'a' (first at line 6)"));
  EXPECT_THAT(Error(std::string(kMinimal) + "[[variable]]\nname = \"a\"\npath = \"gossip\"\n"),
              HasSubstr("key 'variable[0].path': expected one of allreduce, allgather, ps"));
  EXPECT_THAT(Error(std::string(kMinimal) +
                    "[[variable]]\nname = \"a\"\noptimizer = { type = \"sgd\", beta2 = 0.5 }\n"),
              HasSubstr("key 'variable[0].optimizer.beta2': applies only to adam"));
  EXPECT_THAT(Error(std::string(kMinimal) + "[variable]\nname = \"a\"\n"),
              HasSubstr("key 'variable': expected an array of tables (write [[variable]])"));
}

TEST_F(JobConfigTest, RelativePathsResolveAgainstTheJobFile) {
  Write("jobs/data/train.tok", "tokens");
  fs::create_directories(dir_ / "jobs" / "ckpt-parent");
  const std::string path = Write("jobs/job.toml", std::string(kMinimal) +
                                                      "checkpoint_dir = \"ckpt-parent/ckpt\"\n"
                                                      "[model]\ndata = \"data/train.tok\"\n"
                                                      "vocab_path = \"../jobs/data/train.tok\"\n");
  StatusOr<JobConfig> c = LoadJobConfig(path);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(fs::path(c->base_dir), fs::absolute(dir_ / "jobs"));
  EXPECT_EQ(c->trainer.checkpoint_dir, (fs::absolute(dir_ / "jobs") / "ckpt-parent/ckpt").string());
  const std::string data = (fs::absolute(dir_ / "jobs") / "data/train.tok").string();
  EXPECT_THAT(c->model_toml, HasSubstr("data = '" + data + "'"));
  EXPECT_THAT(c->model_toml, HasSubstr("vocab_path = '" + data + "'"));
}

TEST_F(JobConfigTest, MissingDataPathSaysHowToFetchIt) {
  const std::string path = Write(
      "job.toml", std::string(kMinimal) + "[model]\ndim = 8\ndata = \"data/brown/train.tok\"\n");
  StatusOr<JobConfig> c = LoadJobConfig(path);
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), StatusCode::kInvalidArgument);
  const std::string resolved = (fs::absolute(dir_) / "data/brown/train.tok").string();
  EXPECT_EQ(c.status().message(),
            path + ":7:8: key 'model.data': path '" + resolved +
                "' does not exist ('data/brown/train.tok' is relative to the job file's "
                "directory); run scripts/fetch-data to download the data sets");
  // A *_path key gets no fetch-data hint.
  StatusOr<JobConfig> d = LoadJobConfig(
      Write("job2.toml", std::string(kMinimal) + "[model.sub]\nvocab_path = \"nope.txt\"\n"));
  ASSERT_FALSE(d.ok());
  EXPECT_THAT(d.status().message(), HasSubstr("key 'model.sub.vocab_path': path '"));
  EXPECT_THAT(d.status().message(), Not(HasSubstr("fetch-data")));
  // An absolute path needs no word on how it was resolved.
  StatusOr<JobConfig> e = LoadJobConfig(
      Write("job3.toml", std::string(kMinimal) + "[model]\ndata = \"/no/such/file\"\n"));
  ASSERT_FALSE(e.ok());
  EXPECT_THAT(e.status().message(),
              HasSubstr("path '/no/such/file' does not exist; run scripts/fetch-data"));
}

// The CTR model's data is synthetic: fetch-data writes it only with
// --synthetic-ctr, and the hint says so (a plain fetch-data would download
// the Brown corpus and leave the job failing the same way).
TEST_F(JobConfigTest, MissingCtrDataNamesTheSyntheticFlag) {
  const std::string path = Write("ctr.toml",
                                 "[job]\nname = \"t\"\n[trainer]\nmodel = \"ctr\"\n"
                                 "[model]\ndata = \"data/ctr/train.tsv\"\n");
  StatusOr<JobConfig> c = LoadJobConfig(path);
  ASSERT_FALSE(c.ok());
  EXPECT_THAT(c.status().message(),
              HasSubstr("; run scripts/fetch-data --synthetic-ctr to write the synthetic CTR data"));
}

TEST_F(JobConfigTest, MissingPathsCanBeCollectedInsteadOfRefused) {
  const std::string text = std::string(kMinimal) +
                           "checkpoint_dir = \"/no/such/share/ckpt\"\n"
                           "[model]\ndata = \"/no/such/data.tok\"\n";
  std::vector<std::string> missing;
  StatusOr<JobConfig> c = ParseJobConfig(text, "/jobs/a/job.toml", {.missing_paths = &missing});
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  ASSERT_EQ(missing.size(), 2u);
  EXPECT_THAT(missing[0], HasSubstr("/jobs/a/job.toml:"));
  EXPECT_THAT(missing[0] + missing[1], HasSubstr("key 'trainer.checkpoint_dir': parent directory "
                                                 "'/no/such/share' does not exist"));
  EXPECT_THAT(missing[0] + missing[1], HasSubstr("key 'model.data': path '/no/such/data.tok'"));
  EXPECT_EQ(c->trainer.checkpoint_dir, "/no/such/share/ckpt");
  EXPECT_THAT(c->model_toml, HasSubstr("data = '/no/such/data.tok'"));
  // Every other mistake is still an error.
  missing.clear();
  EXPECT_FALSE(ParseJobConfig("bogus = 1\n" + text, "/jobs/a/job.toml", {.missing_paths = &missing})
                   .ok());
}

TEST_F(JobConfigTest, CheckPathsFalseSkipsExistenceChecks) {
  const std::string text = std::string(kMinimal) +
                           "checkpoint_dir = \"no/such/dir/ckpt\"\n"
                           "[model]\ndata = \"missing.tok\"\n";
  EXPECT_THAT(Error(text), HasSubstr("key 'model.data'"));
  EXPECT_THAT(Error(text), HasSubstr("key 'trainer.checkpoint_dir': parent directory"));
  StatusOr<JobConfig> c = ParseJobConfig(text, "/jobs/a/job.toml", {.check_paths = false});
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->base_dir, "/jobs/a");
  EXPECT_EQ(c->trainer.checkpoint_dir, "/jobs/a/no/such/dir/ckpt");
  EXPECT_THAT(c->model_toml, HasSubstr("data = '/jobs/a/missing.tok'"));
}

TEST_F(JobConfigTest, CheckpointDirParentMustExist) {
  const std::string path =
      Write("job.toml", std::string(kMinimal) + "checkpoint_dir = \"/\"\ncheckpoint_every = 10\n");
  EXPECT_TRUE(LoadJobConfig(path).ok());
  // A trailing slash names the same directory, whose parent must exist.
  StatusOr<JobConfig> slash =
      LoadJobConfig(Write("job1.toml", std::string(kMinimal) + "checkpoint_dir = \"ckpt/\"\n"));
  ASSERT_TRUE(slash.ok()) << slash.status().ToString();
  EXPECT_EQ(slash->trainer.checkpoint_dir, (fs::absolute(dir_) / "ckpt").string());
  StatusOr<JobConfig> c =
      LoadJobConfig(Write("job2.toml", std::string(kMinimal) + "checkpoint_dir = \"a/b/ckpt\"\n"));
  ASSERT_FALSE(c.ok());
  EXPECT_THAT(c.status().message(),
              HasSubstr(":5:18: key 'trainer.checkpoint_dir': parent directory '" +
                        (fs::absolute(dir_) / "a/b").string() + "' does not exist"));
}

// [trainer] timeline: a directory relative to the job file, checked like
// checkpoint_dir, with file:line:column errors.
TEST_F(JobConfigTest, TimelineIsADirectoryRelativeToTheJobFile) {
  StatusOr<JobConfig> c =
      LoadJobConfig(Write("jobs/job.toml", std::string(kMinimal) + "timeline = \"traces\"\n"));
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->trainer.timeline, (fs::absolute(dir_) / "jobs/traces").string());
  EXPECT_EQ(ParseJobConfig(kMinimal, "job.toml")->trainer.timeline, "");
  StatusOr<JobConfig> missing =
      LoadJobConfig(Write("job2.toml", std::string(kMinimal) + "timeline = \"a/b/tl\"\n"));
  ASSERT_FALSE(missing.ok());
  EXPECT_THAT(missing.status().message(),
              HasSubstr(":5:12: key 'trainer.timeline': parent directory '" +
                        (fs::absolute(dir_) / "a/b").string() + "' does not exist"));
  EXPECT_THAT(Error(std::string(kMinimal) + "timeline = 3\n"),
              HasSubstr("job.toml:5:12: key 'trainer.timeline'"));
  EXPECT_THAT(Error(std::string(kMinimal) + "timeline = \"\"\n"),
              HasSubstr("job.toml:5:12: key 'trainer.timeline': expected a non-empty path"));
}

TEST_F(JobConfigTest, ModelAndUserTablesRoundTripAsToml) {
  StatusOr<JobConfig> c = ParseJobConfig(
      std::string(kMinimal) +
          "[model]\nvocab = 50000\nname = \"x\"\nlayers = [1, 2]\n[model.encoder]\nheads = 4\n"
          "[user]\nanything_goes = true\ncolumns = [\"a\", \"b\"]\n",
      "job.toml");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_THAT(c->model_toml, HasSubstr("vocab = 50000"));
  EXPECT_THAT(c->model_toml, HasSubstr("name = 'x'"));
  EXPECT_THAT(c->model_toml, HasSubstr("layers = [ 1, 2 ]"));
  EXPECT_THAT(c->model_toml, HasSubstr("[encoder]\nheads = 4"));
  EXPECT_THAT(c->user_toml, HasSubstr("anything_goes = true"));
  EXPECT_THAT(c->user_toml, HasSubstr("columns = [ 'a', 'b' ]"));
  // The re-serialised tables are valid TOML: they load again as [user].
  StatusOr<JobConfig> again =
      ParseJobConfig(std::string(kMinimal) + "[user]\n" + c->user_toml, "job.toml");
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_EQ(again->user_toml, c->user_toml);
}

TEST_F(JobConfigTest, TrainerEnv) {
  StatusOr<JobConfig> c = ParseJobConfig(
      std::string(kMinimal) + "[trainer.env]\nOMP_NUM_THREADS = \"4\"\n_X = \"\"\n", "job.toml");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->trainer.env.at("OMP_NUM_THREADS"), "4");
  EXPECT_EQ(c->trainer.env.at("_X"), "");
  EXPECT_THAT(Error(std::string(kMinimal) + "[trainer.env]\nTHREADS = 4\n"),
              HasSubstr("job.toml:6:11: key 'trainer.env.THREADS': expected a string, got an "
                        "integer"));
  EXPECT_THAT(Error(std::string(kMinimal) + "[trainer.env]\n\"1BAD\" = \"x\"\n"),
              HasSubstr("key 'trainer.env.1BAD': expected an environment variable name"));
}

TEST_F(JobConfigTest, SubmittedTextResolvesAgainstTheCurrentDirectory) {
  for (const char* source : {"", "<submitted>"}) {
    StatusOr<JobConfig> c = ParseJobConfig(kMinimal, source);
    ASSERT_TRUE(c.ok()) << c.status().ToString();
    EXPECT_EQ(c->source, "<submitted>");
    EXPECT_EQ(fs::path(c->base_dir), fs::current_path());
  }
  StatusOr<JobConfig> bad = ParseJobConfig("[job]\n", "");
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(bad.status().message(), testing::StartsWith("<submitted>:1:1: "));
}

TEST_F(JobConfigTest, UnreadableFileIsAnIoError) {
  const std::string path = (dir_ / "absent.toml").string();
  StatusOr<JobConfig> c = LoadJobConfig(path);
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), StatusCode::kIoError);
  EXPECT_EQ(c.status().message(), "cannot read job file '" + path + "': No such file or directory");
  StatusOr<JobConfig> d = LoadJobConfig(dir_.string());
  ASSERT_FALSE(d.ok());
  EXPECT_EQ(d.status().code(), StatusCode::kIoError);
  EXPECT_THAT(d.status().message(), HasSubstr("Is a directory"));
}

TEST_F(JobConfigTest, SuggestsOnlyCloseCandidates) {
  constexpr std::string_view kKeys[] = {"workers", "arch", "consistency", "staleness"};
  EXPECT_EQ(SuggestClosest("worker", kKeys), "workers");
  EXPECT_EQ(SuggestClosest("acrh", kKeys), "arch");            // a swap costs 1
  EXPECT_EQ(SuggestClosest("consist", kKeys), "consistency");  // prefix
  EXPECT_EQ(SuggestClosest("banana", kKeys), "");
  EXPECT_EQ(SuggestClosest("xy", kKeys), "");
  EXPECT_EQ(EditDistance("kitten", "sitting"), 3u);
  EXPECT_EQ(DidYouMean("stalenes", kKeys), "; did you mean 'staleness'?");
}

}  // namespace
}  // namespace parallax

namespace parallax {
namespace {

// Found by tests/fuzz/job_config_fuzz: toml++ asserts on a NUL inside a table
// header. Control characters are refused before parsing, with a location.
TEST(JobConfigControlCharTest, NulAndControlCharactersAreRefusedWithALocation) {
  std::string text("[job]\nname = \"x\"\n[\0\0job]\n", 26);
  StatusOr<JobConfig> config = ParseJobConfig(text, "nul.toml");
  ASSERT_FALSE(config.ok());
  EXPECT_EQ(config.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(config.status().message().find("nul.toml:3:2: control character 0x00"),
            std::string::npos)
      << config.status().message();
  StatusOr<JobConfig> bell = ParseJobConfig("[job]\nname = \"a\x07\"\n", "bell.toml");
  ASSERT_FALSE(bell.ok());
  EXPECT_NE(bell.status().message().find("bell.toml:2:10: control character 0x07"),
            std::string::npos)
      << bell.status().message();
  // Where toml++ 3.3 would reach undefined behaviour on non-ASCII text.
  StatusOr<JobConfig> key = ParseJobConfig("[job]\npr\xC7\x94 = 1\n", "k.toml");
  ASSERT_FALSE(key.ok());
  EXPECT_NE(key.status().message().find("k.toml:2:3: a non-ASCII character outside a string"),
            std::string::npos)
      << key.status().message();
  StatusOr<JobConfig> slash =
      ParseJobConfig("[user]\ns = \"\"\"\\\n  \xC7\x94\"\"\"\n", "s.toml");
  ASSERT_FALSE(slash.ok());
  EXPECT_NE(slash.status().message().find("s.toml:3:3: a non-ASCII character right after"),
            std::string::npos)
      << slash.status().message();
  // Non-ASCII text in strings and comments is fine.
  StatusOr<JobConfig> fine = ParseJobConfig(
      "# caf\xC3\xA9\n[job]\nname = \"x\"\n[trainer]\nmodel = \"lm\"\n[user]\n"
      "a = \"caf\xC3\xA9\"\nb = 'caf\xC3\xA9'\nc = \"\"\"caf\xC3\xA9\"\"\"\n\"k\xC3\xA9y\" = 1\n",
      "ok.toml");
  EXPECT_TRUE(fine.ok()) << fine.status().message();
  // Tabs and CRLF line ends stay fine.
  EXPECT_TRUE(ParseJobConfig("[job]\r\nname\t= \"a\"\r\n[trainer]\r\nmodel = \"lm\"\r\n", "crlf.toml").ok());
}

}  // namespace
}  // namespace parallax
