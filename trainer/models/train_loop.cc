#include "trainer/models/train_loop.h"

#include <cstdio>
#include <ostream>

namespace parallax::models {
namespace {

using Clock = std::chrono::steady_clock;

double Seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

void PrintEval(const Session& s, const EvalStats& e, double seconds, std::ostream& out) {
  char line[256];
  std::snprintf(line, sizeof line, "eval step %lld %s %.4f", static_cast<long long>(s.step()),
                e.metric.c_str(), e.value);
  out << line;
  if (!e.baseline_metric.empty()) {
    std::snprintf(line, sizeof line, " %s %.4f", e.baseline_metric.c_str(), e.baseline);
    out << line;
  }
  for (const auto& [name, value] : e.extra) {
    std::snprintf(line, sizeof line, " %s %.4f", name.c_str(), value);
    out << line;
  }
  std::snprintf(line, sizeof line, " examples %lld (%.1f s)", static_cast<long long>(e.examples),
                seconds);
  out << line << std::endl;
}

}  // namespace

StatusOr<TrainLoopResult> RunTrainLoop(Session* session, Model* model,
                                       const TrainLoopOptions& options, std::ostream& out) {
  TrainLoopResult r;
  const Clock::time_point start = Clock::now();
  Clock::time_point last = start;
  double loss_sum = 0, eval_seconds = 0;
  int64_t loss_n = 0, units = 0, units_since = 0;
  while (session->step() < options.steps) {
    StepStats st;
    PX_RETURN_IF_ERROR(model->TrainStep(session, &st));
    ++r.steps;
    loss_sum += st.loss;
    ++loss_n;
    units += st.units;
    units_since += st.units;
    const Clock::time_point now = Clock::now();
    const bool done = session->step() >= options.steps;
    if (now - last >= options.progress_every || done) {
      r.last_loss = loss_sum / static_cast<double>(loss_n);
      char line[256];
      std::snprintf(line, sizeof line, "rank %d step %lld/%lld loss %.4f %s/s %.0f",
                    session->options().rank, static_cast<long long>(session->step()),
                    static_cast<long long>(options.steps), r.last_loss, model->unit(),
                    static_cast<double>(units_since) / Seconds(now - last));
      out << line << std::endl;
      last = now;
      loss_sum = 0;
      loss_n = 0;
      units_since = 0;
    }
    const int64_t every = model->eval_every();
    if (options.evaluate && !done && every > 0 && session->step() % every == 0) {
      const Clock::time_point t0 = Clock::now();
      EvalStats e;
      PX_RETURN_IF_ERROR(model->Evaluate(session, &e));
      const double s = Seconds(Clock::now() - t0);
      eval_seconds += s;
      PrintEval(*session, e, s, out);
      last += Clock::now() - t0;  // evaluation time is not training throughput
    }
  }
  r.units_per_s = static_cast<double>(units) /
                  std::max(1e-9, Seconds(Clock::now() - start) - eval_seconds);
  if (options.evaluate) {
    const Clock::time_point t0 = Clock::now();
    PX_RETURN_IF_ERROR(model->Evaluate(session, &r.eval));
    r.evaluated = true;
    PrintEval(*session, r.eval, Seconds(Clock::now() - t0), out);
  }
  return r;
}

}  // namespace parallax::models
