// Area under the ROC curve, the ranking metric of click-through-rate models.
#ifndef PARALLAX_CORE_DATA_AUC_H_
#define PARALLAX_CORE_DATA_AUC_H_

#include <span>

namespace parallax::data {

// The probability that a random positive (label > 0.5) scores above a random
// negative, ties counting one half (the Mann-Whitney statistic). 0.5 when
// either class is absent. REQUIRES: scores.size() == labels.size().
double Auc(std::span<const double> scores, std::span<const float> labels);
double Auc(std::span<const float> scores, std::span<const float> labels);

}  // namespace parallax::data

#endif  // PARALLAX_CORE_DATA_AUC_H_
