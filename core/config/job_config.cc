#include "core/config/job_config.h"

#include <fcntl.h>
#include <toml++/toml.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <exception>
#include <filesystem>
#include <limits>
#include <string>
#include <string_view>
#include <system_error>
#include <tuple>
#include <utility>

#include "core/config/job_config_validator.h"
#include "core/config/suggest.h"

namespace parallax {
namespace config_internal {
namespace {

// Where each well-known key lives, to point a key written in the wrong table
// at the right one.
struct KeyHome {
  std::string_view tables;
  Names keys;
};
constexpr KeyHome kKeyHomes[] = {
    {"[job]", kJobKeys},
    {"[trainer]", kTrainerKeys},
    {"[ps]", kPsKeys},
    {"[plan]", kPlanKeys},
    {"[optimizer.dense] or [optimizer.sparse]", kJobOptimizerKeys},
};

std::string FormatDouble(double v) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%g", v);
  return buf;
}

}  // namespace

bool Contains(Names names, std::string_view s) {
  return std::find(names.begin(), names.end(), s) != names.end();
}

std::string Join(Names names, std::string_view separator) {
  std::string out;
  for (const std::string_view n : names) {
    if (!out.empty()) out += separator;
    out += n;
  }
  return out;
}

std::string Quote(std::string_view s) { return "'" + std::string(s) + "'"; }

std::string KeyPath(std::string_view prefix, std::string_view key) {
  if (prefix.empty()) return std::string(key);
  return std::string(prefix) + "." + std::string(key);
}

std::string TypeName(const toml::node& n) {
  switch (n.type()) {
    case toml::node_type::table:
      return "a table";
    case toml::node_type::array:
      return "an array";
    case toml::node_type::string:
      return "a string";
    case toml::node_type::integer:
      return "an integer";
    case toml::node_type::floating_point:
      return "a float";
    case toml::node_type::boolean:
      return "a boolean";
    case toml::node_type::date:
      return "a date";
    case toml::node_type::time:
      return "a time";
    case toml::node_type::date_time:
      return "a date-time";
    case toml::node_type::none:
      break;
  }
  return "nothing";
}

void Validator::Error(const toml::source_region& where, std::string message) {
  uint32_t line = where.begin.line;
  uint32_t column = where.begin.column;
  if (line == 0) {
    line = 1;
    column = 1;
  }
  errors_.push_back({line, column, std::move(message)});
}

bool Validator::PathMissing(const toml::node& where, std::string_view path, std::string what) {
  if (options_.missing_paths == nullptr) {
    KeyError(where, path, std::move(what));
    return false;
  }
  const toml::source_region& at = where.source();
  options_.missing_paths->push_back(source_ + ":" + std::to_string(std::max(at.begin.line, 1u)) +
                                    ":" + std::to_string(std::max(at.begin.column, 1u)) +
                                    ": key " + Quote(path) + ": " + what);
  return true;
}

Status Validator::Finish() {
  if (errors_.empty()) return Status::Ok();
  std::stable_sort(errors_.begin(), errors_.end(), [](const ConfigError& a, const ConfigError& b) {
    return std::tie(a.line, a.column) < std::tie(b.line, b.column);
  });
  std::string message;
  for (const ConfigError& e : errors_) {
    if (!message.empty()) message += '\n';
    message +=
        source_ + ":" + std::to_string(e.line) + ":" + std::to_string(e.column) + ": " + e.message;
  }
  return InvalidArgument(std::move(message));
}

void Validator::CheckKeys(const toml::table& table, std::string_view prefix, Names allowed) {
  for (auto&& [key, node] : table) {
    const std::string_view k = key.str();
    if (Contains(allowed, k)) continue;
    std::string message = (prefix.empty() && node.is_table() ? "unknown table " : "unknown key ") +
                          Quote(KeyPath(prefix, k));
    std::string hint = DidYouMean(k, allowed);
    if (hint.empty()) {
      // `allowed` never holds `k` here, so a match is always another table.
      for (const KeyHome& home : kKeyHomes) {
        if (Contains(home.keys, k)) {
          hint = "; " + Quote(k) + " belongs in " + std::string(home.tables);
          break;
        }
      }
    }
    Error(key.source(), message + hint);
  }
}

const toml::table* Validator::GetTable(const toml::table& parent, std::string_view prefix,
                                       std::string_view key) {
  const toml::node* n = parent.get(key);
  if (n == nullptr) return nullptr;
  if (!n->is_table()) {
    KeyError(*n, KeyPath(prefix, key), "expected a table, got " + TypeName(*n));
    return nullptr;
  }
  return n->as_table();
}

bool Validator::ReadInt(const toml::table& t, std::string_view prefix, std::string_view key,
                        int64_t min, int64_t max, int64_t* out) {
  const toml::node* n = t.get(key);
  if (n == nullptr) return false;
  const std::string path = KeyPath(prefix, key);
  if (!n->is_integer()) {
    KeyError(*n, path, "expected an integer, got " + TypeName(*n));
    return false;
  }
  const int64_t v = n->as_integer()->get();
  if (v < min) {
    KeyError(*n, path,
             "expected an integer >= " + std::to_string(min) + ", got " + std::to_string(v));
    return false;
  }
  if (v > max) {
    KeyError(*n, path,
             "expected an integer <= " + std::to_string(max) + ", got " + std::to_string(v));
    return false;
  }
  *out = v;
  return true;
}

bool Validator::ReadNumber(const toml::table& t, std::string_view prefix, std::string_view key,
                           Range range, double* out) {
  const toml::node* n = t.get(key);
  if (n == nullptr) return false;
  const std::string path = KeyPath(prefix, key);
  double v = 0;
  if (n->is_integer()) {
    v = static_cast<double>(n->as_integer()->get());
  } else if (n->is_floating_point()) {
    v = n->as_floating_point()->get();
  } else {
    KeyError(*n, path, "expected a number, got " + TypeName(*n));
    return false;
  }
  bool ok = std::isfinite(v);
  std::string expected;
  switch (range) {
    case Range::kPositive:
      ok = ok && v > 0;
      expected = "a number > 0";
      break;
    case Range::kNonNegative:
      ok = ok && v >= 0;
      expected = "a number >= 0";
      break;
    case Range::kUnitInterval:
      ok = ok && v >= 0 && v < 1;
      expected = "a number in [0, 1)";
      break;
  }
  if (!ok) {
    KeyError(*n, path, "expected " + expected + ", got " + FormatDouble(v));
    return false;
  }
  *out = v;
  return true;
}

bool Validator::ReadString(const toml::table& t, std::string_view prefix, std::string_view key,
                           std::string* out) {
  const toml::node* n = t.get(key);
  if (n == nullptr) return false;
  if (!n->is_string()) {
    KeyError(*n, KeyPath(prefix, key), "expected a string, got " + TypeName(*n));
    return false;
  }
  *out = n->as_string()->get();
  return true;
}

bool Validator::ReadEnum(const toml::table& t, std::string_view prefix, std::string_view key,
                         Names allowed, std::string* out) {
  const toml::node* n = t.get(key);
  if (n == nullptr) return false;
  const std::string path = KeyPath(prefix, key);
  if (!n->is_string()) {
    KeyError(*n, path, "expected one of " + Join(allowed, ", ") + ", got " + TypeName(*n));
    return false;
  }
  const std::string& v = n->as_string()->get();
  if (!Contains(allowed, v)) {
    KeyError(
        *n, path,
        "expected one of " + Join(allowed, ", ") + ", got " + Quote(v) + DidYouMean(v, allowed));
    return false;
  }
  *out = v;
  return true;
}

bool Validator::ReadBool(const toml::table& t, std::string_view prefix, std::string_view key,
                         bool* out) {
  const toml::node* n = t.get(key);
  if (n == nullptr) return false;
  if (!n->is_boolean()) {
    KeyError(*n, KeyPath(prefix, key), "expected a boolean, got " + TypeName(*n));
    return false;
  }
  *out = n->as_boolean()->get();
  return true;
}

bool Validator::ReadAutoOrCount(const toml::table& t, std::string_view prefix, std::string_view key,
                                int* out) {
  const toml::node* n = t.get(key);
  if (n == nullptr) return false;
  const std::string path = KeyPath(prefix, key);
  const std::string expected = "expected 'auto' or an integer >= 1, got ";
  if (n->is_string()) {
    const std::string& v = n->as_string()->get();
    if (v == "auto") {
      *out = 0;
      return true;
    }
    KeyError(*n, path, expected + Quote(v));
    return false;
  }
  if (!n->is_integer()) {
    KeyError(*n, path, expected + TypeName(*n));
    return false;
  }
  const int64_t v = n->as_integer()->get();
  if (v < 1 || v > std::numeric_limits<int>::max()) {
    KeyError(*n, path, expected + std::to_string(v));
    return false;
  }
  *out = static_cast<int>(v);
  return true;
}

bool Validator::ReadPath(const toml::node& node, std::string_view path, fs::path* out) {
  const std::string& s = node.as_string()->get();
  if (s.empty()) {
    KeyError(node, path, "expected a non-empty path");
    return false;
  }
  *out = (base_dir_ / fs::path(s)).lexically_normal();
  // "ckpt/" names the directory "ckpt": drop the empty last component.
  if (!out->has_filename() && out->has_relative_path()) *out = out->parent_path();
  return true;
}

std::string Validator::RelativeHint(const toml::node& node) {
  const std::string& s = node.as_string()->get();
  if (fs::path(s).is_absolute()) return "";
  return " (" + Quote(s) + " is relative to the job file's directory)";
}

}  // namespace config_internal

