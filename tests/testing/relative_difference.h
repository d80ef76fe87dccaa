// RelativeDifference: how far a trained model is from the one it must equal,
// ‖a − b‖ / ‖b‖ (infinity for different sizes).
#ifndef PARALLAX_TESTS_TESTING_RELATIVE_DIFFERENCE_H_
#define PARALLAX_TESTS_TESTING_RELATIVE_DIFFERENCE_H_

#include <algorithm>
#include <cmath>
#include <vector>

namespace parallax::testing {

inline double RelativeDifference(const std::vector<float>& a, const std::vector<float>& b) {
  if (a.size() != b.size()) return INFINITY;
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    num += (static_cast<double>(a[i]) - b[i]) * (static_cast<double>(a[i]) - b[i]);
    den += static_cast<double>(b[i]) * b[i];
  }
  return std::sqrt(num) / std::max(std::sqrt(den), 1e-30);
}

}  // namespace parallax::testing

#endif  // PARALLAX_TESTS_TESTING_RELATIVE_DIFFERENCE_H_
