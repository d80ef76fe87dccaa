// Status and StatusOr: how expected failures (bad input, I/O, network,
// timeouts) travel through Parallax. A Status carries a code and a message a
// user can act on: what went wrong, where, and what to do about it.
#ifndef PARALLAX_INCLUDE_PARALLAX_STATUS_H_
#define PARALLAX_INCLUDE_PARALLAX_STATUS_H_

#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <variant>

namespace parallax {

enum class StatusCode {
  kOk = 0,
  kInvalidArgument,     // bad input from a user or a peer
  kNotFound,            // an id that does not exist
  kAlreadyExists,
  kFailedPrecondition,  // the request is valid but not in this state
  kDeadlineExceeded,
  kUnavailable,         // a peer or service cannot be reached; retrying may help
  kPermissionDenied,    // authentication or protocol version refused
  kAborted,             // the operation was cut short (e.g. rolled back); nothing changed
  kInternal,            // a broken invariant or an unexpected failure of a dependency
  kIoError,
};

std::string_view StatusCodeName(StatusCode code);

class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(StatusCode code, std::string message) : code_(code), message_(std::move(message)) {}

  static Status Ok() { return Status(); }

  bool ok() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }

  // "NOT_FOUND: job 7 does not exist", or "OK".
  std::string ToString() const;

  // Returns a copy whose message is prefixed with `context: `.
  Status WithContext(std::string_view context) const;

  void IgnoreError() const {}

 private:
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
};

inline Status InvalidArgument(std::string m) { return {StatusCode::kInvalidArgument, std::move(m)}; }
inline Status NotFound(std::string m) { return {StatusCode::kNotFound, std::move(m)}; }
inline Status AlreadyExists(std::string m) { return {StatusCode::kAlreadyExists, std::move(m)}; }
inline Status FailedPrecondition(std::string m) { return {StatusCode::kFailedPrecondition, std::move(m)}; }
inline Status DeadlineExceeded(std::string m) { return {StatusCode::kDeadlineExceeded, std::move(m)}; }
inline Status Unavailable(std::string m) { return {StatusCode::kUnavailable, std::move(m)}; }
inline Status PermissionDenied(std::string m) { return {StatusCode::kPermissionDenied, std::move(m)}; }
inline Status Aborted(std::string m) { return {StatusCode::kAborted, std::move(m)}; }
inline Status Internal(std::string m) { return {StatusCode::kInternal, std::move(m)}; }
inline Status IoError(std::string m) { return {StatusCode::kIoError, std::move(m)}; }

// Either a value or a non-OK Status.
template <typename T>
class [[nodiscard]] StatusOr {
 public:
  StatusOr(Status status) : status_(std::move(status)) {}  // NOLINT: implicit by design
  StatusOr(T value) : value_(std::move(value)) {}          // NOLINT: implicit by design

  bool ok() const { return status_.ok(); }
  const Status& status() const { return status_; }

  // REQUIRES: ok().
  T& value() & { return *value_; }
  const T& value() const& { return *value_; }
  T&& value() && { return std::move(*value_); }
  T* operator->() { return &*value_; }
  const T* operator->() const { return &*value_; }
  T& operator*() & { return *value_; }
  const T& operator*() const& { return *value_; }

 private:
  Status status_;
  std::optional<T> value_;
};

}  // namespace parallax

// Returns early from the enclosing function when `expr` is not OK.
#define PX_RETURN_IF_ERROR(expr)              \
  do {                                        \
    ::parallax::Status px_status_ = (expr);   \
    if (!px_status_.ok()) return px_status_;  \
  } while (0)

#define PX_CONCAT_INNER_(a, b) a##b
#define PX_CONCAT_(a, b) PX_CONCAT_INNER_(a, b)
#define PX_ASSIGN_OR_RETURN_IMPL_(tmp, lhs, expr) \
  auto tmp = (expr);                              \
  if (!tmp.ok()) return tmp.status();             \
  lhs = std::move(tmp).value()
// `PX_ASSIGN_OR_RETURN(auto x, F());` assigns F()'s value or returns its Status.
#define PX_ASSIGN_OR_RETURN(lhs, expr) \
  PX_ASSIGN_OR_RETURN_IMPL_(PX_CONCAT_(px_statusor_, __LINE__), lhs, expr)

#endif  // PARALLAX_INCLUDE_PARALLAX_STATUS_H_
