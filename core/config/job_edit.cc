#include "core/config/job_edit.h"

#include <toml++/toml.h>

#include <sstream>
#include <vector>

namespace parallax {
namespace {

std::vector<std::string> Lines(std::string_view text) {
  std::vector<std::string> lines;
  std::string line;
  std::istringstream in{std::string(text)};
  while (std::getline(in, line)) lines.push_back(line);
  return lines;
}

std::string Trimmed(const std::string& s) {
  const size_t a = s.find_first_not_of(" \t");
  const size_t b = s.find_last_not_of(" \t\r");
  return a == std::string::npos ? "" : s.substr(a, b - a + 1);
}

// Sets [table] key to `value` (a toml::value): the key's line is replaced,
// or a line added after the table's header, or the document re-serialised.
template <typename T>
StatusOr<std::string> SetValue(std::string_view text, std::string_view source,
                               const std::string& table, std::string_view key, T value) {
  toml::table root;
  try {
    root = toml::parse(text, source);
  } catch (const toml::parse_error& e) {
    return InvalidArgument(std::string(source) +
                           ": not a TOML job file: " + std::string(e.description()));
  }
  std::ostringstream quoted;
  quoted << toml::value<T>(value);
  const std::string line = std::string(key) + " = " + quoted.str();
  toml::table* found = root[table].as_table();
  std::vector<std::string> lines = Lines(text);
  if (found != nullptr && !found->is_inline()) {
    const toml::node* existing = found->get(key);
    const auto at = found->source().begin.line;  // 1-based; the [table] header
    const bool header = at >= 1 && at <= lines.size() && Trimmed(lines[at - 1]) == "[" + table + "]";
    if (existing != nullptr && existing->source().begin.line == existing->source().end.line &&
        existing->source().begin.line >= 1 && existing->source().begin.line <= lines.size() &&
        header) {
      lines[existing->source().begin.line - 1] = line;
    } else if (existing == nullptr && header) {
      lines.insert(lines.begin() + static_cast<std::ptrdiff_t>(at), line);
    } else {
      found = nullptr;  // re-serialise below
    }
    if (found != nullptr) {
      std::string out;
      for (const std::string& l : lines) out += l + "\n";
      return out;
    }
  }
  if (toml::node* t = root.get(table); t == nullptr) root.insert(table, toml::table{});
  toml::table* t = root[table].as_table();
  if (t == nullptr) {
    return InvalidArgument(std::string(source) + ": " + table + " is not a table; write [" +
                           table + "]");
  }
  t->insert_or_assign(key, value);
  std::ostringstream out;
  out << root << "\n";
  return out.str();
}

}  // namespace

StatusOr<std::string> SetTrainerString(std::string_view text, std::string_view source,
                                       std::string_view key, std::string_view value) {
  return SetValue(text, source, "trainer", key, std::string(value));
}

StatusOr<std::string> SetInteger(std::string_view text, std::string_view source,
                                 const std::string& table, std::string_view key, int64_t value) {
  return SetValue(text, source, table, key, value);
}

}  // namespace parallax