namespace {

namespace fs = std::filesystem;
using config_internal::Quote;
using config_internal::Validator;

constexpr char kSubmitted[] = "<submitted>";

// Checks toml++ 3.3 must not see, each refused with a location (found by
// tests/fuzz/job_config_fuzz):
// - A raw control character other than tab, LF and CR: TOML allows none
//   anywhere, not even in strings or comments; a NUL trips an assertion in
//   toml++, and a binary file given by mistake deserves a plain message.
// - A non-ASCII character outside strings and comments (invalid TOML, as
//   bare keys are ASCII), or right after a backslash (an invalid escape) or a
//   line-ending backslash in a multi-line basic string: there toml++ asks
//   is_non_ascii_horizontal_whitespace(),
//   which reaches __builtin_unreachable() (undefined behaviour) for most
//   code points.
// The scan knows just enough TOML to tell strings and comments apart;
// everything else is left to toml++.
// Where PrecheckTomlText is between two characters.
struct TomlScan {
  enum class Mode { kCode, kComment, kBasic, kLiteral, kMultiBasic, kMultiLiteral };
  Mode mode = Mode::kCode;
  bool after_line_ending_backslash = false;
  // A string can only start where TOML allows one (a key, a value, an array
  // or inline-table element); a quote anywhere else (`+"`) stays code, as it
  // does for toml++.
  char last_code = '\n';
};

bool StartsAt(std::string_view text, size_t i, std::string_view s) {
  return text.substr(i, s.size()) == s;
}

// Inside a basic or multi-line basic string, at text[*i]: escapes, the
// string's end. An error message, or "".
std::string ScanBasicString(std::string_view text, size_t* i, unsigned* column, TomlScan* scan) {
  const unsigned char c = static_cast<unsigned char>(text[*i]);
  const bool multi = scan->mode == TomlScan::Mode::kMultiBasic;
  if (c == '\\' && multi && *i + 1 < text.size() &&
      static_cast<unsigned char>(text[*i + 1]) >= 0x80) {
    return "a backslash followed by a non-ASCII character is not a valid escape";
  }
  if (c == '\\' && *i + 1 < text.size()) {
    size_t j = *i + 1;
    while (j < text.size() && (text[j] == ' ' || text[j] == '\t' || text[j] == '\r')) ++j;
    if (multi && j < text.size() && text[j] == '\n') {
      scan->after_line_ending_backslash = true;
    } else if (static_cast<unsigned char>(text[*i + 1]) < 0x80) {
      ++*i;  // an escape: the next character cannot end the string
      ++*column;
    }
  } else if (!multi && (c == '"' || c == '\n')) {
    scan->mode = TomlScan::Mode::kCode;
    scan->last_code = static_cast<char>(c);
  } else if (multi && StartsAt(text, *i, "\"\"\"")) {
    scan->mode = TomlScan::Mode::kCode;
    scan->last_code = '"';
    *i += 2;
    *column += 2;
  }
  return "";
}

// Moves `scan` past text[*i] (and what a token there consumes). An error
// message, or "".
std::string ScanCharacter(std::string_view text, size_t* i, unsigned* column, TomlScan* scan) {
  using Mode = TomlScan::Mode;
  const unsigned char c = static_cast<unsigned char>(text[*i]);
  auto enter = [&](Mode mode, size_t width) {
    scan->mode = mode;
    *i += width - 1;
    *column += static_cast<unsigned>(width - 1);
  };
  switch (scan->mode) {
    case Mode::kCode: {
      const bool string_may_start =
          std::string_view("\n=[,{.").find(scan->last_code) != std::string_view::npos;
      if (c != ' ' && c != '\t' && c != '\r') scan->last_code = static_cast<char>(c);
      if (c == '#') {
        scan->mode = Mode::kComment;
      } else if (!string_may_start) {
        // not a string, whatever it is
      } else if (StartsAt(text, *i, "\"\"\"")) {
        enter(Mode::kMultiBasic, 3);
      } else if (c == '"') {
        enter(Mode::kBasic, 1);
      } else if (StartsAt(text, *i, "\'\'\'")) {
        enter(Mode::kMultiLiteral, 3);
      } else if (c == '\'') {
        enter(Mode::kLiteral, 1);
      }
      return "";
    }
    case Mode::kComment:
      if (c == '\n') {
        scan->mode = Mode::kCode;
        scan->last_code = '\n';
      }
      return "";
    case Mode::kBasic:
    case Mode::kMultiBasic:
      return ScanBasicString(text, i, column, scan);
    case Mode::kLiteral:
      if (c == '\'' || c == '\n') {
        scan->mode = Mode::kCode;
        scan->last_code = static_cast<char>(c);
      }
      return "";
    case Mode::kMultiLiteral:
      if (StartsAt(text, *i, "\'\'\'")) {
        scan->mode = Mode::kCode;
        scan->last_code = '\'';
        *i += 2;
        *column += 2;
      }
      return "";
  }
  return "";
}

Status PrecheckTomlText(std::string_view text, const std::string& source) {
  TomlScan scan;
  unsigned line = 1, column = 1;
  for (size_t i = 0; i < text.size(); ++i) {
    const unsigned char c = static_cast<unsigned char>(text[i]);
    auto where = [&] { return source + ":" + std::to_string(line) + ":" + std::to_string(column); };
    if ((c < 0x20 && c != '\t' && c != '\n' && c != '\r') || c == 0x7f) {
      char hex[8];
      std::snprintf(hex, sizeof(hex), "0x%02X", c);
      return InvalidArgument(where() + ": control character " + hex +
                             " is not allowed in a TOML file; is this a text file?");
    }
    const bool in_code = scan.mode == TomlScan::Mode::kCode;
    if (c >= 0x80 && (in_code || scan.after_line_ending_backslash)) {
      return InvalidArgument(
          where() + (in_code
                         ? ": a non-ASCII character outside a string or comment; TOML keys are "
                           "ASCII (quote the key: \"n\u00e4me\" = ...)"
                         : ": a non-ASCII character right after a line-ending backslash is not "
                           "supported; start the line with an ASCII character"));
    }
    if (scan.after_line_ending_backslash && c != ' ' && c != '\t' && c != '\r' && c != '\n') {
      scan.after_line_ending_backslash = false;
    }
    const std::string error = ScanCharacter(text, &i, &column, &scan);
    if (!error.empty()) return InvalidArgument(where() + ": " + error);
    if (c == '\n') {
      ++line;
      column = 1;
    } else if ((c & 0xC0) != 0x80) {  // count characters, not UTF-8 continuation bytes
      ++column;
    }
  }
  return Status::Ok();
}

}  // namespace

