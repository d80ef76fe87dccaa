// The job lifecycle: PENDING -> PLACING -> RUNNING -> SUCCEEDED | FAILED |
// CANCELLED. A job may also go back from PLACING or RUNNING to PENDING (a new
// attempt after a failure) and be FAILED or CANCELLED from any live state. A
// FAILED or CANCELLED job may be resumed (back to PENDING); SUCCEEDED is final.
#ifndef PARALLAX_COORDINATOR_JOB_STATE_H_
#define PARALLAX_COORDINATOR_JOB_STATE_H_

#include <optional>
#include <string_view>

namespace parallax::coordinator {

enum class JobState { kPending = 1, kPlacing, kRunning, kSucceeded, kFailed, kCancelled };

// "PENDING", "PLACING", ...: how states are stored and shown.
std::string_view JobStateName(JobState state);
std::optional<JobState> ParseJobState(std::string_view name);

bool IsTerminal(JobState state);
bool IsValidTransition(JobState from, JobState to);

}  // namespace parallax::coordinator

#endif  // PARALLAX_COORDINATOR_JOB_STATE_H_
