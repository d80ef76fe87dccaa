// Did-you-mean suggestions for misspelt keys, table names and enum values.
#ifndef PARALLAX_CORE_CONFIG_SUGGEST_H_
#define PARALLAX_CORE_CONFIG_SUGGEST_H_

#include <cstddef>
#include <span>
#include <string>
#include <string_view>

namespace parallax {

// Optimal-string-alignment distance between `a` and `b`: insertions,
// deletions, substitutions and swaps of two adjacent characters each cost 1.
size_t EditDistance(std::string_view a, std::string_view b);

// Returns the candidate closest to `input`, or "" when none is close enough.
// A candidate is close when its edit distance is at most 2 (at most 1 for
// inputs of 3 characters or fewer), or when one of the two is a prefix of the
// other and the shorter has at least 3 characters. Ties go to the earlier
// candidate; an exact match is never suggested.
std::string SuggestClosest(std::string_view input, std::span<const std::string_view> candidates);

// "; did you mean 'x'?" for the closest candidate, or "" when none is close.
std::string DidYouMean(std::string_view input, std::span<const std::string_view> candidates);

}  // namespace parallax

#endif  // PARALLAX_CORE_CONFIG_SUGGEST_H_
