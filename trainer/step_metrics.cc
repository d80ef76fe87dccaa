#include "trainer/step_metrics.h"

#include <cmath>

#include "core/base/logging.h"
#include "core/rpc/coordinator_client.h"
#include "schemas/metric_names.h"

namespace parallax::trainer {
namespace {

double Ms(std::chrono::steady_clock::duration d) {
  return std::chrono::duration<double, std::milli>(d).count();
}

}  // namespace

void StepMetrics::EndStep(Clock::time_point step_started, Clock::time_point now) {
  const Clock::duration waits = dense_wait_ + sparse_wait_;
  const Clock::duration whole = now - step_started;
  compute_ += whole > waits ? whole - waits : Clock::duration{};
  total_dense_ += dense_wait_;
  total_sparse_ += sparse_wait_;
  dense_wait_ = sparse_wait_ = Clock::duration{};
  ++steps_;
}

std::map<std::string, double> StepMetrics::Take(const comm::Communicator* comm,
                                                const ps::PsClient* ps,
                                                const comm::Communicator* host) {
  // A source not passed this time carried nothing in this interval: its
  // counters stay where they were.
  Snapshot now = last_;
  if (comm) {
    const comm::WireCounters w = comm->wire_bytes();
    now.v[0] = w.allreduce.sent;
    now.v[1] = w.allreduce.received;
    now.v[2] = w.allgather.sent;
    now.v[3] = w.allgather.received;
  }
  if (host) {
    // Local aggregation: the host's ranks exchange their sparse rows among
    // themselves (a collective on the host's communicator), not an
    // all-gather of the job.
    const comm::WireCounters w = host->wire_bytes();
    now.v[8] = w.allgather.sent + w.allreduce.sent;
    now.v[9] = w.allgather.received + w.allreduce.received;
  }
  if (ps) {
    const ps::TransportBytes t = ps->transport_bytes();
    now.v[4] = t.push_sent;
    now.v[5] = t.push_received;
    now.v[6] = t.pull_sent;
    now.v[7] = t.pull_received;
    now.ps_requests = t.messages_sent;
  }
  // now.v holds sent, received for each path in metric_names::kPaths order.
  namespace names = metric_names;
  std::map<std::string, double> out;
  const double steps = static_cast<double>(std::max<int64_t>(steps_, 1));
  for (size_t i = 0; i < names::kPaths.size(); ++i) {
    out[names::SentBytes(names::kPaths[i])] =
        static_cast<double>(now.v[2 * i] - last_.v[2 * i]) / steps;
    out[names::RecvBytes(names::kPaths[i])] =
        static_cast<double>(now.v[2 * i + 1] - last_.v[2 * i + 1]) / steps;
  }
  if (ps) out[names::kPsRequests] = static_cast<double>(now.ps_requests - last_.ps_requests) / steps;
  if (row_cache_) {
    const char* cache_names[4] = {names::kRowCacheHits, names::kRowCacheMisses,
                                  names::kRowCacheStaleRefreshes, names::kRowCacheBytesSaved};
    for (int i = 0; i < 4; ++i) {
      now.cache[i] = cache_now_[i];
      out[cache_names[i]] = static_cast<double>(now.cache[i] - last_.cache[i]) / steps;
    }
  }
  if (hot_rows_) {
    const char* hot_names[2] = {names::kHotRowHits, names::kHotRowMisses};
    for (int i = 0; i < 2; ++i) {
      now.hot[i] = hot_now_[i];
      out[hot_names[i]] = static_cast<double>(now.hot[i] - last_.hot[i]) / steps;
    }
  }
  out[names::kComputeMs] = Ms(compute_) / steps;
  out[names::kDenseWaitMs] = Ms(total_dense_) / steps;
  out[names::kSparseWaitMs] = Ms(total_sparse_) / steps;
  out[names::kSteps] = static_cast<double>(steps_);
  if (losses_ > 0) out[names::kLossMean] = loss_sum_ / static_cast<double>(losses_);
  loss_sum_ = 0;
  losses_ = 0;
  last_ = now;
  compute_ = total_dense_ = total_sparse_ = Clock::duration{};
  steps_ = 0;
  return out;
}

Status MetricsReporter::Report(int64_t step, double loss, int64_t samples,
                               const std::function<std::map<std::string, double>()>& values) {
  if (!std::isfinite(loss)) {
    return InvalidArgument("loss is " + std::string(std::isnan(loss) ? "NaN" : "infinite") +
                           " at step " + std::to_string(step) +
                           "; stopping (lower the learning rate?)");
  }
  samples_ += samples;
  if (!coord_ || !Due(step)) return Status::Ok();
  const auto now = StepMetrics::Clock::now();
  const double seconds = std::chrono::duration<double>(now - since_).count();
  rpc::MetricPoint p;
  p.job_id = options_.job_id;
  p.attempt = options_.attempt;
  p.rank = options_.rank;
  p.step = step;
  p.loss = loss;
  p.throughput = seconds > 0 ? static_cast<double>(samples_) / seconds : 0.0;
  p.__set_values(values());
  since_ = now;
  samples_ = 0;
  Status st =
      coord_->Call([&](rpc::CoordinatorClient& c) { c.ReportMetrics(coord_->Header(), {p}); });
  if (st.code() == StatusCode::kUnavailable || st.code() == StatusCode::kAborted ||
      st.code() == StatusCode::kDeadlineExceeded) {
    PX_LOG(WARNING) << "rank " << options_.rank << " could not report metrics of step " << step
                    << ": " << st.ToString();
    return Status::Ok();
  }
  return st.WithContext("reporting metrics of step " + std::to_string(step));
}

}  // namespace parallax::trainer
