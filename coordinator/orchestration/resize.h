// Changing a job's number of workers and PS shards between attempts
// (docs/RELIABILITY.md, "Resuming with another number of workers" and
// "Elastic workers"):
//   - a resume that edits the stored job (`parallax resume JOB --workers M
//     --shards S`, or a whole edited job file): EditForResume;
//   - an elastic job ([job] min_workers below workers) placed on fewer
//     workers after a lost host, and grown back: ElasticWorkers, GrowTo.
// The new attempt resumes from the newest committed checkpoint; the
// trainers and shards re-split what depends on the count.
#ifndef PARALLAX_COORDINATOR_RESIZE_H_
#define PARALLAX_COORDINATOR_RESIZE_H_

#include <cstdint>
#include <optional>
#include <string>

#include "coordinator/orchestration/cluster_view.h"
#include "coordinator/store/state_store.h"
#include "core/config/job_config.h"
#include "parallax/status.h"

namespace parallax::coordinator {

// What a resume changes (each unset field keeps the job's own).
struct ResumeChange {
  std::optional<int> workers;
  std::optional<int> shards;
  std::optional<std::string> job_text;  // a whole new job file
  std::string job_path;                 // where job_text came from
  bool empty() const { return !workers && !shards && !job_text; }
};

// The job as a resume leaves it.
struct ResumeEdit {
  std::string job_text, job_path;
  int workers = 1;
  std::string what;  // the event: "resumed with workers 4 -> 2, PS shards 2 -> 3"
};

// Applies `change` to the stored `job` and checks the result as a submit
// would. INVALID_ARGUMENT naming the key (workers < 1, shards < 0, --shards
// for a job without PS shards, or a job file that does not parse, with its
// own message).
StatusOr<ResumeEdit> EditForResume(const JobRecord& job, const ResumeChange& change);

// Elastic workers: how many workers a restarted job takes when the slots
// of all of them are not free.
struct ElasticChoice {
  int workers = 0;          // > 0: place this many (min_workers <= it < workers)
  int64_t recheck_at = 0;   // > 0: still waiting for a replacement; look again then
  std::string reason;       // why the job waits, or what the smaller attempt is
};
// `job` is PENDING after an attempt ended (attempt > 0) and its workers do
// not fit `free_slots` now. Not elastic, or the first attempt: workers 0,
// nothing to recheck. Within replace_timeout of the restart: wait. After
// it: the free slots, when they are at least min_workers.
ElasticChoice ChooseElasticWorkers(const PendingJob& job, int free_slots, int64_t now);

// The workers an elastic job running with `current` should grow to, given
// the cluster's `free_slots`; 0 when it stays (not elastic, already at
// [job] workers, or no free slot).
int GrowTo(const JobConfig& config, int current, int free_slots);

}  // namespace parallax::coordinator

#endif  // PARALLAX_COORDINATOR_RESIZE_H_
