#include "coordinator/store/job_state.h"

namespace parallax::coordinator {

std::string_view JobStateName(JobState state) {
  switch (state) {
    case JobState::kPending: return "PENDING";
    case JobState::kPlacing: return "PLACING";
    case JobState::kRunning: return "RUNNING";
    case JobState::kSucceeded: return "SUCCEEDED";
    case JobState::kFailed: return "FAILED";
    case JobState::kCancelled: return "CANCELLED";
  }
  return "UNKNOWN";
}

std::optional<JobState> ParseJobState(std::string_view name) {
  for (JobState s : {JobState::kPending, JobState::kPlacing, JobState::kRunning,
                     JobState::kSucceeded, JobState::kFailed, JobState::kCancelled}) {
    if (JobStateName(s) == name) return s;
  }
  return std::nullopt;
}

bool IsTerminal(JobState state) {
  return state == JobState::kSucceeded || state == JobState::kFailed ||
         state == JobState::kCancelled;
}

bool IsValidTransition(JobState from, JobState to) {
  // Resuming a failed or cancelled job is the only way out of a terminal state.
  if (IsTerminal(from)) {
    return to == JobState::kPending && from != JobState::kSucceeded;
  }
  switch (to) {
    case JobState::kPending: return from == JobState::kPlacing || from == JobState::kRunning;
    case JobState::kPlacing: return from == JobState::kPending;
    case JobState::kRunning: return from == JobState::kPlacing;
    case JobState::kSucceeded: return from == JobState::kRunning;
    case JobState::kFailed:
    case JobState::kCancelled: return true;
  }
  return false;
}

}  // namespace parallax::coordinator
