#include "trainer/models/sampling.h"

#include <cmath>

namespace parallax::models {

double HashRng::Normal() {
  const double u1 = 1.0 - Uniform(), u2 = Uniform();
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
}

AliasTable::AliasTable(std::span<const double> weights) {
  const size_t n = weights.size();
  double total = 0;
  for (double w : weights) total += w;
  prob_.assign(n, 0.0);
  alias_.assign(n, 0);
  std::vector<double> scaled(n);
  std::vector<uint32_t> small, large;
  for (size_t i = 0; i < n; ++i) {
    scaled[i] = weights[i] * static_cast<double>(n) / total;
    (scaled[i] < 1.0 ? small : large).push_back(static_cast<uint32_t>(i));
  }
  while (!small.empty() && !large.empty()) {
    const uint32_t s = small.back(), l = large.back();
    small.pop_back();
    prob_[s] = scaled[s];
    alias_[s] = l;
    scaled[l] -= 1.0 - scaled[s];
    if (scaled[l] < 1.0) {
      large.pop_back();
      small.push_back(l);
    }
  }
  for (uint32_t i : large) prob_[i] = 1.0;
  for (uint32_t i : small) prob_[i] = 1.0;  // rounding leftovers
}

uint32_t AliasTable::Sample(uint64_t random) const {
  const uint64_t n = prob_.size();
  const uint32_t column = static_cast<uint32_t>(random % n);
  const double coin = UnitDouble(Mix64(random));
  return coin < prob_[column] ? column : alias_[column];
}

}  // namespace parallax::models
