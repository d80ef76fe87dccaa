// parallax-trainer: one rank of a job whose [trainer] model names a built-in
// model. Started by an agent with the task environment (schemas/task_env.md);
// the model, its data and the training loop live in trainer/models.
#include <algorithm>
#include <iostream>

#include "core/base/heap_retention.h"
#include "parallax/session.h"
#include "trainer/models/model.h"
#include "trainer/models/model_data.h"
#include "trainer/models/train_loop.h"

namespace {

using namespace parallax;

Status Run() {
  // Every step's buffers reuse the last step's pages (core/base/heap_retention.h).
  PX_RETURN_IF_ERROR(RetainFreedHeapMemory());
  PX_ASSIGN_OR_RETURN(SessionOptions options, SessionOptions::FromEnvironment());
  if (!options.has_job_file()) {
    return InvalidArgument(
        "PARALLAX_JOB_FILE is not set; parallax-trainer runs one rank of a job started by "
        "`parallax run JOB.toml` or an agent");
  }
  const JobConfig& job = options.config;
  if (job.trainer.model.empty()) {
    return InvalidArgument("job '" + job.job.name +
                           "' has no [trainer] model; a custom trainer runs its own command");
  }
  PX_ASSIGN_OR_RETURN(auto session, Session::Create(options));
  // A partition-search trial attempt runs only its step budget.
  const SessionOptions& so = session->options();
  const int64_t steps = so.trial_steps > 0
                            ? std::min(job.trainer.steps, so.trial_warmup_steps + so.trial_steps)
                            : job.trainer.steps;
  models::ModelOptions mo;
  mo.rank = options.rank;
  mo.world_size = options.world_size;
  mo.batch_size = job.trainer.batch_size;
  mo.steps = steps;
  PX_ASSIGN_OR_RETURN(auto model, models::CreateModel(job.trainer.model, job.model_toml, mo));
  PX_ASSIGN_OR_RETURN(models::ModelData data, models::OpenModelData(*model, mo));
  PX_RETURN_IF_ERROR(model->SetData(std::move(data)));
  PX_RETURN_IF_ERROR(model->Register(session.get(), models::PlanSampleBatches(job.ps.hot_rows)));
  // The data position goes into every checkpoint, so a resumed job reads on
  // where it stopped (negative samples are a function of the step: no RNG
  // state to keep).
  models::Model* m = model.get();
  PX_RETURN_IF_ERROR(session->RegisterState(
      "data_position", [m] { return m->SaveState(); },
      [m](std::string_view state) { return m->RestoreState(state); }));
  PX_RETURN_IF_ERROR(session->Start());
  if (session->resumed_from()) {
    std::cout << "rank " << options.rank << " resumed from the checkpoint of step "
              << *session->resumed_from() << std::endl;
  }
  models::TrainLoopOptions loop;
  loop.steps = steps;
  loop.evaluate = options.rank == 0;
  PX_ASSIGN_OR_RETURN(models::TrainLoopResult r,
                      models::RunTrainLoop(session.get(), model.get(), loop, std::cout));
  std::cout << "rank " << options.rank << " done: " << r.steps << " steps, " << model->unit()
            << "/s " << static_cast<int64_t>(r.units_per_s) << std::endl;
  return Status::Ok();
}

}  // namespace

int main() {
  Status st = Run();
  if (!st.ok()) {
    std::cerr << "parallax-trainer: " << st.ToString() << std::endl;
    return 1;
  }
  return 0;
}
