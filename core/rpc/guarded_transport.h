// GuardedFramedTransport: Thrift's framed transport for one server-side
// connection, which authenticates before it allocates and tells the
// connection's ConnectionGuard (core/rpc/connection_guard.h) what the
// connection is doing.
//
// Until a request of the connection has carried the service's shared secret
// (RequestPrefixAuthenticates, core/rpc/request_header.h), at most
// ConnectionLimits::unauthenticated_request_bytes of a request are read: when
// they hold a header with the secret, the connection is authenticated and the
// rest of the request is read as usual (up to max_frame_bytes); when the
// request fits in them it is handed on (the service refuses a wrong secret
// with its usual message); otherwise the connection is closed before the rest
// is read. So a connection that has not authenticated makes the server hold
// no more than that small buffer, whatever size its frame header announces.
// After a large request the buffer shrinks back, so a connection idle after a
// big request does not keep it.
//
// Not thread-safe: one connection's thread uses it.
#ifndef PARALLAX_CORE_RPC_GUARDED_TRANSPORT_H_
#define PARALLAX_CORE_RPC_GUARDED_TRANSPORT_H_

#include <thrift/transport/TBufferTransports.h>

#include <cstdint>
#include <memory>
#include <string>

#include "core/rpc/connection_guard.h"

namespace parallax {

struct GuardedTransportOptions {
  uint32_t max_frame_bytes = 24 << 20;   // a bigger frame closes the connection
  uint32_t unauthenticated_bytes = 64 << 10;
  std::string auth_token;                // "" : any readable header authenticates
};

class GuardedFramedTransport : public apache::thrift::transport::TFramedTransport {
 public:
  // `guard` must outlive the transport; `id` is the connection's.
  GuardedFramedTransport(std::shared_ptr<apache::thrift::transport::TTransport> socket,
                         const GuardedTransportOptions& options, ConnectionGuard* guard,
                         ConnectionGuard::Id id);

  bool authenticated() const { return authenticated_; }

 protected:
  bool readFrame() override;

 private:
  // Makes the read buffer hold `size` bytes, keeping its first `keep`.
  void Reserve(uint32_t size, uint32_t keep);

  const GuardedTransportOptions options_;
  ConnectionGuard* const guard_;
  const ConnectionGuard::Id id_;
  bool authenticated_ = false;
};

}  // namespace parallax

#endif  // PARALLAX_CORE_RPC_GUARDED_TRANSPORT_H_
