#include "core/base/logging.h"

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "core/base/time_format.h"

namespace parallax {
namespace {
std::atomic<int> g_min_level{static_cast<int>(LogLevel::kInfo)};

char LevelLetter(LogLevel level) {
  switch (level) {
    case LogLevel::kDebug: return 'D';
    case LogLevel::kInfo: return 'I';
    case LogLevel::kWarning: return 'W';
    case LogLevel::kError: return 'E';
    case LogLevel::kFatal: return 'F';
  }
  return '?';
}
}  // namespace

void SetMinLogLevel(LogLevel level) { g_min_level.store(static_cast<int>(level)); }
LogLevel MinLogLevel() { return static_cast<LogLevel>(g_min_level.load()); }

namespace internal {

LogMessage::LogMessage(LogLevel level, const char* file, int line)
    : level_(level), file_(file), line_(line) {}

LogMessage::~LogMessage() {
  const char* base = std::strrchr(file_, '/');
  base = base ? base + 1 : file_;
  std::string text;
  text += LevelLetter(level_);
  text += ' ';
  text += FormatRfc3339Millis(SystemNowMillis());
  text += ' ';
  text += base;
  text += ':';
  text += std::to_string(line_);
  text += "] ";
  text += stream_.str();
  text += '\n';
  // One write per line so concurrent threads do not interleave within a line.
  std::fwrite(text.data(), 1, text.size(), stderr);
  if (level_ == LogLevel::kFatal) {
    std::fflush(stderr);
    std::abort();
  }
}

}  // namespace internal
}  // namespace parallax