StatusOr<JobConfig> ParseJobConfig(std::string_view text, std::string_view source,
                                   const JobLoadOptions& options) {
  JobConfig config;
  config.source = source.empty() ? kSubmitted : std::string(source);
  std::error_code ec;
  fs::path base_dir;
  if (source.empty() || source == kSubmitted) {
    base_dir = fs::current_path(ec);
  } else {
    base_dir = fs::absolute(fs::path(source), ec).parent_path();
  }
  if (ec) {
    return IoError("cannot resolve the directory of job file " + Quote(config.source) + ": " +
                   ec.message());
  }
  config.base_dir = base_dir.lexically_normal().string();

  PX_RETURN_IF_ERROR(PrecheckTomlText(text, config.source));

  toml::table root;
  try {
    // First the text with every non-ASCII character replaced by '~', which
    // TOML accepts in strings and comments and nowhere else: if that parses,
    // every non-ASCII character of the real text is inside a string or a
    // comment, where toml++ handles them (see PrecheckTomlText); if not, its
    // error is the one to report. Then the real text, for the values.
    std::string ascii;
    ascii.reserve(text.size());
    for (char ch : text) {
      const unsigned char u = static_cast<unsigned char>(ch);
      if (u < 0x80) {
        ascii += ch;
      } else if (u >= 0xC0) {
        ascii += '~';  // one character per code point keeps columns right
      }
    }
    if (ascii.size() != text.size()) (void)toml::parse(ascii, config.source);
    root = toml::parse(text, config.source);
  } catch (const toml::parse_error& e) {
    const toml::source_position& at = e.source().begin;
    return InvalidArgument(config.source + ":" + std::to_string(std::max(at.line, 1u)) + ":" +
                           std::to_string(std::max(at.column, 1u)) + ": " +
                           std::string(e.description()));
  } catch (const std::exception& e) {
    return InvalidArgument(config.source + ":1:1: cannot parse the job file: " + e.what());
  }

  Validator validator(config.source, fs::path(config.base_dir), options);
  try {
    validator.Run(root, &config);
  } catch (const std::exception& e) {
    // Nothing above throws on bad input; this guards the library boundary.
    return Internal("validating job file " + Quote(config.source) + ": " + e.what());
  }
  PX_RETURN_IF_ERROR(validator.Finish());
  return config;
}

StatusOr<JobConfig> LoadJobConfig(const std::string& path, const JobLoadOptions& options) {
  auto fail = [&path](int err) {
    return IoError("cannot read job file " + Quote(path) + ": " + std::strerror(err));
  };
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return fail(errno);
  std::string text;
  char buf[1 << 16];
  while (true) {
    const ssize_t n = ::read(fd, buf, sizeof(buf));
    if (n == 0) break;
    if (n < 0) {
      if (errno == EINTR) continue;
      const int err = errno;
      ::close(fd);
      return fail(err);
    }
    text.append(buf, static_cast<size_t>(n));
  }
  ::close(fd);
  return ParseJobConfig(text, path, options);
}

}  // namespace parallax
