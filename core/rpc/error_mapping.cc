#include "core/rpc/error_mapping.h"

namespace parallax {

Status FromCoordinatorError(const rpc::CoordinatorError& e) {
  switch (e.code) {
    case rpc::ErrorCode::INVALID_ARGUMENT: return InvalidArgument(e.message);
    case rpc::ErrorCode::NOT_FOUND: return NotFound(e.message);
    case rpc::ErrorCode::ALREADY_EXISTS: return AlreadyExists(e.message);
    case rpc::ErrorCode::FAILED_PRECONDITION:
    case rpc::ErrorCode::FENCED: return FailedPrecondition(e.message);
    case rpc::ErrorCode::DEADLINE_EXCEEDED: return DeadlineExceeded(e.message);
    case rpc::ErrorCode::UNAVAILABLE: return Aborted("coordinator: " + e.message);
    case rpc::ErrorCode::UNAUTHENTICATED:
    case rpc::ErrorCode::VERSION_MISMATCH: return PermissionDenied(e.message);
    default: return Internal("coordinator: " + e.message);
  }
}

}  // namespace parallax
