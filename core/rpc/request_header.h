// The checks every Parallax Thrift service makes on a request's header, and
// how a Status becomes the IDL's CoordinatorError. Used by the service
// adapters only (STYLE: a Status becomes a Thrift exception only there).
#ifndef PARALLAX_CORE_RPC_REQUEST_HEADER_H_
#define PARALLAX_CORE_RPC_REQUEST_HEADER_H_

#include <cstdint>
#include <optional>
#include <string>

#include "parallax/status.h"
#include "schemas/coordinator_types.h"

namespace parallax {

// nullopt when the header is acceptable; otherwise VERSION_MISMATCH naming
// both versions, or UNAUTHENTICATED (`token` empty: any token is accepted;
// compared in constant time). `server` names the service in messages
// ("coordinator", "agent").
std::optional<rpc::CoordinatorError> CheckRequestHeader(const rpc::RequestHeader& header,
                                                        const std::string& token,
                                                        const std::string& server);

// Whether the first `size` bytes of a request frame hold a whole
// RequestHeader that carries `token` (compared in constant time; `token`
// empty: any header that can be read). The frame is a TBinaryProtocol call
// whose first argument is the header, as in every call of
// schemas/coordinator.thrift and schemas/agent.thrift. False for bytes cut
// before the header ends, or that are not such a call. Servers use it to
// decide, before reading (and allocating) the rest of a request, whether its
// connection has authenticated (core/rpc/guarded_transport.h).
bool RequestPrefixAuthenticates(const uint8_t* frame, uint32_t size, const std::string& token);

// INVALID_ARGUMENT -> INVALID_ARGUMENT, NOT_FOUND -> NOT_FOUND, ...;
// UNAVAILABLE, ABORTED and IO_ERROR -> UNAVAILABLE; PERMISSION_DENIED ->
// UNAUTHENTICATED; others -> INTERNAL.
rpc::CoordinatorError ToCoordinatorError(const Status& status);

}  // namespace parallax

#endif  // PARALLAX_CORE_RPC_REQUEST_HEADER_H_
