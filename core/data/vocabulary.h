// Vocabulary of a tokenized corpus, read from vocab.tsv.
//
// vocab.tsv: line i (0-based) is "word\tcount" for token id i. Id 0 is
// "<unk>", whose count is the number of training tokens mapped to it. Counts
// are occurrences in the training split.
#ifndef PARALLAX_CORE_DATA_VOCABULARY_H_
#define PARALLAX_CORE_DATA_VOCABULARY_H_

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "parallax/status.h"

namespace parallax::data {

inline constexpr std::string_view kUnknownWord = "<unk>";

// Immutable after Load; safe to share between threads.
class Vocabulary {
 public:
  // NOT_FOUND when the file is missing (says to run scripts/fetch-data);
  // INVALID_ARGUMENT naming path:line for a malformed line, a duplicate word,
  // or a first line that is not "<unk>".
  static StatusOr<Vocabulary> Load(const std::string& path);

  // Builds a vocabulary from words and counts already in id order.
  // REQUIRES: words[0] == "<unk>", words unique, words.size() == counts.size().
  static Vocabulary FromWords(std::vector<std::string> words, std::vector<uint64_t> counts);

  size_t size() const { return words_.size(); }
  // REQUIRES: id < size().
  const std::string& word(uint32_t id) const { return words_[id]; }
  // Training-split occurrences (the unigram / negative-sampling distribution).
  uint64_t count(uint32_t id) const { return counts_[id]; }
  // The id of `word`; 0 (<unk>) when absent.
  uint32_t Find(std::string_view word) const;

  // Writes vocab.tsv atomically.
  Status Save(const std::string& path) const;

 private:
  struct StringHash {
    using is_transparent = void;
    size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
  };

  std::vector<std::string> words_;
  std::vector<uint64_t> counts_;
  std::unordered_map<std::string, uint32_t, StringHash, std::equal_to<>> index_;
};

}  // namespace parallax::data

#endif  // PARALLAX_CORE_DATA_VOCABULARY_H_
