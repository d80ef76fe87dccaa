// How a task ended, in the terms the job lifecycle and the CLI use: whether
// it failed its job, how to say what happened, and which of several failures
// of an attempt is the one to name.
#ifndef PARALLAX_COORDINATOR_TASK_OUTCOME_H_
#define PARALLAX_COORDINATOR_TASK_OUTCOME_H_

#include <string>
#include <vector>

#include "coordinator/store/state_store.h"

namespace parallax::coordinator {

// A PS shard of a hybrid job whose plan put no variable on the PS is never
// launched: it is recorded as EXITED with code 0 and this message.
extern const char kShardNotLaunched[];

// Whether `t` is such a shard.
bool IsNotLaunched(const TaskRecord& t);

// Whether `t` ended in a way that fails its attempt: a trainer killed, lost
// or exiting non-zero; a PS shard that ended at all (unless never launched).
bool IsFailed(const TaskRecord& t);

// "trainer/1 on agent "a" was killed by signal 9 (SIGKILL)", "... exited with
// code 3", "... was lost: <message>", "... is running".
std::string Outcome(const TaskRecord& t);

// The failure of `tasks` (one attempt's) to name as the reason the attempt
// failed, or null when none failed: the one recorded first; among those
// recorded at the same time (one report can carry several), a task killed by
// a signal before a lost one before one that exited non-zero, since the
// others usually end because it did (a rank whose peer was killed exits with
// an error); then trainers before shards, lower index first.
const TaskRecord* FirstFailure(const std::vector<const TaskRecord*>& tasks);

}  // namespace parallax::coordinator

#endif  // PARALLAX_COORDINATOR_TASK_OUTCOME_H_
