// One logging facade for every Parallax process. Messages go to stderr as
//   I 2026-11-22T10:00:00.123Z coordinator.cc:42] job "7" submitted
// Messages have no trailing period and quote ids.
//
// PX_CHECK is for broken invariants only, never for user input: it logs and
// aborts the process.
#ifndef PARALLAX_CORE_BASE_LOGGING_H_
#define PARALLAX_CORE_BASE_LOGGING_H_

#include <sstream>

namespace parallax {

enum class LogLevel { kDebug = 0, kInfo = 1, kWarning = 2, kError = 3, kFatal = 4 };

// Messages below `level` are dropped. Thread-safe. Default: kInfo.
void SetMinLogLevel(LogLevel level);
LogLevel MinLogLevel();

namespace internal {

class LogMessage {
 public:
  LogMessage(LogLevel level, const char* file, int line);
  ~LogMessage();  // writes the line; aborts for kFatal
  std::ostream& stream() { return stream_; }

 private:
  LogLevel level_;
  const char* file_;
  int line_;
  std::ostringstream stream_;
};

// Swallows the stream when a message is disabled.
struct LogVoidify {
  void operator&(std::ostream&) {}
};

}  // namespace internal
}  // namespace parallax

#define PX_LOG_LEVEL_DEBUG ::parallax::LogLevel::kDebug
#define PX_LOG_LEVEL_INFO ::parallax::LogLevel::kInfo
#define PX_LOG_LEVEL_WARNING ::parallax::LogLevel::kWarning
#define PX_LOG_LEVEL_ERROR ::parallax::LogLevel::kError
#define PX_LOG_LEVEL_FATAL ::parallax::LogLevel::kFatal

#define PX_LOG(severity)                                                        \
  (PX_LOG_LEVEL_##severity < ::parallax::MinLogLevel())                        \
      ? (void)0                                                                 \
      : ::parallax::internal::LogVoidify() &                                    \
            ::parallax::internal::LogMessage(PX_LOG_LEVEL_##severity, __FILE__, \
                                             __LINE__)                          \
                .stream()

#define PX_CHECK(cond)                                                           \
  (cond) ? (void)0                                                               \
         : ::parallax::internal::LogVoidify() &                                  \
               ::parallax::internal::LogMessage(::parallax::LogLevel::kFatal,    \
                                                __FILE__, __LINE__)              \
                       .stream()                                                 \
                   << "Check failed: " #cond " "

#endif  // PARALLAX_CORE_BASE_LOGGING_H_
