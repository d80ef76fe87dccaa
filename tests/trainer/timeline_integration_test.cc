// The step timeline in a real job: a parallax-coordinator, one parallax-ps
// shard and two trainer_test_rank processes of the tiny model (a dense
// variable on all-reduce, the embedding on the PS, the next batch prefetched
// right after Lookup) with `timeline = DIR` in the job file. Every rank
// writes a valid trace with every lane, and the eager pull overlaps compute:
// parallax-timeline-stats reports an overlapped fraction above zero.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>

#include <cstdlib>
#include <fstream>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "core/rpc/coordinator_client.h"
#include "tests/testing/build_paths.h"
#include "tests/testing/coordinator_connect.h"
#include "tests/testing/coordinator_process.h"
#include "tests/testing/subprocess.h"
#include "tests/testing/temp_dir.h"

namespace parallax {
namespace {

using testing::ChildProcess;
using Json = nlohmann::json;

std::string BinDir() { return testing::BinDirOr(::parallax::testing::BuildBinDir()); }

class TimelineIntegrationTest : public ::testing::Test {
 protected:
  void SetUp() override {
    coordinator_ = std::make_unique<testing::CoordinatorProcess>(BinDir(), dir_.path());
    ASSERT_TRUE(coordinator_->ok()) << coordinator_->error();
    port_ = coordinator_->port_text();
    auto c = testing::ConnectToCoordinator(*coordinator_);
    ASSERT_TRUE(c.ok()) << c.status().ToString();
    coord_ = std::move(c).value();
  }

  testing::TempDir dir_;
  std::unique_ptr<testing::CoordinatorProcess> coordinator_;
  std::string port_;
  std::unique_ptr<CoordinatorClient> coord_;
};

TEST_F(TimelineIntegrationTest, HybridRanksWriteTracesAndThePrefetchOverlapsCompute) {
  constexpr int kRanks = 2, kSteps = 30, kBatch = 32;
  const std::string timeline = dir_.File("timeline");
  const std::string text =
      "[job]\nname = \"timeline\"\nworkers = 2\narch = \"hybrid\"\n"
      "[trainer]\ncommand = [\"./trainer_test_rank\"]\ntimeline = \"" +
      timeline +
      "\"\n[optimizer.dense]\ntype = \"sgd\"\nlr = 0.1\n"
      "[optimizer.sparse]\ntype = \"adagrad\"\nlr = 0.1\n"
      "[ps]\nshards = 1\n[[variable]]\nname = \"emb\"\npath = \"ps\"\n"
      // The dense weights all-reduced (the cost model may put them on the PS).
      "[[variable]]\nname = \"w\"\npath = \"allreduce\"\n";
  const std::string job_file = dir_.File("job.toml");
  std::ofstream(job_file) << text;
  auto job = coord_->SubmitJob(text, job_file);
  ASSERT_TRUE(job.ok()) << job.status().ToString();
  auto env = [&](const std::string& role, const std::string& index_var, int index) {
    return std::vector<std::string>{"PARALLAX_JOB_ID=" + std::to_string(job->id),
                                    "PARALLAX_ATTEMPT=1",
                                    "PARALLAX_WORLD_SIZE=" + std::to_string(kRanks),
                                    "PARALLAX_NUM_SHARDS=1",
                                    "PARALLAX_COORDINATOR=127.0.0.1:" + port_,
                                    "PARALLAX_BIND_ADDR=127.0.0.1",
                                    "PARALLAX_JOB_FILE=" + job_file,
                                    "PARALLAX_ROLE=" + role,
                                    index_var + "=" + std::to_string(index)};
  };
  ChildProcess shard({BinDir() + "/parallax-ps"}, dir_.File("shard.log"),
                     env("ps", "PARALLAX_SHARD", 0));
  std::vector<std::unique_ptr<ChildProcess>> ranks;
  for (int r = 0; r < kRanks; ++r) {
    ranks.push_back(std::make_unique<ChildProcess>(
        std::vector<std::string>{BinDir() + "/trainer_test_rank",
                                 dir_.File("rank" + std::to_string(r) + ".out"),
                                 std::to_string(kSteps), std::to_string(kBatch), "prefetch-early"},
        dir_.File("rank" + std::to_string(r) + ".log"), env("trainer", "PARALLAX_RANK", r)));
  }
  for (int r = 0; r < kRanks; ++r) {
    const int status = ranks[static_cast<size_t>(r)]->Wait(120'000);
    ASSERT_TRUE(status != -1 && WIFEXITED(status) && WEXITSTATUS(status) == 0)
        << "rank " << r << " (status " << status << "):\n"
        << testing::ReadWholeFile(dir_.File("rank" + std::to_string(r) + ".log"));
  }
  shard.Signal(SIGTERM);
  EXPECT_NE(shard.Wait(10'000), -1);

  std::vector<std::string> files;
  for (int r = 0; r < kRanks; ++r) {
    const std::string file = timeline + "/rank-" + std::to_string(r) + ".trace.json";
    files.push_back(file);
    std::ifstream in(file);
    ASSERT_TRUE(in.good()) << file << " was not written";
    Json doc = Json::parse(in, nullptr, /*allow_exceptions=*/false);
    ASSERT_FALSE(doc.is_discarded()) << file << " is not JSON";
    std::map<int, std::string> lanes;
    for (const Json& e : doc["traceEvents"]) {
      if (e["ph"] == "M" && e["name"] == "thread_name")
        lanes[e["tid"].get<int>()] = e["args"]["name"].get<std::string>();
    }
    std::map<std::string, int> count;
    std::map<int, double> last_end;
    for (const Json& e : doc["traceEvents"]) {
      if (e["ph"] != "X") continue;
      EXPECT_EQ(e["pid"], r);
      const int tid = e["tid"];
      const double ts = e["ts"], dur = e["dur"];
      EXPECT_GE(dur, 0);
      if (last_end.count(tid)) {
        EXPECT_GE(ts, last_end[tid]) << file << " tid " << tid;
      }
      last_end[tid] = ts + dur;
      ASSERT_TRUE(lanes.count(tid)) << file << ": no thread_name for tid " << tid;
      ++count[lanes[tid].substr(0, lanes[tid].find_first_of("0123456789") - 1)];
    }
    // Every step computes, waits, all-reduces w, pushes and pulls emb.
    for (const char* lane : {"compute", "wait", "allreduce", "ps push", "ps pull"}) {
      EXPECT_GE(count[lane], kSteps) << file << " lane " << lane;
    }
    std::set<std::string> names;
    for (const auto& [tid, name] : lanes) names.insert(name);
    EXPECT_TRUE(names.count("checkpoint")) << file;
    EXPECT_EQ(doc["otherData"]["dropped_events"], 0);
  }

  std::vector<std::string> argv = {BinDir() + "/parallax-timeline-stats"};
  argv.insert(argv.end(), files.begin(), files.end());
  testing::RunResult stats = testing::RunProcess(argv);
  ASSERT_EQ(stats.exit_code, 0) << stats.err;
  Json line = Json::parse(stats.out, nullptr, /*allow_exceptions=*/false);
  ASSERT_FALSE(line.is_discarded()) << stats.out;
  EXPECT_EQ(line["bench"], "timeline");
  EXPECT_EQ(line["metric"], "overlap_fraction");
  EXPECT_EQ(line["ranks"], kRanks);
  EXPECT_GT(line["value"].get<double>(), 0.0) << stats.out;
  EXPECT_LE(line["value"].get<double>(), 1.0) << stats.out;
  RecordProperty("overlap", stats.out);
  std::cout << stats.out;
}

}  // namespace
}  // namespace parallax
