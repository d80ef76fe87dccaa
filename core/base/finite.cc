#include "core/base/finite.h"

#include <cmath>
#include <cstdint>
#include <cstring>

namespace parallax {

namespace {

uint32_t IsNonFinite(uint32_t bits) {  // all exponent bits set
  return static_cast<uint32_t>((bits & 0x7f800000u) == 0x7f800000u);
}

}  // namespace

// Integer compares over the bits, in blocks of a fixed length that GCC
// vectorizes at -O2 (a loop of unknown length it does not, nor a float test).
bool AnyNonFinite(const float* v, size_t n) {
  constexpr size_t kBlock = 16;
  uint32_t bad = 0;
  size_t i = 0;
  for (; i + kBlock <= n; i += kBlock) {
    uint32_t bits[kBlock];
    std::memcpy(bits, v + i, sizeof bits);
    uint32_t block = 0;
    for (size_t k = 0; k < kBlock; ++k) block |= IsNonFinite(bits[k]);
    bad |= block;
  }
  for (; i < n; ++i) {
    uint32_t bits;
    std::memcpy(&bits, v + i, sizeof bits);
    bad |= IsNonFinite(bits);
  }
  return bad != 0;
}

size_t FirstNonFinite(const float* v, size_t n) {
  if (!AnyNonFinite(v, n)) return n;
  for (size_t i = 0; i < n; ++i) {
    if (!std::isfinite(v[i])) return i;
  }
  return n;
}

}  // namespace parallax
