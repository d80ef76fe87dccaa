// Wall-clock helpers. Durable timestamps in Parallax are int64 milliseconds
// since the Unix epoch (UTC); people and scripts see them as RFC 3339.
#ifndef PARALLAX_CORE_BASE_TIME_FORMAT_H_
#define PARALLAX_CORE_BASE_TIME_FORMAT_H_

#include <cstdint>
#include <string>

namespace parallax {

// Milliseconds since the Unix epoch, from the system clock.
int64_t SystemNowMillis();

// "2026-11-22T10:00:00Z" (seconds precision, UTC).
std::string FormatRfc3339(int64_t unix_millis);

// "2026-11-22T10:00:00.123Z" (millisecond precision, UTC).
std::string FormatRfc3339Millis(int64_t unix_millis);

// "2026-11-22 10:00 UTC" (minutes, for people: where a figure was measured).
std::string FormatUtcMinute(int64_t unix_millis);

}  // namespace parallax

#endif  // PARALLAX_CORE_BASE_TIME_FORMAT_H_
