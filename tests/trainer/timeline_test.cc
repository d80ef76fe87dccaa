// The step timeline (trainer/timeline.h): the trace it writes is a valid
// Chrome trace with every lane, events are well formed, the null recorder
// records and writes nothing, the event bound holds, and the overlap of
// communication with compute matches a hand computation.
#include "trainer/timeline.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>

#include "tests/testing/temp_dir.h"
#include "tests/trainer/tiny_trainer.h"
#include "parallax/session.h"

namespace parallax::trainer {
namespace {

using Json = nlohmann::json;
using Clock = Timeline::Clock;

class TimelineTest : public ::testing::Test {};

Clock::time_point At(int64_t us) {
  return Clock::time_point(std::chrono::microseconds(1'000'000 + us));
}

Json ReadJson(const std::string& path) {
  std::ifstream in(path);
  Json doc = Json::parse(in, nullptr, /*allow_exceptions=*/false);
  EXPECT_FALSE(doc.is_discarded()) << path << " is not JSON";
  return doc;
}

// tid → lane name, from the thread_name metadata.
std::map<int, std::string> Lanes(const Json& doc) {
  std::map<int, std::string> lanes;
  for (const Json& e : doc["traceEvents"]) {
    if (e["ph"] == "M" && e["name"] == "thread_name")
      lanes[e["tid"].get<int>()] = e["args"]["name"].get<std::string>();
  }
  return lanes;
}

// Every "X" event has ts >= 0 and dur >= 0, and starts no earlier than the
// one before it on its track; returns the number of X events per lane name.
std::map<std::string, int> CheckEvents(const Json& doc) {
  const std::map<int, std::string> lanes = Lanes(doc);
  std::map<std::string, int> count;
  std::map<std::pair<int, int>, double> last_ts, last_end;
  for (const Json& e : doc["traceEvents"]) {
    if (e["ph"] != "X") continue;
    const int pid = e["pid"], tid = e["tid"];
    const double ts = e["ts"], dur = e["dur"];
    EXPECT_GE(ts, 0);
    EXPECT_GE(dur, 0) << e.dump();
    EXPECT_TRUE(lanes.count(tid)) << "no thread_name for tid " << tid;
    auto key = std::make_pair(pid, tid);
    if (last_ts.count(key)) {
      EXPECT_GE(ts, last_ts[key]) << "ts not monotonic on tid " << tid;
      EXPECT_GE(ts, last_end[key]) << "overlapping events on tid " << tid << ": " << e.dump();
    }
    last_ts[key] = ts;
    last_end[key] = ts + dur;
    const auto lane = lanes.find(tid);
    if (lane != lanes.end()) ++count[lane->second];
  }
  return count;
}

TEST_F(TimelineTest, WritesEveryLaneWithWellFormedEvents) {
  testing::TempDir dir;
  Timeline t(TimelineOptions::ForRank(dir.File("trace"), 3, 1000));
  ASSERT_TRUE(t.enabled());
  ASSERT_TRUE(t.Open({"emb", "w"}).ok());
  t.OpenCompute(At(0));
  t.Enter(At(100));  // Lookup
  t.Record(Lane::kWait, At(110), At(150));
  t.Leave(At(160));
  t.Enter(At(300));  // Step
  t.Leave(At(400));
  // Two pulls in flight at once go to two tracks of the ps pull lane;
  // recorded out of order, as the I/O thread completes them.
  t.Record(Lane::kPsPull, At(50), At(250), 0);
  t.Record(Lane::kPsPull, At(20), At(200), 0);
  t.Record(Lane::kPsPush, At(310), At(350), 0);
  t.Record(Lane::kAllGather, At(360), At(380), 1);
  t.BucketStarted(0);
  t.BucketFinished(0);
  t.Record(Lane::kCheckpoint, At(400), At(420));
  ASSERT_TRUE(t.Write().ok());

  const std::string path = dir.File("trace/rank-3.trace.json");
  Json doc = ReadJson(path);
  ASSERT_TRUE(doc.is_object());
  const std::map<int, std::string> lanes = Lanes(doc);
  std::set<std::string> names;
  for (const auto& [tid, name] : lanes) names.insert(name);
  for (const char* lane : {"compute", "wait", "allreduce", "ps push", "ps pull", "ps pull 2",
                           "checkpoint", "allgather"}) {
    EXPECT_TRUE(names.count(lane)) << lane;
  }
  std::map<std::string, int> count = CheckEvents(doc);
  EXPECT_EQ(count["compute"], 2);  // [0, 100) and [160, 300)
  EXPECT_EQ(count["wait"], 1);
  EXPECT_EQ(count["ps pull"] + count["ps pull 2"], 2);
  EXPECT_EQ(count["ps pull 2"], 1);
  EXPECT_EQ(count["ps push"], 1);
  EXPECT_EQ(count["allreduce"], 1);
  EXPECT_EQ(count["checkpoint"], 1);
  EXPECT_EQ(count["allgather"], 1);
  bool second_compute = false;
  for (const Json& e : doc["traceEvents"]) {
    EXPECT_EQ(e["pid"], 3);
    if (e["ph"] == "X" && e["cat"] == "compute" && e["ts"] == Json(1'000'160.0)) {
      second_compute = true;
      EXPECT_EQ(e["dur"], Json(140.0));
    }
    if (e["ph"] == "X" && e["cat"] == "ps push") {
      EXPECT_EQ(e["name"], "push emb");
    }
    if (e["ph"] == "X" && e["cat"] == "allgather") {
      EXPECT_EQ(e["name"], "allgather w");
    }
  }
  EXPECT_TRUE(second_compute);
  EXPECT_EQ(doc["otherData"]["dropped_events"], 0);
}

TEST_F(TimelineTest, NullRecorderRecordsAndWritesNothing) {
  testing::TempDir dir;
  Timeline t(TimelineOptions::ForRank("", 0, 1000));
  EXPECT_FALSE(t.enabled());
  EXPECT_TRUE(t.Open({"emb"}).ok());
  t.OpenCompute(At(0));
  t.Enter(At(10));
  t.Leave(At(20));
  t.Record(Lane::kPsPull, At(0), At(5), 0);
  t.BucketStarted(0);
  t.BucketFinished(0);
  EXPECT_FALSE(t.FusionObserver());
  EXPECT_FALSE(t.PsObserver());
  EXPECT_EQ(t.size(), 0u);
  EXPECT_TRUE(t.Write().ok());
  EXPECT_TRUE(std::filesystem::is_empty(dir.path()));
}

TEST_F(TimelineTest, KeepsAtMostMaxEventsAndSaysSo) {
  testing::TempDir dir;
  Timeline t(TimelineOptions::ForRank(dir.path(), 0, 5));
  ASSERT_TRUE(t.Open({}).ok());
  for (int i = 0; i < 12; ++i) t.Record(Lane::kWait, At(i * 10), At(i * 10 + 5));
  EXPECT_EQ(t.size(), 5u);
  EXPECT_EQ(t.dropped(), 7u);
  ASSERT_TRUE(t.Write().ok());
  Json doc = ReadJson(dir.File("rank-0.trace.json"));
  EXPECT_EQ(CheckEvents(doc)["wait"], 5);
  bool noted = false;
  for (const Json& e : doc["traceEvents"]) {
    if (e["name"] == "timeline truncated") {
      noted = true;
      EXPECT_EQ(e["args"]["dropped_events"], 7);
    }
  }
  EXPECT_TRUE(noted);
  EXPECT_EQ(doc["otherData"]["dropped_events"], 7);
}

// compute [0,10) [20,30) (and [8,12), inside the union [0,12)); comm
// [5,25) overlaps 7 + 5 = 12 of 20 µs, [40,50) none, [25,28) all 3:
// 15 of 33 µs.
TEST_F(TimelineTest, OverlapOfSyntheticIntervalsEqualsHandComputation) {
  TraceIntervals r;
  r.compute = {{20, 30}, {0, 10}, {8, 12}};
  r.comm = {{5, 25}, {40, 50}, {25, 28}};
  Overlap o = ComputeOverlap(r);
  EXPECT_DOUBLE_EQ(o.comm_us, 33);
  EXPECT_DOUBLE_EQ(o.overlapped_us, 15);
  EXPECT_DOUBLE_EQ(o.fraction(), 15.0 / 33.0);
  EXPECT_EQ(o.comm_intervals, 3);
  EXPECT_EQ(o.overlapping_intervals, 2);
  EXPECT_EQ(ComputeOverlap({}).fraction(), 0.0);
}

// Intervals through a written trace and ReadTraceIntervals: compute [0,10)
// [20,30); comm [5,25) overlaps 5 + 5, [40,50) none, [25,28) all 3, an
// all-gather [60,64) none: 13 of 37 µs. A wait is not communication.
TEST_F(TimelineTest, OverlapReadBackFromWrittenTraces) {
  testing::TempDir dir;
  Timeline t(TimelineOptions::ForRank(dir.path(), 0, 100));
  ASSERT_TRUE(t.Open({"emb"}).ok());
  t.Record(Lane::kCompute, At(0), At(10));
  t.Record(Lane::kCompute, At(20), At(30));
  t.Record(Lane::kAllReduce, At(5), At(25), 0);
  t.Record(Lane::kPsPull, At(40), At(50), 0);
  t.Record(Lane::kPsPush, At(25), At(28), 0);
  t.Record(Lane::kAllGather, At(60), At(64), 0);
  t.Record(Lane::kWait, At(40), At(50));  // not communication
  ASSERT_TRUE(t.Write().ok());
  auto intervals = ReadTraceIntervals(dir.File("rank-0.trace.json"));
  ASSERT_TRUE(intervals.ok()) << intervals.status().ToString();
  ASSERT_EQ(intervals->size(), 1u);
  Overlap o = ComputeOverlap((*intervals)[0]);
  EXPECT_NEAR(o.comm_us, 37, 1e-6);
  EXPECT_NEAR(o.overlapped_us, 13, 1e-6);
  const Json line = Json::parse(OverlapJsonLine(o, 1));
  EXPECT_EQ(line["bench"], "timeline");
  EXPECT_EQ(line["metric"], "overlap_fraction");
  EXPECT_NEAR(line["value"].get<double>(), 13.0 / 37.0, 1e-9);

  std::ofstream(dir.File("bad.json")) << "{\"traceEvents\": 3}";
  EXPECT_EQ(ReadTraceIntervals(dir.File("bad.json")).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(ReadTraceIntervals(dir.File("missing.json")).status().code(), StatusCode::kIoError);
}

// A one-rank session records compute and waits into
// <timeline_dir>/rank-0.trace.json when it goes away; without timeline_dir
// it writes nothing.
TEST_F(TimelineTest, SessionWritesTraceOnlyWhenAsked) {
  for (bool on : {true, false}) {
    testing::TempDir dir;
    SessionOptions o;
    o.config.job.arch = Arch::kAllGather;
    if (on) o.config.trainer.timeline = dir.File("tl");
    {
      auto session = Session::Create(o);
      ASSERT_TRUE(session.ok()) << session.status().ToString();
      int emb = -1, w = -1;
      ASSERT_TRUE(parallax::testing::RegisterTiny(session->get(), &emb, &w).ok());
      ASSERT_TRUE((*session)->Start().ok());
      ASSERT_TRUE(parallax::testing::TrainTiny(session->get(), emb, w, 5, 8, false).ok());
    }
    if (!on) {
      EXPECT_TRUE(std::filesystem::is_empty(dir.path()));
      continue;
    }
    Json doc = ReadJson(dir.File("tl/rank-0.trace.json"));
    std::map<std::string, int> count = CheckEvents(doc);
    EXPECT_GE(count["compute"], 5);    // at least one gap per step
    EXPECT_EQ(count["allreduce"], 0);  // one rank: no collectives
  }
}

}  // namespace
}  // namespace parallax::trainer
