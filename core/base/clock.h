// Clock: the seam for time. Logic that times out or stamps records reads a
// Clock; tests inject a FakeClock and advance it instead of sleeping.
#ifndef PARALLAX_CORE_BASE_CLOCK_H_
#define PARALLAX_CORE_BASE_CLOCK_H_

#include <atomic>
#include <cstdint>
#include <memory>

namespace parallax {

class Clock {
 public:
  virtual ~Clock() = default;
  // Wall-clock milliseconds since the Unix epoch (UTC). Thread-safe.
  virtual int64_t NowMillis() const = 0;
};

// The system clock. Thread-safe; lives for the process.
Clock* RealClock();

// A clock that moves only when told to. Thread-safe.
class FakeClock : public Clock {
 public:
  explicit FakeClock(int64_t start_millis = 1'700'000'000'000) : now_(start_millis) {}
  int64_t NowMillis() const override { return now_.load(); }
  void Advance(int64_t millis) { now_.fetch_add(millis); }
  void Set(int64_t millis) { now_.store(millis); }

 private:
  std::atomic<int64_t> now_;
};

}  // namespace parallax

#endif  // PARALLAX_CORE_BASE_CLOCK_H_
