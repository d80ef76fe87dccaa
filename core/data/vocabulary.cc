#include "core/data/vocabulary.h"

#include <cerrno>
#include <charconv>
#include <cstring>
#include <fstream>

#include "core/base/daemon.h"
#include "core/base/logging.h"

namespace parallax::data {

StatusOr<Vocabulary> Vocabulary::Load(const std::string& path) {
  std::ifstream in(path);
  if (!in) {
    if (errno == ENOENT) {
      return NotFound("vocabulary '" + path +
                      "' does not exist; run scripts/fetch-data to download the Brown corpus "
                      "and write data/brown/");
    }
    return IoError("cannot open vocabulary '" + path + "': " + std::strerror(errno));
  }
  std::vector<std::string> words;
  std::vector<uint64_t> counts;
  Vocabulary vocab;
  std::string line;
  size_t line_no = 0;
  while (std::getline(in, line)) {
    ++line_no;
    const std::string where = path + ":" + std::to_string(line_no) + ": ";
    const size_t tab = line.find('\t');
    if (tab == std::string::npos || tab == 0) {
      return InvalidArgument(where + "expected \"word<TAB>count\", got \"" + line.substr(0, 80) +
                             "\"");
    }
    std::string word = line.substr(0, tab);
    const std::string_view count_text = std::string_view(line).substr(tab + 1);
    uint64_t count = 0;
    auto [end, ec] =
        std::from_chars(count_text.data(), count_text.data() + count_text.size(), count);
    if (ec != std::errc() || end != count_text.data() + count_text.size() || count_text.empty()) {
      return InvalidArgument(where + "count \"" + std::string(count_text.substr(0, 40)) +
                             "\" of \"" + word + "\" is not a non-negative integer");
    }
    if (line_no == 1 && word != kUnknownWord) {
      return InvalidArgument(where + "the first word must be \"<unk>\" (id 0), got \"" + word +
                             "\"; is this a Parallax vocab.tsv?");
    }
    if (!vocab.index_.emplace(word, static_cast<uint32_t>(words.size())).second) {
      return InvalidArgument(where + "word \"" + word + "\" appears twice");
    }
    words.push_back(std::move(word));
    counts.push_back(count);
  }
  if (in.bad()) return IoError("cannot read vocabulary '" + path + "': " + std::strerror(errno));
  if (words.empty()) {
    return InvalidArgument("vocabulary '" + path + "' is empty; recreate it with " +
                           "scripts/fetch-data --force");
  }
  vocab.words_ = std::move(words);
  vocab.counts_ = std::move(counts);
  return vocab;
}

Vocabulary Vocabulary::FromWords(std::vector<std::string> words, std::vector<uint64_t> counts) {
  PX_CHECK(!words.empty() && words[0] == kUnknownWord && words.size() == counts.size())
      << "Vocabulary::FromWords needs <unk> first and one count per word";
  Vocabulary vocab;
  for (size_t i = 0; i < words.size(); ++i) {
    PX_CHECK(vocab.index_.emplace(words[i], static_cast<uint32_t>(i)).second)
        << "duplicate word \"" << words[i] << "\"";
  }
  vocab.words_ = std::move(words);
  vocab.counts_ = std::move(counts);
  return vocab;
}

uint32_t Vocabulary::Find(std::string_view word) const {
  auto it = index_.find(word);
  return it == index_.end() ? 0 : it->second;
}

Status Vocabulary::Save(const std::string& path) const {
  std::string text;
  for (size_t i = 0; i < words_.size(); ++i) {
    text += words_[i];
    text += '\t';
    text += std::to_string(counts_[i]);
    text += '\n';
  }
  return WriteFileAtomically(path, text);
}

}  // namespace parallax::data
