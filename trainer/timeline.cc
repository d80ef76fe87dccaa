#include "trainer/timeline.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>

#include "core/base/durable_file.h"
#include "core/comm/gradient_fusion.h"
#include "core/ps/client.h"

namespace parallax::trainer {
namespace {

using Json = nlohmann::json;

int64_t Ns(Timeline::Clock::time_point t) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(t.time_since_epoch()).count();
}

// Microseconds with nanosecond digits: Perfetto keeps them.
double Us(int64_t ns) { return static_cast<double>(ns) / 1000.0; }

// One event (Timeline's, with lane, id, step, start_ns, end_ns) as a Chrome
// trace complete event on track `tid`: buckets and variables by name.
template <typename Event>
Json EventJson(const Event& e, int pid, int tid, const std::vector<std::string>& names) {
  std::string name = LaneName(e.lane);
  Json args = {{"step", e.step}};
  if (e.lane == Lane::kAllReduce && e.id >= 0) {
    name = "bucket " + std::to_string(e.id);
    args["bucket"] = e.id;
  } else if ((e.lane == Lane::kPsPush || e.lane == Lane::kPsPull || e.lane == Lane::kAllGather) &&
             e.id >= 0) {
    const std::string var = static_cast<size_t>(e.id) < names.size()
                                ? names[static_cast<size_t>(e.id)]
                                : "var " + std::to_string(e.id);
    name = std::string(e.lane == Lane::kPsPush   ? "push "
                       : e.lane == Lane::kPsPull ? "pull "
                                                 : "allgather ") +
           var;
    args["var"] = var;
  }
  return {{"name", std::move(name)},
          {"cat", LaneName(e.lane)},
          {"ph", "X"},
          {"ts", Us(e.start_ns)},
          {"dur", Us(e.end_ns - e.start_ns)},
          {"pid", pid},
          {"tid", tid},
          {"args", std::move(args)}};
}

// Tracks named after a communication lane (or one of its extra tracks).
bool IsCommLane(const std::string& name) {
  return name.rfind("allreduce", 0) == 0 || name.rfind("allgather", 0) == 0 ||
         name.rfind("ps push", 0) == 0 || name.rfind("ps pull", 0) == 0;
}

}  // namespace

const char* LaneName(Lane lane) {
  switch (lane) {
    case Lane::kCompute:
      return "compute";
    case Lane::kWait:
      return "wait";
    case Lane::kAllReduce:
      return "allreduce";
    case Lane::kPsPush:
      return "ps push";
    case Lane::kPsPull:
      return "ps pull";
    case Lane::kCheckpoint:
      return "checkpoint";
    case Lane::kAllGather:
      return "allgather";
  }
  return "?";
}

Timeline::Timeline(TimelineOptions options)
    : enabled_(!options.path.empty()), options_(std::move(options)) {
  if (enabled_) events_.reserve(std::min<size_t>(options_.max_events, 4096));
}

TimelineOptions TimelineOptions::ForRank(const std::string& dir, int rank, size_t max_events) {
  TimelineOptions t;
  if (!dir.empty()) t.path = dir + "/rank-" + std::to_string(rank) + ".trace.json";
  t.rank = rank;
  t.max_events = max_events;
  return t;
}

Status Timeline::Open(std::vector<std::string> variable_names) {
  if (!enabled_) return Status::Ok();
  const std::filesystem::path dir = std::filesystem::path(options_.path).parent_path();
  std::error_code ec;
  if (!dir.empty()) std::filesystem::create_directories(dir, ec);
  if (ec) {
    return IoError("cannot create the timeline directory \"" + dir.string() +
                   "\": " + ec.message() + "; fix trainer.timeline (or parallax run --timeline)");
  }
  std::lock_guard<std::mutex> lock(mu_);
  var_names_ = std::move(variable_names);
  return Status::Ok();
}

std::function<void(const comm::FusionEvent&)> Timeline::FusionObserver() {
  if (!enabled_) return {};
  return [this](const comm::FusionEvent& e) {
    if (e.kind == comm::FusionEvent::kBucketStarted) BucketStarted(e.index);
    if (e.kind == comm::FusionEvent::kBucketFinished) BucketFinished(e.index);
  };
}

std::function<void(const ps::CompletedRequest&)> Timeline::PsObserver() {
  if (!enabled_) return {};
  return [this](const ps::CompletedRequest& c) {
    using Kind = ps::CompletedRequest::Kind;
    if (c.kind == Kind::kControl) return;
    Add(c.kind == Kind::kPull ? Lane::kPsPull : Lane::kPsPush, c.submitted, c.completed,
        static_cast<int32_t>(c.var));
  };
}

