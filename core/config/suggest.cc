#include "core/config/suggest.h"

#include <algorithm>
#include <limits>
#include <vector>

namespace parallax {

size_t EditDistance(std::string_view a, std::string_view b) {
  const size_t n = a.size();
  const size_t m = b.size();
  // d[i][j]: distance between a[0, i) and b[0, j).
  std::vector<std::vector<size_t>> d(n + 1, std::vector<size_t>(m + 1));
  for (size_t i = 0; i <= n; ++i) d[i][0] = i;
  for (size_t j = 0; j <= m; ++j) d[0][j] = j;
  for (size_t i = 1; i <= n; ++i) {
    for (size_t j = 1; j <= m; ++j) {
      const size_t cost = a[i - 1] == b[j - 1] ? 0 : 1;
      d[i][j] = std::min({d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + cost});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1]) {
        d[i][j] = std::min(d[i][j], d[i - 2][j - 2] + 1);
      }
    }
  }
  return d[n][m];
}

std::string SuggestClosest(std::string_view input, std::span<const std::string_view> candidates) {
  if (input.empty()) return "";
  const size_t max_distance = input.size() <= 3 ? 1 : 2;
  // Prefix matches rank after distance-1 typos but before distance-2 ones.
  constexpr size_t kPrefixScore = 2;
  size_t best_score = std::numeric_limits<size_t>::max();
  std::string_view best;
  for (const std::string_view c : candidates) {
    if (c == input) return "";
    size_t score = std::numeric_limits<size_t>::max();
    const size_t distance = EditDistance(input, c);
    if (distance <= max_distance) score = distance == 1 ? 1 : distance + 1;
    const std::string_view shorter = input.size() < c.size() ? input : c;
    const std::string_view longer = input.size() < c.size() ? c : input;
    if (shorter.size() >= 3 && longer.substr(0, shorter.size()) == shorter) {
      score = std::min(score, kPrefixScore);
    }
    if (score < best_score) {
      best_score = score;
      best = c;
    }
  }
  return std::string(best);
}

std::string DidYouMean(std::string_view input, std::span<const std::string_view> candidates) {
  std::string s = SuggestClosest(input, candidates);
  if (s.empty()) return "";
  return "; did you mean '" + s + "'?";
}

}  // namespace parallax
