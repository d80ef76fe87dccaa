#include "core/base/log_limiter.h"

namespace parallax {

bool LogLimiter::Allow(int64_t* held) {
  std::lock_guard<std::mutex> lock(mu_);
  const int64_t now = clock_->NowMillis();
  if (logged_ && now - last_ms_ < interval_ms_) {
    ++held_;
    return false;
  }
  *held = held_;
  held_ = 0;
  logged_ = true;
  last_ms_ = now;
  return true;
}

}  // namespace parallax
