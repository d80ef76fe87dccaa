#include "core/base/format_bytes.h"

#include <cstdio>

namespace parallax {

std::string FormatBytes(double bytes, const char* separator) {
  const char* units[] = {"B", "KB", "MB", "GB", "TB"};
  int u = 0;
  while (bytes >= 1000 && u < 4) {
    bytes /= 1000;
    ++u;
  }
  char buf[48];
  if (u == 0) {
    std::snprintf(buf, sizeof(buf), "%.0f%s%s", bytes, separator, units[u]);
  } else {
    std::snprintf(buf, sizeof(buf), bytes < 10 ? "%.2f%s%s" : "%.1f%s%s", bytes, separator,
                  units[u]);
  }
  return buf;
}

}  // namespace parallax
