// The Brown corpus as language-model data: tokenizer, vocabulary builder and
// the whole conversion that `parallax-data brown` runs (docs/DATA.md).
#ifndef PARALLAX_CORE_DATA_BROWN_H_
#define PARALLAX_CORE_DATA_BROWN_H_

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "core/data/vocabulary.h"
#include "parallax/status.h"

namespace parallax::data {

// Appends the words of one Brown corpus document to `words`. The text is
// whitespace-separated "word/TAG" tokens; the tag (from the last '/') is
// stripped and ASCII letters are lowercased ("The/at" -> "the",
// "1-1/2/cd" -> "1-1/2"). Punctuation tokens ("./.", ",/,", "``/``") are kept:
// they are words a language model predicts, as in Bengio et al. (2003). A token
// without '/' is kept whole; an empty word ("/x") is dropped.
void TokenizeBrown(std::string_view text, std::vector<std::string>* words);

// The top vocab_size - 1 words by count (ties broken by word, bytewise) among
// those counted at least min_count times, after "<unk>" at id 0, whose count is
// the occurrences of every word left out. A corpus word spelled "<unk>" counts
// as unknown. REQUIRES: vocab_size >= 1.
Vocabulary BuildVocabulary(const std::map<std::string, uint64_t>& counts, size_t vocab_size,
                           uint64_t min_count = 1);

struct BrownOptions {
  size_t vocab_size = 50'000;  // V, <unk> included
  int heldout_every = 10;      // documents k-1, 2k-1, ... (0-based, sorted by name) are held out
  // Words seen fewer times in training map to <unk> even when V has room. On
  // Brown, V = 50,000 exceeds the 47,071 training word types, so with 1 the
  // vocabulary holds every training word and <unk> never occurs in training.
  uint64_t min_count = 1;
};

struct BrownStats {
  BrownOptions options;  // what produced them
  uint64_t documents_train = 0, documents_heldout = 0;
  uint64_t tokens_train = 0, tokens_heldout = 0;
  uint64_t vocab_size = 0;       // ids written, <unk> included (<= V)
  uint64_t heldout_unknown = 0;  // held-out tokens mapped to <unk>
  double heldout_coverage = 0;   // fraction of held-out tokens that are not <unk>
  // exp of the mean negative log-likelihood of the held-out ids under the
  // training unigram distribution with add-one smoothing over the ids:
  // p(id) = (count(id) + 1) / (tokens_train + vocab_size).
  double unigram_perplexity = 0;

  std::string ToJson() const;  // one line
};

// Reads the corpus documents in `src_dir` (files named like ca01..cr44: 'c', a
// lowercase letter, two digits; others such as README are ignored), splits
// them into training and held-out documents, builds the vocabulary from the
// training split and writes out_dir/{train.tok, heldout.tok, vocab.tsv,
// stats.json} (creating out_dir). NOT_FOUND when src_dir holds no document.
StatusOr<BrownStats> ConvertBrown(const std::string& src_dir, const std::string& out_dir,
                                  const BrownOptions& options);

}  // namespace parallax::data

#endif  // PARALLAX_CORE_DATA_BROWN_H_
