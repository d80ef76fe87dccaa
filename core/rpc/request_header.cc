#include "core/rpc/request_header.h"

#include <thrift/protocol/TBinaryProtocol.h>
#include <thrift/transport/TBufferTransports.h>

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

bool RequestPrefixAuthenticates(const uint8_t* frame, uint32_t size, const std::string& token) {
  using apache::thrift::protocol::TBinaryProtocol;
  using apache::thrift::protocol::TMessageType;
  using apache::thrift::protocol::TType;
  using apache::thrift::transport::TMemoryBuffer;
  try {
    auto buffer = std::make_shared<TMemoryBuffer>(const_cast<uint8_t*>(frame), size,
                                                  TMemoryBuffer::OBSERVE);
    // A method name and a secret are short (secrets are at most 4 KiB,
    // core/base/secret.h): nothing read here may be large.
    TBinaryProtocol protocol(buffer, /*string_limit=*/8192, /*container_limit=*/16,
                             /*strict_read=*/false, /*strict_write=*/true);
    std::string name;
    TMessageType type;
    int32_t seqid = 0;
    protocol.readMessageBegin(name, type, seqid);
    if (type != apache::thrift::protocol::T_CALL && type != apache::thrift::protocol::T_ONEWAY) {
      return false;
    }
    std::string struct_name;
    protocol.readStructBegin(struct_name);
    std::string field_name;
    TType field_type;
    int16_t field_id = 0;
    protocol.readFieldBegin(field_name, field_type, field_id);
    if (field_id != 1 || field_type != apache::thrift::protocol::T_STRUCT) return false;
    rpc::RequestHeader header;
    header.read(&protocol);
    return token.empty() || TokensEqual(header.auth_token, token);
  } catch (const apache::thrift::TException&) {
    return false;  // cut short, or not a call with a header
  }
}

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
