#include "core/plan/comm_disagreement.h"

#include <cstdio>
#include <limits>

namespace parallax::plan {

double Disagreement::ratio() const {
  if (predicted.total_s > 0) return measured_s / predicted.total_s;
  return measured_s > 0 ? std::numeric_limits<double>::infinity() : 1.0;
}

std::string Disagreement::Describe() const {
  char ratio_text[48];
  const double r = ratio();
  if (r == std::numeric_limits<double>::infinity()) {
    std::snprintf(ratio_text, sizeof(ratio_text), "nothing predicted");
  } else {
    std::snprintf(ratio_text, sizeof(ratio_text), "%.3gx", r);
  }
  char text[200];
  std::snprintf(text, sizeof(text),
                "measured communication %.3g ms/step, predicted %.3g ms/step (%s) over steps "
                "%lld-%lld",
                measured_s * 1e3, predicted.total_s * 1e3, ratio_text,
                static_cast<long long>(first_step), static_cast<long long>(last_step));
  return text;
}

DisagreementDetector::DisagreementDetector(PredictedComm predicted, DisagreementOptions options)
    : predicted_(predicted), options_(options) {}

int DisagreementDetector::Side(const CommInterval& interval) const {
  const double measured = interval.total_s();
  const double predicted = predicted_.total_s;
  if (measured > options_.factor * predicted) return 1;
  if (measured * options_.factor < predicted) return -1;
  return 0;
}

std::optional<Disagreement> DisagreementDetector::Add(const CommInterval& interval) {
  if (reported_ || interval.steps() <= 0 || interval.first_step <= last_step_) {
    return std::nullopt;
  }
  if (attempt_first_step_ < 0) attempt_first_step_ = interval.first_step;
  last_step_ = interval.last_step;
  if (interval.first_step < attempt_first_step_ + options_.after_steps) return std::nullopt;
  const int side = Side(interval);
  if (side == 0 || side != run_side_) {
    run_side_ = side;
    run_intervals_ = 0;
    run_first_step_ = interval.first_step;
    run_steps_ = 0;
    run_dense_s_ = run_sparse_s_ = 0;
  }
  if (side == 0) return std::nullopt;
  ++run_intervals_;
  run_steps_ += interval.steps();
  run_dense_s_ += interval.dense_s * static_cast<double>(interval.steps());
  run_sparse_s_ += interval.sparse_s * static_cast<double>(interval.steps());
  if (run_steps_ < options_.window_steps || run_intervals_ < options_.min_intervals) {
    return std::nullopt;
  }
  reported_ = true;
  Disagreement d;
  d.first_step = run_first_step_;
  d.last_step = interval.last_step;
  d.measured_dense_s = run_dense_s_ / static_cast<double>(run_steps_);
  d.measured_sparse_s = run_sparse_s_ / static_cast<double>(run_steps_);
  d.measured_s = d.measured_dense_s + d.measured_sparse_s;
  d.predicted = predicted_;
  return d;
}

}  // namespace parallax::plan
