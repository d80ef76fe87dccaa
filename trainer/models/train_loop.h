// The training loop of parallax-trainer: steps a model against a started
// Session until the job's step count, prints a progress line every few
// seconds, evaluates every Model::eval_every() steps and at the end (on the
// evaluating rank).
#ifndef PARALLAX_TRAINER_MODELS_TRAIN_LOOP_H_
#define PARALLAX_TRAINER_MODELS_TRAIN_LOOP_H_

#include <chrono>
#include <cstdint>
#include <iosfwd>

#include "parallax/status.h"
#include "trainer/models/model.h"

namespace parallax::models {

struct TrainLoopOptions {
  int64_t steps = 1;  // train while session->step() < steps
  bool evaluate = true;  // this rank evaluates (parallax-trainer: rank 0)
  std::chrono::milliseconds progress_every{5'000};
};

struct TrainLoopResult {
  int64_t steps = 0;        // steps run by this call
  double last_loss = 0;     // mean loss of the last progress interval
  double units_per_s = 0;   // over the whole run
  bool evaluated = false;
  EvalStats eval;           // the final evaluation, when evaluated
};

// REQUIRES: session->Start() succeeded and the model is registered with it.
// Progress and evaluation lines go to `out`.
StatusOr<TrainLoopResult> RunTrainLoop(Session* session, Model* model,
                                       const TrainLoopOptions& options, std::ostream& out);

}  // namespace parallax::models

#endif  // PARALLAX_TRAINER_MODELS_TRAIN_LOOP_H_