void Timeline::Add(Lane lane, Clock::time_point start, Clock::time_point end, int32_t id) {
  const int64_t step = step_.load(std::memory_order_relaxed);
  std::lock_guard<std::mutex> lock(mu_);
  if (events_.size() >= options_.max_events) {
    ++dropped_;
    return;
  }
  events_.push_back({Ns(start), std::max(Ns(end), Ns(start)), step, id, lane});
}

void Timeline::BucketStarted(int bucket) {
  if (!enabled_ || bucket < 0) return;
  const auto now = Clock::now();
  std::lock_guard<std::mutex> lock(mu_);
  if (buckets_.size() <= static_cast<size_t>(bucket)) buckets_.resize(bucket + 1);
  buckets_[static_cast<size_t>(bucket)] = now;
}

void Timeline::BucketFinished(int bucket) {
  if (!enabled_ || bucket < 0) return;
  const auto now = Clock::now();
  Clock::time_point start;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (static_cast<size_t>(bucket) >= buckets_.size()) return;
    start = buckets_[static_cast<size_t>(bucket)];
  }
  Add(Lane::kAllReduce, start, now, bucket);
}

size_t Timeline::size() const {
  std::lock_guard<std::mutex> lock(mu_);
  return events_.size();
}

size_t Timeline::dropped() const {
  std::lock_guard<std::mutex> lock(mu_);
  return dropped_;
}

Status Timeline::Write() const {
  if (!enabled_) return Status::Ok();
  std::vector<Event> events;
  std::vector<std::string> names;
  size_t dropped;
  {
    std::lock_guard<std::mutex> lock(mu_);
    events = events_;
    names = var_names_;
    dropped = dropped_;
  }
  std::stable_sort(events.begin(), events.end(), [](const Event& a, const Event& b) {
    return a.lane != b.lane ? a.lane < b.lane : a.start_ns < b.start_ns;
  });
  const int pid = options_.rank;
  Json trace = Json::array();
  auto meta = [&](const char* what, int tid, Json args) {
    Json m = {{"name", what}, {"ph", "M"}, {"pid", pid}, {"args", std::move(args)}};
    if (tid >= 0) m["tid"] = tid;
    trace.push_back(std::move(m));
  };
  meta("process_name", -1, {{"name", "rank " + std::to_string(pid)}});
  meta("process_sort_index", -1, {{"sort_index", pid}});
  // Every lane gets its track (even when empty, so the lanes are always
  // there to read); overlapping events of a lane get extra tracks.
  std::map<int, std::vector<int64_t>> track_ends;  // lane → end of each track's last event
  for (int l = 1; l <= kNumLanes; ++l) track_ends[l] = {};
  int64_t first_ns = events.empty() ? 0 : events.front().start_ns;
  for (const Event& e : events) first_ns = std::min(first_ns, e.start_ns);
  for (const Event& e : events) {
    const int lane = static_cast<int>(e.lane);
    std::vector<int64_t>& ends = track_ends[lane];
    size_t k = 0;
    while (k < ends.size() && ends[k] > e.start_ns) ++k;
    if (k == ends.size()) ends.push_back(0);
    ends[k] = e.end_ns;
    const int tid = k == 0 ? lane : lane * 10 + static_cast<int>(k);
    trace.push_back(EventJson(e, pid, tid, names));
  }
  for (const auto& [lane, ends] : track_ends) {
    const std::string base = LaneName(static_cast<Lane>(lane));
    for (size_t k = 0; k < std::max<size_t>(ends.size(), 1); ++k) {
      const int tid = k == 0 ? lane : lane * 10 + static_cast<int>(k);
      meta("thread_name", tid, {{"name", k == 0 ? base : base + " " + std::to_string(k + 1)}});
      meta("thread_sort_index", tid, {{"sort_index", tid}});
    }
  }
  if (dropped > 0) {
    int64_t last_ns = first_ns;
    for (const Event& e : events) last_ns = std::max(last_ns, e.end_ns);
    trace.push_back({{"name", "timeline truncated"},
                     {"ph", "i"},
                     {"s", "p"},
                     {"ts", Us(last_ns)},
                     {"pid", pid},
                     {"tid", static_cast<int>(Lane::kCompute)},
                     {"args",
                      {{"kept_events", events.size()},
                       {"dropped_events", dropped},
                       {"why", "trainer timeline keeps at most max_events events per rank"}}}});
  }
  Json doc = {{"traceEvents", std::move(trace)},
              {"displayTimeUnit", "ms"},
              {"otherData",
               {{"rank", pid},
                {"clock", "CLOCK_MONOTONIC microseconds"},
                {"max_events", options_.max_events},
                {"kept_events", events.size()},
                {"dropped_events", dropped}}}};
  Status st = WriteFileDurably(options_.path, doc.dump() + "\n");
  return st.ok() ? st
                 : st.WithContext("writing the timeline (trainer.timeline); check that its "
                                  "directory exists and is writable");
}

