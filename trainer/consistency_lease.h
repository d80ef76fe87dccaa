// ConsistencyLease: a trainer rank's side of run-time consistency switches
// (coordinator/service/consistency_switches.h). The rank promises the coordinator
// to run no step >= until before it asks again, and asks every window/2
// steps, so that a switch the coordinator places one step past every lease
// reaches this rank before it runs the step before the switch.
//
// Thread-compatible: the training thread uses it.
#ifndef PARALLAX_TRAINER_CONSISTENCY_LEASE_H_
#define PARALLAX_TRAINER_CONSISTENCY_LEASE_H_

#include <cstdint>
#include <utility>
#include <vector>

#include "core/ps/consistency_schedule.h"
#include "core/rpc/coordinator_client.h"
#include "parallax/status.h"

namespace parallax::trainer {

class ConsistencyLease {
 public:
  struct Options {
    int64_t job_id = 0;
    int attempt = 0;
    int rank = 0;
    // Steps a lease covers; a rank asks the coordinator about every
    // window/2 steps, and a switch lands up to `window` steps after it was
    // asked for.
    int64_t window = 8;
  };
  using Switch = std::pair<int64_t, ps::ConsistencyMode>;  // from step, mode

  // `coord` must outlive this.
  ConsistencyLease(const Options& options, CoordinatorClient* coord)
      : options_(options), coord_(coord) {}

  // Call before running step `step`. When the lease ends within window/2
  // steps, takes a new one up to step + window and returns the switches this
  // rank had not seen yet (all of them on the first call: a resumed attempt
  // replays them). Otherwise returns none without a call. The coordinator's
  // error (FENCED for an attempt that is over), or INTERNAL for a switch it
  // stored that does not parse.
  StatusOr<std::vector<Switch>> Renew(int64_t step);

  int64_t until() const { return until_; }

 private:
  const Options options_;
  CoordinatorClient* const coord_;
  int64_t until_ = 0;
  bool leased_ = false;
  size_t seen_ = 0;  // switches already returned
};

}  // namespace parallax::trainer

#endif  // PARALLAX_TRAINER_CONSISTENCY_LEASE_H_
