#include "core/data/brown.h"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "core/base/daemon.h"
#include "core/base/logging.h"
#include "core/data/token_file.h"

namespace parallax::data {
namespace {

namespace fs = std::filesystem;

bool IsSpace(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; }

bool IsDocumentName(const std::string& name) {
  return name.size() == 4 && name[0] == 'c' && name[1] >= 'a' && name[1] <= 'z' &&
         std::isdigit(static_cast<unsigned char>(name[2])) &&
         std::isdigit(static_cast<unsigned char>(name[3]));
}

StatusOr<std::string> ReadWholeFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return IoError("cannot open '" + path + "': " + std::strerror(errno));
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) return IoError("cannot read '" + path + "': " + std::strerror(errno));
  return text.str();
}

}  // namespace

void TokenizeBrown(std::string_view text, std::vector<std::string>* words) {
  size_t i = 0;
  while (i < text.size()) {
    while (i < text.size() && IsSpace(text[i])) ++i;
    const size_t start = i;
    while (i < text.size() && !IsSpace(text[i])) ++i;
    if (start == i) break;
    std::string_view token = text.substr(start, i - start);
    const size_t slash = token.rfind('/');
    if (slash != std::string_view::npos) token = token.substr(0, slash);
    if (token.empty()) continue;
    std::string word(token);
    for (char& c : word) {
      if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
    }
    words->push_back(std::move(word));
  }
}

Vocabulary BuildVocabulary(const std::map<std::string, uint64_t>& counts, size_t vocab_size,
                           uint64_t min_count) {
  PX_CHECK(vocab_size >= 1) << "vocabulary size must be at least 1";
  std::vector<std::pair<std::string, uint64_t>> ranked;
  uint64_t unknown = 0;
  for (const auto& [word, count] : counts) {
    if (word == kUnknownWord || count < min_count) {
      unknown += count;
    } else {
      ranked.emplace_back(word, count);
    }
  }
  // Stable sort of a word-ordered list by count: ties stay in word order.
  std::stable_sort(ranked.begin(), ranked.end(),
                   [](const auto& a, const auto& b) { return a.second > b.second; });
  const size_t keep = std::min(ranked.size(), vocab_size - 1);
  std::vector<std::string> words = {std::string(kUnknownWord)};
  std::vector<uint64_t> word_counts = {0};
  for (size_t i = 0; i < ranked.size(); ++i) {
    if (i < keep) {
      words.push_back(std::move(ranked[i].first));
      word_counts.push_back(ranked[i].second);
    } else {
      unknown += ranked[i].second;
    }
  }
  word_counts[0] = unknown;
  return Vocabulary::FromWords(std::move(words), std::move(word_counts));
}

std::string BrownStats::ToJson() const {
  nlohmann::json j = {
      {"vocab_limit", options.vocab_size},
      {"min_count", options.min_count},
      {"heldout_every", options.heldout_every},
      {"documents_train", documents_train},
      {"documents_heldout", documents_heldout},
      {"tokens_train", tokens_train},
      {"tokens_heldout", tokens_heldout},
      {"vocab_size", vocab_size},
      {"heldout_unknown", heldout_unknown},
      {"heldout_coverage", heldout_coverage},
      {"unigram_perplexity", unigram_perplexity},
  };
  return j.dump();
}

StatusOr<BrownStats> ConvertBrown(const std::string& src_dir, const std::string& out_dir,
                                  const BrownOptions& options) {
  if (options.vocab_size < 2) {
    return InvalidArgument("vocabulary size " + std::to_string(options.vocab_size) +
                           " is too small: it must hold <unk> and at least one word");
  }
  if (options.vocab_size > (uint64_t{1} << 32)) {
    return InvalidArgument("vocabulary size must be below 2^32");
  }
  if (options.heldout_every < 2) {
    return InvalidArgument("--heldout-every " + std::to_string(options.heldout_every) +
                           " must be at least 2 (1 would hold out every document)");
  }
  std::error_code ec;
  std::vector<std::string> names;
  for (fs::directory_iterator it(src_dir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (IsDocumentName(name) && it->is_regular_file()) names.push_back(name);
  }
  if (ec) {
    return NotFound("cannot list Brown corpus directory '" + src_dir + "': " + ec.message() +
                    "; scripts/fetch-data downloads and converts the corpus");
  }
  if (names.empty()) {
    return NotFound("no Brown corpus documents (files named like ca01) in '" + src_dir +
                    "'; scripts/fetch-data downloads and converts the corpus");
  }
  std::sort(names.begin(), names.end());

  // Words of the two splits, documents concatenated in name order.
  BrownStats stats;
  stats.options = options;
  std::vector<std::string> train_words, heldout_words;
  for (size_t i = 0; i < names.size(); ++i) {
    PX_ASSIGN_OR_RETURN(std::string text, ReadWholeFile(src_dir + "/" + names[i]));
    const bool heldout = (i + 1) % static_cast<size_t>(options.heldout_every) == 0;
    TokenizeBrown(text, heldout ? &heldout_words : &train_words);
    ++(heldout ? stats.documents_heldout : stats.documents_train);
  }
  if (train_words.empty()) {
    return InvalidArgument("the training documents in '" + src_dir + "' hold no word");
  }

  std::map<std::string, uint64_t> counts;
  for (const std::string& w : train_words) ++counts[w];
  const Vocabulary vocab = BuildVocabulary(counts, options.vocab_size, options.min_count);

  auto to_ids = [&vocab](const std::vector<std::string>& words) {
    std::vector<uint32_t> ids;
    ids.reserve(words.size());
    for (const std::string& w : words) ids.push_back(vocab.Find(w));
    return ids;
  };
  const std::vector<uint32_t> train = to_ids(train_words);
  const std::vector<uint32_t> heldout = to_ids(heldout_words);

  stats.tokens_train = train.size();
  stats.tokens_heldout = heldout.size();
  stats.vocab_size = vocab.size();
  const double denominator = static_cast<double>(train.size() + vocab.size());
  double nll = 0;
  for (uint32_t id : heldout) {
    if (id == 0) ++stats.heldout_unknown;
    nll -= std::log((static_cast<double>(vocab.count(id)) + 1.0) / denominator);
  }
  if (!heldout.empty()) {
    stats.heldout_coverage =
        1.0 - static_cast<double>(stats.heldout_unknown) / static_cast<double>(heldout.size());
    stats.unigram_perplexity = std::exp(nll / static_cast<double>(heldout.size()));
  }

  fs::create_directories(out_dir, ec);
  if (ec) return IoError("cannot create '" + out_dir + "': " + ec.message());
  PX_RETURN_IF_ERROR(WriteTokenFile(out_dir + "/train.tok", train));
  PX_RETURN_IF_ERROR(WriteTokenFile(out_dir + "/heldout.tok", heldout));
  PX_RETURN_IF_ERROR(vocab.Save(out_dir + "/vocab.tsv"));
  PX_RETURN_IF_ERROR(WriteFileAtomically(out_dir + "/stats.json", stats.ToJson() + "\n"));
  return stats;
}

}  // namespace parallax::data
