#include "trainer/consistency_lease.h"

namespace parallax::trainer {

StatusOr<std::vector<ConsistencyLease::Switch>> ConsistencyLease::Renew(int64_t step) {
  std::vector<Switch> fresh;
  if (leased_ && step + options_.window / 2 < until_) return fresh;
  rpc::ConsistencyLeaseRequest request;
  request.job_id = options_.job_id;
  request.attempt = options_.attempt;
  request.rank = options_.rank;
  request.lease_until = step + options_.window;
  StatusOr<std::vector<rpc::ConsistencySwitch>> got = coord_->LeaseConsistency(request);
  if (!got.ok()) {
    return got.status().WithContext("rank " + std::to_string(options_.rank) +
                                    " asking the coordinator for consistency switches");
  }
  leased_ = true;
  until_ = request.lease_until;
  for (size_t i = seen_; i < got->size(); ++i) {
    const rpc::ConsistencySwitch& s = (*got)[i];
    StatusOr<ps::ConsistencyMode> mode = ps::ParseConsistencyMode(s.consistency);
    if (!mode.ok()) {
      return Internal("the coordinator's consistency switch at step " +
                      std::to_string(s.from_step) + " does not parse: " +
                      mode.status().message());
    }
    fresh.emplace_back(s.from_step, *mode);
  }
  seen_ = got->size();
  return fresh;
}

}  // namespace parallax::trainer
