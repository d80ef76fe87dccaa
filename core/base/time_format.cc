#include "core/base/time_format.h"

#include <chrono>
#include <cstdio>
#include <ctime>

namespace parallax {
namespace {
std::string Format(int64_t unix_millis, bool with_millis) {
  int64_t secs = unix_millis / 1000;
  int64_t ms = unix_millis % 1000;
  if (ms < 0) {
    ms += 1000;
    secs -= 1;
  }
  std::time_t t = static_cast<std::time_t>(secs);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[80];
  if (with_millis) {
    std::snprintf(buf, sizeof(buf), "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", tm.tm_year + 1900,
                  tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec,
                  static_cast<int>(ms));
  } else {
    std::snprintf(buf, sizeof(buf), "%04d-%02d-%02dT%02d:%02d:%02dZ", tm.tm_year + 1900,
                  tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec);
  }
  return buf;
}
}  // namespace

int64_t SystemNowMillis() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

std::string FormatRfc3339(int64_t unix_millis) { return Format(unix_millis, false); }
std::string FormatRfc3339Millis(int64_t unix_millis) { return Format(unix_millis, true); }

std::string FormatUtcMinute(int64_t unix_millis) {
  const std::string t = Format(unix_millis, false);  // "YYYY-MM-DDTHH:MM:SSZ"
  return t.substr(0, 10) + " " + t.substr(11, 5) + " UTC";
}

}  // namespace parallax
