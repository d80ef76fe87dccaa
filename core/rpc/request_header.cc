#include "core/rpc/request_header.h"

#include "schemas/coordinator_constants.h"

namespace parallax {
namespace {

// Constant-time comparison so the token cannot be guessed byte by byte.
bool TokensEqual(const std::string& a, const std::string& b) {
  unsigned char diff = a.size() == b.size() ? 0 : 1;
  const std::string& longer = a.size() >= b.size() ? a : b;
  for (size_t i = 0; i < longer.size(); ++i) {
    unsigned char x = i < a.size() ? a[i] : 0;
    unsigned char y = i < b.size() ? b[i] : 0;
    diff |= x ^ y;
  }
  return diff == 0;
}

rpc::CoordinatorError Error(rpc::ErrorCode::type code, std::string message) {
  rpc::CoordinatorError e;
  e.code = code;
  e.message = std::move(message);
  return e;
}

}  // namespace

std::optional<rpc::CoordinatorError> CheckRequestHeader(const rpc::RequestHeader& header,
                                                        const std::string& token,
                                                        const std::string& server) {
  const int32_t ours = rpc::g_coordinator_constants.PROTOCOL_VERSION;
  if (header.protocol_version != ours) {
    return Error(rpc::ErrorCode::VERSION_MISMATCH,
                 "protocol version mismatch: client speaks version " +
                     std::to_string(header.protocol_version) + ", this " + server +
                     " speaks version " + std::to_string(ours) +
                     " (0.1.0); use parallax binaries from the same release on both sides");
  }
  if (!token.empty() && !TokensEqual(header.auth_token, token)) {
    // The refusal never echoes either secret.
    return Error(rpc::ErrorCode::UNAUTHENTICATED,
                 std::string("authentication failed: this ") + server +
                     (header.auth_token.empty() ? " requires the cluster's shared secret and the "
                                                  "request carried none"
                                                : " did not accept the shared secret sent") +
                     "; nothing was done. Give the client the same secret file as the " + server +
                     " with --secret-file or $PARALLAX_SECRET_FILE");
  }
  return std::nullopt;
}

rpc::CoordinatorError ToCoordinatorError(const Status& status) {
  rpc::ErrorCode::type code;
  switch (status.code()) {
    case StatusCode::kInvalidArgument: code = rpc::ErrorCode::INVALID_ARGUMENT; break;
    case StatusCode::kNotFound: code = rpc::ErrorCode::NOT_FOUND; break;
    case StatusCode::kAlreadyExists: code = rpc::ErrorCode::ALREADY_EXISTS; break;
    case StatusCode::kFailedPrecondition: code = rpc::ErrorCode::FAILED_PRECONDITION; break;
    case StatusCode::kDeadlineExceeded: code = rpc::ErrorCode::DEADLINE_EXCEEDED; break;
    case StatusCode::kUnavailable:
    case StatusCode::kAborted:
    case StatusCode::kIoError: code = rpc::ErrorCode::UNAVAILABLE; break;
    case StatusCode::kPermissionDenied: code = rpc::ErrorCode::UNAUTHENTICATED; break;
    default: code = rpc::ErrorCode::INTERNAL; break;
  }
  return Error(code, status.message());
}

}  // namespace parallax
