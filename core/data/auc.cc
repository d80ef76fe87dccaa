#include "core/data/auc.h"

#include <algorithm>
#include <cstdint>
#include <numeric>
#include <vector>

#include "core/base/logging.h"

namespace parallax::data {
namespace {

template <typename T>
double AucImpl(std::span<const T> scores, std::span<const float> labels) {
  PX_CHECK(scores.size() == labels.size()) << "Auc: " << scores.size() << " scores for "
                                           << labels.size() << " labels";
  std::vector<uint32_t> order(scores.size());
  std::iota(order.begin(), order.end(), 0u);
  std::sort(order.begin(), order.end(), [&](uint32_t a, uint32_t b) { return scores[a] < scores[b]; });
  double positive_rank_sum = 0;  // 1-based ranks, ties averaged
  uint64_t positives = 0;
  for (size_t i = 0; i < order.size();) {
    size_t j = i;
    uint64_t tied_positives = 0;
    while (j < order.size() && scores[order[j]] == scores[order[i]]) {
      tied_positives += labels[order[j]] > 0.5f;
      ++j;
    }
    const double mean_rank = (static_cast<double>(i + 1) + static_cast<double>(j)) / 2.0;
    positive_rank_sum += mean_rank * static_cast<double>(tied_positives);
    positives += tied_positives;
    i = j;
  }
  const uint64_t negatives = scores.size() - positives;
  if (positives == 0 || negatives == 0) return 0.5;
  const double p = static_cast<double>(positives);
  return (positive_rank_sum - p * (p + 1) / 2.0) / (p * static_cast<double>(negatives));
}

}  // namespace

double Auc(std::span<const double> scores, std::span<const float> labels) {
  return AucImpl(scores, labels);
}
double Auc(std::span<const float> scores, std::span<const float> labels) {
  return AucImpl(scores, labels);
}

}  // namespace parallax::data
