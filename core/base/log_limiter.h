// LogLimiter: lets a repeated log line through at most once per interval and
// counts the ones it held back, so a flood (of connections, of bad requests)
// costs one line per interval in the log, not one per event.
//
//   static LogLimiter limiter(RealClock(), 10'000);
//   if (int64_t held; limiter.Allow(&held)) PX_LOG(WARNING) << "... (" << held << " more)";
#ifndef PARALLAX_CORE_BASE_LOG_LIMITER_H_
#define PARALLAX_CORE_BASE_LOG_LIMITER_H_

#include <cstdint>
#include <mutex>

#include "core/base/clock.h"

namespace parallax {

class LogLimiter {
 public:
  // `clock` must outlive the limiter.
  LogLimiter(Clock* clock, int64_t interval_ms) : clock_(clock), interval_ms_(interval_ms) {}

  // True when a line may be written now (the first call, and then once
  // `interval_ms` has passed since the last line written); *held is set to
  // how many calls were refused since that line. Thread-safe.
  bool Allow(int64_t* held);

 private:
  Clock* const clock_;
  const int64_t interval_ms_;
  std::mutex mu_;
  bool logged_ = false;    // GUARDED_BY(mu_)
  int64_t last_ms_ = 0;    // GUARDED_BY(mu_)
  int64_t held_ = 0;       // GUARDED_BY(mu_)
};

}  // namespace parallax

#endif  // PARALLAX_CORE_BASE_LOG_LIMITER_H_
