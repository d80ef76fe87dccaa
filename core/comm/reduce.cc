#include "core/comm/reduce.h"

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "core/comm/half.h"

namespace parallax::comm {
namespace {

// One pass for up to four inputs: each element of every input is read
// before that element of `out` is written, so `out` may be any input.
template <typename T>
void SumFused(T* out, const void* const* in, size_t k, size_t count) {
  const T* a = static_cast<const T*>(in[0]);
  const T* b = static_cast<const T*>(in[1]);
  const T* c = k > 2 ? static_cast<const T*>(in[2]) : nullptr;
  const T* d = k > 3 ? static_cast<const T*>(in[3]) : nullptr;
  switch (k) {
    case 2:
      for (size_t i = 0; i < count; ++i) out[i] = a[i] + b[i];
      return;
    case 3:
      for (size_t i = 0; i < count; ++i) out[i] = a[i] + b[i] + c[i];
      return;
    default:
      for (size_t i = 0; i < count; ++i) out[i] = a[i] + b[i] + c[i] + d[i];
      return;
  }
}

// More inputs: summed a block at a time into a buffer on the stack, so
// `out` may alias any input, each element added in input order.
constexpr size_t kBlock = 1024;

template <typename T>
void SumBlocks(T* out, const void* const* in, size_t k, size_t count) {
  if (k == 1) {
    std::memmove(out, in[0], count * sizeof(T));
    return;
  }
  if (k <= 4) return SumFused(out, in, k, count);
  T acc[kBlock];
  for (size_t start = 0; start < count; start += kBlock) {
    const size_t n = std::min(kBlock, count - start);
    const T* a = static_cast<const T*>(in[0]) + start;
    std::memcpy(acc, a, n * sizeof(T));
    for (size_t j = 1; j < k; ++j) {
      const T* b = static_cast<const T*>(in[j]) + start;
      for (size_t i = 0; i < n; ++i) acc[i] += b[i];
    }
    std::memcpy(out + start, acc, n * sizeof(T));
  }
}

template <float (*ToFloat)(uint16_t), uint16_t (*FromFloat)(float)>
void SumHalves(uint16_t* out, const void* const* in, size_t k, size_t count) {
  float acc[kBlock];
  for (size_t start = 0; start < count; start += kBlock) {
    const size_t n = std::min(kBlock, count - start);
    const uint16_t* a = static_cast<const uint16_t*>(in[0]) + start;
    for (size_t i = 0; i < n; ++i) acc[i] = ToFloat(a[i]);
    for (size_t j = 1; j < k; ++j) {
      const uint16_t* b = static_cast<const uint16_t*>(in[j]) + start;
      for (size_t i = 0; i < n; ++i) acc[i] += ToFloat(b[i]);
    }
    for (size_t i = 0; i < n; ++i) out[start + i] = FromFloat(acc[i]);
  }
}

}  // namespace

bool Reducible(DataType type) {
  return type == DataType::kFloat32 || type == DataType::kFloat16 || type == DataType::kBFloat16 ||
         type == DataType::kInt32;
}

void SumOf(DataType type, void* out, const void* const* in, size_t k, size_t count) {
  switch (type) {
    case DataType::kFloat32:
      return SumBlocks(static_cast<float*>(out), in, k, count);
    case DataType::kInt32:
      return SumBlocks(static_cast<int32_t*>(out), in, k, count);
    case DataType::kFloat16:
      return SumHalves<HalfToFloat, FloatToHalf>(static_cast<uint16_t*>(out), in, k, count);
    case DataType::kBFloat16:
      return SumHalves<BFloat16ToFloat, FloatToBFloat16>(static_cast<uint16_t*>(out), in, k, count);
    case DataType::kUInt8:
      return;
  }
}

void DivideBy(DataType type, void* data, size_t count, int divisor) {
  const float n = static_cast<float>(divisor);
  switch (type) {
    case DataType::kFloat32: {
      auto* p = static_cast<float*>(data);
      for (size_t i = 0; i < count; ++i) p[i] /= n;
      return;
    }
    case DataType::kFloat16: {
      auto* p = static_cast<uint16_t*>(data);
      for (size_t i = 0; i < count; ++i) p[i] = FloatToHalf(HalfToFloat(p[i]) / n);
      return;
    }
    case DataType::kBFloat16: {
      auto* p = static_cast<uint16_t*>(data);
      for (size_t i = 0; i < count; ++i) p[i] = FloatToBFloat16(BFloat16ToFloat(p[i]) / n);
      return;
    }
    case DataType::kInt32: {
      auto* p = static_cast<int32_t*>(data);
      for (size_t i = 0; i < count; ++i) p[i] /= divisor;
      return;
    }
    case DataType::kUInt8:
      return;
  }
}

}  // namespace parallax::comm
