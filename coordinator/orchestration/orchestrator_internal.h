// Helpers shared by the two files of the orchestrator (orchestrator.cc and
// orchestrator_pass.cc). Private to px_coordinator.
#ifndef PARALLAX_COORDINATOR_ORCHESTRATOR_INTERNAL_H_
#define PARALLAX_COORDINATOR_ORCHESTRATOR_INTERNAL_H_

#include <string>

#include "coordinator/orchestration/cluster_view.h"
#include "coordinator/orchestration/task_outcome.h"
#include "coordinator/store/state_store.h"
#include "core/config/job_config.h"
#include "parallax/status.h"
#include "schemas/coordinator_types.h"

namespace parallax::coordinator::orchestrator_internal {

std::string Quote(const std::string& s);
TaskId IdOfKey(const rpc::TaskKey& k);
rpc::TaskKey KeyOf(const TaskRecord& t);


}  // namespace parallax::coordinator::orchestrator_internal

#endif  // PARALLAX_COORDINATOR_ORCHESTRATOR_INTERNAL_H_