Overlap ComputeOverlap(const TraceIntervals& rank) {
  std::vector<TraceIntervals::Interval> compute = rank.compute;
  std::sort(compute.begin(), compute.end(),
            [](const auto& a, const auto& b) { return a.start < b.start; });
  std::vector<TraceIntervals::Interval> merged;  // the union, disjoint and sorted
  for (const auto& c : compute) {
    if (c.end <= c.start) continue;
    if (!merged.empty() && c.start <= merged.back().end) {
      merged.back().end = std::max(merged.back().end, c.end);
    } else {
      merged.push_back(c);
    }
  }
  Overlap o;
  for (const auto& m : rank.comm) {
    if (m.end < m.start) continue;
    ++o.comm_intervals;
    o.comm_us += m.end - m.start;
    // First union interval that ends after m starts.
    auto it = std::upper_bound(merged.begin(), merged.end(), m.start,
                               [](double t, const auto& c) { return t < c.end; });
    double inside = 0;
    for (; it != merged.end() && it->start < m.end; ++it) {
      inside += std::min(it->end, m.end) - std::max(it->start, m.start);
    }
    o.overlapped_us += inside;
    if (inside > 0) ++o.overlapping_intervals;
  }
  return o;
}

StatusOr<std::vector<TraceIntervals>> ReadTraceIntervals(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return IoError("cannot read the trace \"" + path + "\"");
  Json doc = Json::parse(in, nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded()) return InvalidArgument("\"" + path + "\" is not JSON");
  const Json* events = &doc;
  if (doc.is_object()) {
    auto it = doc.find("traceEvents");
    if (it == doc.end()) return InvalidArgument("\"" + path + "\" has no traceEvents");
    events = &*it;
  }
  if (!events->is_array())
    return InvalidArgument("\"" + path + "\": traceEvents is not an array of events");
  auto integer = [](const Json& e, const char* key) -> int64_t {
    auto it = e.find(key);
    return it != e.end() && it->is_number() ? it->get<int64_t>() : 0;
  };
  std::map<std::pair<int64_t, int64_t>, std::string> lane_of;  // (pid, tid) → lane name
  for (const Json& e : *events) {
    if (!e.is_object() || e.value("ph", "") != "M" || e.value("name", "") != "thread_name")
      continue;
    auto args = e.find("args");
    if (args == e.end() || !args->is_object()) continue;
    lane_of[{integer(e, "pid"), integer(e, "tid")}] = args->value("name", "");
  }
  std::map<int64_t, TraceIntervals> by_pid;
  for (const Json& e : *events) {
    if (!e.is_object() || e.value("ph", "") != "X") continue;
    auto ts = e.find("ts"), dur = e.find("dur");
    if (ts == e.end() || dur == e.end() || !ts->is_number() || !dur->is_number()) {
      return InvalidArgument("\"" + path + "\": an \"X\" event without numeric ts and dur");
    }
    const int64_t pid = integer(e, "pid");
    auto lane = lane_of.find({pid, integer(e, "tid")});
    if (lane == lane_of.end()) continue;
    const double start = ts->get<double>();
    const TraceIntervals::Interval iv{start, start + dur->get<double>()};
    if (lane->second == "compute") {
      by_pid[pid].compute.push_back(iv);
    } else if (IsCommLane(lane->second)) {
      by_pid[pid].comm.push_back(iv);
    }
  }
  std::vector<TraceIntervals> out;
  for (auto& [pid, intervals] : by_pid) out.push_back(std::move(intervals));
  return out;
}

std::string OverlapJsonLine(const Overlap& total, int ranks) {
  Json line = {{"bench", "timeline"},
               {"metric", "overlap_fraction"},
               {"value", total.fraction()},
               {"comm_us", total.comm_us},
               {"overlapped_us", total.overlapped_us},
               {"comm_intervals", total.comm_intervals},
               {"overlapping_intervals", total.overlapping_intervals},
               {"ranks", ranks}};
  return line.dump();
}

}  // namespace parallax::trainer
