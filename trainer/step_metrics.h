// Metrics by path, counted at the transport:
//  - all-reduce / all-gather: the bytes the Communicator's collectives put on
//    and took off the wire on this rank (Communicator::wire_bytes(): Gloo's
//    algorithms replayed message by message, framing included, so they agree
//    with `ss -tin`; core/comm/wire_bytes.h);
//  - PS push / PS pull: the ZeroMQ frame bytes the PS client's I/O thread
//    sent and received (ps::PsClient::transport_bytes()).
// plus a step-time breakdown (compute, dense comm wait, sparse comm wait).
// StepMetrics turns the counters into per-step averages over the steps
// since the last metric point; the names are those of
// MetricPoint.values (schemas/coordinator.thrift).
#ifndef PARALLAX_TRAINER_STEP_METRICS_H_
#define PARALLAX_TRAINER_STEP_METRICS_H_

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>

#include "core/comm/communicator.h"
#include "core/ps/client.h"
#include "trainer/timeline.h"

namespace parallax {
class CoordinatorClient;
}

namespace parallax::trainer {

// Per-step averages since the last Take(). Training thread only.
class StepMetrics {
 public:
  using Clock = std::chrono::steady_clock;

  // Time spent waiting, charged to the current step.
  void AddDenseWait(Clock::duration d) { dense_wait_ += d; }
  void AddSparseWait(Clock::duration d) { sparse_wait_ += d; }
  // A step's loss, for the interval's mean ("loss_mean").
  void AddLoss(double loss) {
    loss_sum_ += loss;
    ++losses_;
  }
  // The row caches' counters since the session started (core/ps/row_cache.h),
  // summed over the tables: Take() reports them per step from then on.
  void SetRowCache(int64_t hits, int64_t misses, int64_t stale_refreshes, int64_t bytes_saved) {
    row_cache_ = true;
    cache_now_[0] = hits;
    cache_now_[1] = misses;
    cache_now_[2] = stale_refreshes;
    cache_now_[3] = bytes_saved;
  }
  // The hot rows' counters since the session started (distinct rows of each
  // step's gradients that were hot and that were not), summed over tables.
  void SetHotRows(int64_t hits, int64_t misses) {
    hot_rows_ = true;
    hot_now_[0] = hits;
    hot_now_[1] = misses;
  }
  // Marks the end of a step: everything since the previous end that was not
  // a wait is compute.
  void EndStep(Clock::time_point step_started, Clock::time_point now);

  // Averages per step since the last Take() as named values ("allreduce_sent_bytes",
  // "allreduce_recv_bytes", "allgather_sent_bytes", "allgather_recv_bytes",
  // "ps_push_sent_bytes", "ps_push_recv_bytes", "ps_pull_sent_bytes",
  // "ps_pull_recv_bytes", "local_agg_sent_bytes", "local_agg_recv_bytes",
  // "ps_requests", "compute_ms", "dense_wait_ms", "sparse_wait_ms", "steps",
  // with row caches "row_cache_hits", "row_cache_misses",
  // "row_cache_stale_refreshes" and "row_cache_bytes_saved", with hot rows
  // "hot_row_hits" and "hot_row_misses", and
  // "loss_mean", the mean of the losses AddLoss() was given, when it was
  // given any), then starts a
  // new interval. `comm` and `ps` may be null. `host`: the communicator of
  // local aggregation (the ranks of one host), whose exchanges are the
  // local_agg bytes.
  std::map<std::string, double> Take(const comm::Communicator* comm, const ps::PsClient* ps,
                                     const comm::Communicator* host = nullptr);

 private:
  struct Snapshot {
    int64_t v[10] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0};
    int64_t ps_requests = 0;
    int64_t cache[4] = {0, 0, 0, 0};  // hits, misses, stale refreshes, bytes saved
    int64_t hot[2] = {0, 0};          // hot rows: hits, misses
  };
  Snapshot last_;
  bool row_cache_ = false;
  int64_t cache_now_[4] = {0, 0, 0, 0};
  bool hot_rows_ = false;
  int64_t hot_now_[2] = {0, 0};
  Clock::duration dense_wait_{}, sparse_wait_{}, total_dense_{}, total_sparse_{}, compute_{};
  int64_t steps_ = 0;
  double loss_sum_ = 0;
  int64_t losses_ = 0;
};

// RAII: adds the time it lived to a wait counter, and records it as a wait
// on `timeline` (which closes the compute interval around it).
class WaitTimer {
 public:
  WaitTimer(StepMetrics* m, bool dense, Timeline* timeline)
      : m_(m), timeline_(timeline), dense_(dense), start_(StepMetrics::Clock::now()) {
    timeline_->Enter(start_);
  }
  ~WaitTimer() {
    const auto end = StepMetrics::Clock::now();
    const auto d = end - start_;
    dense_ ? m_->AddDenseWait(d) : m_->AddSparseWait(d);
    if (timeline_->enabled()) {
      timeline_->Record(Lane::kWait, start_, end);
      timeline_->Leave(end);
    }
  }
  WaitTimer(const WaitTimer&) = delete;
  WaitTimer& operator=(const WaitTimer&) = delete;

 private:
  StepMetrics* m_;
  Timeline* timeline_;
  bool dense_;
  StepMetrics::Clock::time_point start_;
};

// Sends a rank's metric points to the coordinator: every `every` steps the
// loss, the samples per second since the previous point, and `values`
// (StepMetrics::Take). A point the coordinator cannot take (unreachable,
// restarting) is dropped with a warning: training goes on, the next point
// retries. Training thread only.
class MetricsReporter {
 public:
  struct Options {
    int64_t job_id = 0;
    int attempt = 1;
    int rank = 0;
    int64_t every = 10;
    // The job's last step (steps − 1), which always gets a point so that
    // the job's reported step and loss are its last; < 0: unknown.
    int64_t last_step = -1;
  };
  // `coord` may be null (no coordinator: points are dropped); it must
  // outlive this.
  MetricsReporter(const Options& options, CoordinatorClient* coord)
      : options_(options), coord_(coord) {}

  // The interval of the first point starts now.
  void Start() { since_ = StepMetrics::Clock::now(); }
  // Whether step `step` gets a point: step % every == 0, or the last step.
  bool Due(int64_t step) const {
    return step % options_.every == 0 || (options_.last_step >= 0 && step == options_.last_step);
  }
  // Records step `step`'s loss and samples; sends a point when Due(step).
  // INVALID_ARGUMENT naming the step for a NaN or
  // infinite loss (stop training).
  Status Report(int64_t step, double loss, int64_t samples,
                const std::function<std::map<std::string, double>()>& values);

 private:
  const Options options_;
  CoordinatorClient* const coord_;
  StepMetrics::Clock::time_point since_;
  int64_t samples_ = 0;
};

}  // namespace parallax::trainer

#endif  // PARALLAX_TRAINER_STEP_METRICS_H_
