#include "coordinator/orchestration/task_outcome.h"

#include <string.h>

#include <tuple>

#include "coordinator/orchestration/orchestrator.h"

namespace parallax::coordinator {
namespace {

std::string Quote(const std::string& s) { return "\"" + s + "\""; }

// Lower is the likelier cause when failures are recorded together.
int CauseRank(const TaskRecord& t) {
  switch (t.state) {
    case TaskState::kKilled: return 0;
    case TaskState::kLost: return 1;
    default: return 2;
  }
}

}  // namespace

const char kShardNotLaunched[] = "not launched: the plan puts no variable on the PS";

bool IsNotLaunched(const TaskRecord& t) {
  return t.role == TaskRole::kPs && t.state == TaskState::kExited && t.exit_code == 0 &&
         t.message == kShardNotLaunched;
}

bool IsFailed(const TaskRecord& t) {
  if (t.role == TaskRole::kPs) return !IsLive(t.state) && !IsNotLaunched(t);
  return t.state == TaskState::kKilled || t.state == TaskState::kLost ||
         (t.state == TaskState::kExited && t.exit_code.value_or(-1) != 0);
}

std::string Outcome(const TaskRecord& t) {
  std::string what = TaskName(t.role, t.index) +
                     (t.generation > 1 ? " (generation " + std::to_string(t.generation) + ")" : "") +
                     " on agent " + Quote(t.agent_name);
  switch (t.state) {
    case TaskState::kExited:
      return what + " exited with code " + std::to_string(t.exit_code.value_or(-1));
    case TaskState::kKilled: {
      int sig = t.signal.value_or(0);
      const char* name = sigabbrev_np(sig);
      return what + " was killed by signal " + std::to_string(sig) +
             (name ? std::string(" (SIG") + name + ")" : "");
    }
    case TaskState::kLost:
      return what + " was lost" + (t.message.empty() ? "" : ": " + t.message);
    default:
      return what + " is running";
  }
}

const TaskRecord* FirstFailure(const std::vector<const TaskRecord*>& tasks) {
  const TaskRecord* first = nullptr;
  auto key = [](const TaskRecord& t) {
    return std::make_tuple(t.updated, CauseRank(t), static_cast<int>(t.role), t.index);
  };
  for (const TaskRecord* t : tasks) {
    if (IsFailed(*t) && (first == nullptr || key(*t) < key(*first))) first = t;
  }
  return first;
}

}  // namespace parallax::coordinator
