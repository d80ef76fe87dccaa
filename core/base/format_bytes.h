// Byte counts for people: "512 B", "1.71 KB", "51.2 MB" (decimal units).
#ifndef PARALLAX_CORE_BASE_FORMAT_BYTES_H_
#define PARALLAX_CORE_BASE_FORMAT_BYTES_H_

#include <string>

namespace parallax {

// Three significant digits from 1 KB on ("1.71 KB", "51.2 MB", "153 MB"
// is written "153.6 MB"); whole bytes below. `separator` goes between the
// number and the unit.
std::string FormatBytes(double bytes, const char* separator = " ");

}  // namespace parallax

#endif  // PARALLAX_CORE_BASE_FORMAT_BYTES_H_
