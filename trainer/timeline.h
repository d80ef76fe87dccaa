// Timeline: the step timeline of one trainer rank, written
// as a Chrome trace (Trace Event Format, JSON object form) that Perfetto
// (ui.perfetto.dev) and chrome://tracing open. docs/PERFORMANCE.md says how
// to record and read it.
//
// Every activity is an "X" (complete) event with ts and dur in microseconds
// of the host's monotonic clock (CLOCK_MONOTONIC: ranks on one host line up;
// ranks on different hosts each start at their own host's boot), pid = the
// rank and tid = a lane:
//   compute    the training thread outside Lookup(), Step(), ReportMetrics(),
//              ReadSparse() and outside every wait: the model's own code,
//              inferred from the gaps between session calls. Prefetch() and
//              Gradient() are short and never block, so they stay inside it
//              (a wait inside them splits it). Opens when Start() returns; the
//              gap after the last session call is not recorded.
//   wait       the training thread blocked on communication (a pull in
//              Lookup(), the fusion buckets and PS acks in Step()).
//   allreduce  one fusion bucket, from when the fusion thread hands it to the
//              communicator until the all-reduce completes.
//   ps push    a PS push (or push-pull), from the call to the last shard's reply.
//   ps pull    a PS pull (Lookup or Prefetch), from the call to the last reply.
//   checkpoint writing a checkpoint at the end of Step().
// Intervals of one lane that overlap (two pulls in flight) go to extra
// tracks of that lane ("ps pull 2", ...), so every track nests properly.
//
// A Timeline with no path is the null recorder: every method returns at its
// first test of enabled(), with no clock read and no allocation. An
// enabled one keeps at most `max_events` events, then drops the rest and
// says so in the file (a "timeline truncated" instant event and
// otherData.dropped_events).
//
// Thread-safety: Record() and the PS/fusion hooks may be called from any
// thread; the compute bookkeeping (Enter/Leave/OpenCompute, SetStep) belongs
// to the training thread.
#ifndef PARALLAX_TRAINER_TIMELINE_H_
#define PARALLAX_TRAINER_TIMELINE_H_

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <mutex>
#include <string>
#include <vector>

#include "parallax/status.h"

namespace parallax::comm {
struct FusionEvent;
}
namespace parallax::ps {
struct CompletedRequest;
}

namespace parallax::trainer {

enum class Lane : uint8_t {
  kCompute = 1,
  kWait,
  kAllReduce,
  kPsPush,
  kPsPull,
  kCheckpoint,
  kAllGather
};
inline constexpr int kNumLanes = 7;
// "compute", "wait", "allreduce", "ps push", "ps pull", "checkpoint",
// "allgather".
const char* LaneName(Lane lane);

struct TimelineOptions {
  std::string path;  // the trace file, written by Write(); empty: record nothing
  int rank = 0;
  size_t max_events = 200'000;  // then recording stops (with a note in the file)

  // <dir>/rank-<rank>.trace.json; an empty dir gives the null recorder.
  static TimelineOptions ForRank(const std::string& dir, int rank, size_t max_events);
};

class Timeline {
 public:
  using Clock = std::chrono::steady_clock;

  Timeline() = default;  // the null recorder
  // Records when options.path is set; the null recorder otherwise.
  explicit Timeline(TimelineOptions options);
  Timeline(const Timeline&) = delete;
  Timeline& operator=(const Timeline&) = delete;

  bool enabled() const { return enabled_; }

  // Adds a complete event. `id` is the bucket (allreduce) or the variable
  // (ps and allgather lanes), -1 for none. Any thread.
  void Record(Lane lane, Clock::time_point start, Clock::time_point end, int32_t id = -1) {
    if (enabled_) Add(lane, start, end, id);
  }

  // Creates the trace file's directory (IO_ERROR naming it and what to fix)
  // and takes the variable names by id, for the events' names ("pull emb").
  Status Open(std::vector<std::string> variable_names);
  // The step now running (tagged on events). Training thread.
  void SetStep(int64_t step) {
    if (enabled_) step_.store(step, std::memory_order_relaxed);
  }

