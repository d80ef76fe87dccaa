#include "coordinator/orchestration/shard_recovery.h"

#include "coordinator/orchestration/task_outcome.h"

namespace parallax::coordinator {

ShardRecoveryDecision DecideShardRecovery(const JobConfig& config, const TaskRecord& task,
                                          const ShardRecoveryContext& context) {
  ShardRecoveryDecision d;
  if (task.role != TaskRole::kPs || IsLive(task.state) || IsNotLaunched(task)) return d;
  auto no = [&](const std::string& why) {
    d.why_not = why;
    return d;
  };
  if (task.state == TaskState::kLost) return no("the shard was lost with its agent");
  if (config.job.consistency == Consistency::kSync) {
    return no("sync jobs restart as a whole from their checkpoint");
  }
  if (config.ps.shared_memory) return no("[ps] shared_memory maps the shard in one process");
  if (config.trainer.checkpoint_every <= 0 || config.trainer.checkpoint_dir.empty()) {
    return no("the job writes no checkpoints for a next generation to load");
  }
  if (context.trainer_failed) return no("a trainer of the attempt failed too");
  if (!context.agent_available) return no("its agent takes no tasks now");
  if (task.generation > config.job.max_restarts) {
    return no("the shard was started again " + std::to_string(task.generation - 1) +
              " time(s) in this attempt; max_restarts = " +
              std::to_string(config.job.max_restarts));
  }
  d.restart = true;
  d.generation = task.generation + 1;
  return d;
}

int ReportedGeneration(const rpc::TaskKey& key) {
  return key.__isset.generation ? key.generation : 1;
}

bool IsStaleGeneration(const TaskRecord& current, const rpc::TaskKey& key) {
  return ReportedGeneration(key) < current.generation;
}

std::string ShardRestartEvent(const TaskRecord& ended, int generation) {
  return "attempt " + std::to_string(ended.attempt) + ": shard " + std::to_string(ended.index) +
         " lost (" + Outcome(ended) + "), generation " + std::to_string(generation) +
         " started on agent \"" + ended.agent_name + "\"";
}

}  // namespace parallax::coordinator
