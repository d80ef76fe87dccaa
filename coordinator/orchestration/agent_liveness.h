// AgentLiveness: the coordinator's state machine for an agent that stops
// talking and may come back, and the rules for what that does to its tasks.
// (Elastic jobs build on it: a returning agent is where they grow again.)
//
//            no heartbeat or poll for more than agent_timeout_ms
//   ALIVE ───────────────────────────────────────────────────────▶ LOST
//     ▲                                                              │
//     └──────────── a heartbeat, poll or registration ───────────────┘
//                              ("returned")
//
// The bound is the coordinator's --agent-timeout-ms (10 s by default).
//
// Within the bound (an agent killed and restarted, paused, or cut off for
// less than it) nothing happens: its tasks keep running in their attempt, and
// one that ended meanwhile is reported with its real exit code or signal when
// the agent is back (its supervisor kept the exit status: agent/agent.h).
//
// Beyond the bound, on entering LOST:
//   - every live task of the agent (ASSIGNED, RUNNING) becomes LOST, with a
//     message saying the agent went silent (LostForSilence); the job
//     lifecycle then restarts the job in a new attempt, or fails it once
//     max_restarts are used, as for any lost task;
//   - an event "agent X is lost: no heartbeat for N s".
// When a LOST agent returns:
//   - an event "agent X is back after N s";
//   - of the tasks it still runs, it keeps only those of their job's current
//     attempt while the job is live and the store still counts them running
//     on this agent (ListedTaskVerdict); it stops every other one, so every
//     rank of an older attempt is stopped, and a late agent stops nothing but
//     its own tasks that the coordinator no longer counts: it can never stop
//     a rank of the current attempt;
//   - a final report (EXITED, KILLED) for a task that was LOST for silence
//     replaces LOST with what really happened (LateFinalReport): a rank that
//     finished with code 0 shows code 0. The job's own state is never
//     revisited: a FAILED job stays FAILED, a restarted job keeps its new
//     attempt.
//
// AgentLiveness itself only tracks the state of each agent (Observe); the
// orchestrator (coordinator/orchestration/orchestrator.h) applies the rules with the free
// functions below. Not thread-safe: the orchestrator holds its mutex.
#ifndef PARALLAX_COORDINATOR_AGENT_LIVENESS_H_
#define PARALLAX_COORDINATOR_AGENT_LIVENESS_H_

#include <cstdint>
#include <map>
#include <optional>
#include <string>

#include "coordinator/store/state_store.h"
#include "schemas/coordinator_types.h"

namespace parallax::coordinator {

class AgentLiveness {
 public:
  struct Transition {
    enum Kind { kNone, kLost, kReturned };
    Kind kind = kNone;
    int64_t silent_ms = 0;  // kLost: silent so far; kReturned: how long it was silent
  };

  explicit AgentLiveness(int64_t agent_timeout_ms) : timeout_ms_(agent_timeout_ms) {}

  // Where `agent`, last heard from at `last_seen`, stands at `now`, and the
  // transition this makes: kLost once when its silence passes the bound,
  // kReturned once when a lost agent has been heard from again.
  Transition Observe(const std::string& agent, int64_t last_seen, int64_t now);

  bool IsLost(const std::string& agent) const { return lost_since_.count(agent) > 0; }
  int64_t timeout_ms() const { return timeout_ms_; }

 private:
  const int64_t timeout_ms_;
  std::map<std::string, int64_t> lost_since_;  // lost agent -> its last_seen then
};

// The event of a transition: "agent "a" is lost: no heartbeat for 12 s",
// "agent "a" is back after 40 s of silence (...)".
std::string TransitionEvent(const std::string& agent, const AgentLiveness::Transition& change);

// `task` (live, on `agent`) as LOST because `agent` has been silent for
// `silent_ms`.
TaskRecord LostForSilence(TaskRecord task, const std::string& agent, int64_t silent_ms,
                          int64_t now);

// Whether `task` is LOST because its agent went silent (LostForSilence).
bool LostBySilence(const TaskRecord& task);

// What to do with a task `agent` says it runs: `job` is its job (nullopt when
// unknown), `record` the store's record of the task (null when none).
enum class ListedTask { kKeep, kStop };
ListedTask ListedTaskVerdict(const std::optional<JobRecord>& job, const TaskRecord* record,
                             const std::string& agent);

// The corrected record when `report` is a final report (EXITED, KILLED) for
// `record`, a task LOST for silence; nullopt otherwise (the report changes
// nothing). The job's state is not the caller's to revisit.
std::optional<TaskRecord> LateFinalReport(const TaskRecord& record, const rpc::TaskReport& report,
                                          int64_t now);

// The job event of a LateFinalReport correction: "attempt 1: trainer/0 on
// agent "a" exited with code 0, reported after its agent was lost (...)".
std::string LateReportEvent(const TaskRecord& corrected);

}  // namespace parallax::coordinator

#endif  // PARALLAX_COORDINATOR_AGENT_LIVENESS_H_