  // Compute bookkeeping, training thread only: compute is open from
  // OpenCompute() on, closes (and is recorded) when the thread enters a
  // session call or a wait, and reopens when the outermost one is left.
  void OpenCompute(Clock::time_point now) {
    if (enabled_) {
      depth_ = 0;
      compute_open_ = true;
      compute_start_ = now;
    }
  }
  void Enter(Clock::time_point now) {
    if (!enabled_) return;
    if (depth_++ == 0 && compute_open_ && now > compute_start_)
      Add(Lane::kCompute, compute_start_, now, -1);
  }
  void Leave(Clock::time_point now) {
    if (!enabled_) return;
    if (depth_ > 0 && --depth_ == 0) compute_start_ = now;
  }

  // Fusion bucket `bucket` handed to the communicator / completed (the
  // fusion thread).
  void BucketStarted(int bucket);
  void BucketFinished(int bucket);
  // Hooks for comm::FusionOptions::observer and ps::PsClientOptions::on_complete
  // that record into this timeline (which must outlive their users); empty
  // functions for the null recorder.
  std::function<void(const comm::FusionEvent&)> FusionObserver();
  std::function<void(const ps::CompletedRequest&)> PsObserver();

  // Events kept / dropped so far.
  size_t size() const;
  size_t dropped() const;

  // Writes the trace to options.path (through a temporary file and a
  // rename). IO_ERROR naming the path. No-op when disabled.
  Status Write() const;

 private:
  struct Event {
    int64_t start_ns;
    int64_t end_ns;
    int64_t step;
    int32_t id;
    Lane lane;
  };
  void Add(Lane lane, Clock::time_point start, Clock::time_point end, int32_t id);

  // Constant after construction.
  bool enabled_ = false;
  TimelineOptions options_;

  // Training thread only.
  int depth_ = 0;
  bool compute_open_ = false;
  Clock::time_point compute_start_;
  std::atomic<int64_t> step_{0};

  mutable std::mutex mu_;
  std::vector<Event> events_;               // guarded by mu_
  size_t dropped_ = 0;                      // guarded by mu_
  std::vector<std::string> var_names_;      // guarded by mu_
  std::vector<Clock::time_point> buckets_;  // guarded by mu_: start of bucket i
};

// RAII: a session call or a wait on the training thread (closes compute).
class TimelineScope {
 public:
  explicit TimelineScope(Timeline* t) : t_(t) {
    if (t_->enabled()) t_->Enter(Timeline::Clock::now());
  }
  ~TimelineScope() {
    if (t_->enabled()) t_->Leave(Timeline::Clock::now());
  }
  TimelineScope(const TimelineScope&) = delete;
  TimelineScope& operator=(const TimelineScope&) = delete;

 private:
  Timeline* t_;
};

// ---- Reading traces back: the overlapped fraction of communication time ----

// One rank's intervals, in microseconds.
struct TraceIntervals {
  struct Interval {
    double start, end;
  };
  std::vector<Interval> compute;
  std::vector<Interval> comm;  // allreduce buckets, allgather, ps push, ps pull
};

// Of every communication interval, the part that lies inside some compute
// interval of the same rank (pid), summed, over the total communication time.
struct Overlap {
  double comm_us = 0;        // total length of communication intervals
  double overlapped_us = 0;  // of which inside compute
  int64_t comm_intervals = 0;
  int64_t overlapping_intervals = 0;  // with any overlap
  double fraction() const { return comm_us > 0 ? overlapped_us / comm_us : 0.0; }
};

Overlap ComputeOverlap(const TraceIntervals& rank);

// Reads a trace written by Timeline (or any Chrome trace whose thread names
// are the lanes above): its intervals per pid. INVALID_ARGUMENT naming the
// file for text that is not a trace; IO_ERROR for a file that cannot be read.
StatusOr<std::vector<TraceIntervals>> ReadTraceIntervals(const std::string& path);

// The overlap of every rank of every file, summed, as one JSON line:
// {"bench":"timeline","metric":"overlap_fraction","value":F,"comm_us":...,
//  "overlapped_us":...,"comm_intervals":N,"overlapping_intervals":K,"ranks":R}
std::string OverlapJsonLine(const Overlap& total, int ranks);

}  // namespace parallax::trainer

#endif  // PARALLAX_TRAINER_TIMELINE_H_
