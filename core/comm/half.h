// Conversions between float32 and the 16-bit floating-point formats used on
// the wire (IEEE fp16) and by accelerators (bfloat16). Round to nearest even.
#ifndef PARALLAX_CORE_COMM_HALF_H_
#define PARALLAX_CORE_COMM_HALF_H_

#include <cstddef>
#include <cstdint>

namespace parallax::comm {

uint16_t FloatToHalf(float f);
float HalfToFloat(uint16_t h);
uint16_t FloatToBFloat16(float f);
float BFloat16ToFloat(uint16_t b);

// Element-wise over arrays of n values.
void FloatsToHalves(const float* in, uint16_t* out, size_t n);
void HalvesToFloats(const uint16_t* in, float* out, size_t n);

}  // namespace parallax::comm

#endif  // PARALLAX_CORE_COMM_HALF_H_
