#include "core/base/clock.h"

#include "core/base/time_format.h"

namespace parallax {
namespace {
class SystemClock : public Clock {
 public:
  int64_t NowMillis() const override { return SystemNowMillis(); }
};
}  // namespace

Clock* RealClock() {
  static SystemClock* clock = new SystemClock();
  return clock;
}

}  // namespace parallax
