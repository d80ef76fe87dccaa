#include "core/rpc/guarded_transport.h"

#include <arpa/inet.h>
#include <thrift/TConfiguration.h>
#include <thrift/transport/TTransportException.h>

#include <algorithm>
#include <cstring>

#include "core/rpc/request_header.h"

namespace parallax {
namespace {

using apache::thrift::TConfiguration;
using apache::thrift::transport::TTransportException;

// Read and write buffers larger than this are freed after each request.
constexpr uint32_t kReclaimBytes = 1 << 20;

std::shared_ptr<TConfiguration> Config(uint32_t max_frame_bytes) {
  const int limit = static_cast<int>(std::min<uint32_t>(max_frame_bytes, 0x7fffffff));
  return std::make_shared<TConfiguration>(/*maxMessageSize=*/limit, /*maxFrameSize=*/limit);
}

}  // namespace

GuardedFramedTransport::GuardedFramedTransport(
    std::shared_ptr<apache::thrift::transport::TTransport> socket,
    const GuardedTransportOptions& options, ConnectionGuard* guard, ConnectionGuard::Id id)
    : TFramedTransport(std::move(socket), DEFAULT_BUFFER_SIZE, kReclaimBytes,
                       Config(options.max_frame_bytes)),
      options_(options),
      guard_(guard),
      id_(id) {}

void GuardedFramedTransport::Reserve(uint32_t size, uint32_t keep) {
  if (size <= rBufSize_) return;
  boost::scoped_array<uint8_t> bigger(new uint8_t[size]);
  if (keep > 0) std::memcpy(bigger.get(), rBuf_.get(), keep);
  rBuf_.swap(bigger);
  rBufSize_ = size;
}

bool GuardedFramedTransport::readFrame() {
  guard_->SetPhase(id_, ConnectionPhase::kIdle);
  uint8_t size_bytes[4];
  uint32_t got = 0;
  while (got < sizeof(size_bytes)) {
    uint32_t n = transport_->read(size_bytes + got, static_cast<uint32_t>(sizeof(size_bytes)) - got);
    if (n == 0) {
      if (got == 0) return false;  // the client closed the connection between requests
      throw TTransportException(TTransportException::END_OF_FILE,
                                "the connection closed inside a frame header");
    }
    if (got == 0) guard_->SetPhase(id_, ConnectionPhase::kReading);
    got += n;
  }
  uint32_t size_nbo;
  std::memcpy(&size_nbo, size_bytes, sizeof(size_nbo));
  const auto size = static_cast<int32_t>(ntohl(size_nbo));
  if (size < 0) {
    throw TTransportException(TTransportException::CORRUPTED_DATA,
                              "a frame announced a negative size");
  }
  const auto bytes = static_cast<uint32_t>(size);
  if (bytes > options_.max_frame_bytes) {
    throw TTransportException(TTransportException::CORRUPTED_DATA,
                              "Received an oversized frame (" + std::to_string(bytes) +
                                  " bytes; the limit is " +
                                  std::to_string(options_.max_frame_bytes) + ")");
  }
  uint32_t have = 0;
  if (!authenticated_) {
    have = std::min(bytes, options_.unauthenticated_bytes);
    Reserve(have, 0);
    transport_->readAll(rBuf_.get(), have);
    if (have > 0 && RequestPrefixAuthenticates(rBuf_.get(), have, options_.auth_token)) {
      authenticated_ = true;
      guard_->SetAuthenticated(id_);
    } else if (have < bytes) {
      throw TTransportException(
          TTransportException::CORRUPTED_DATA,
          "refused a request of " + std::to_string(bytes) +
              " bytes before the connection authenticated: its first " +
              std::to_string(have) + " bytes hold no request header with the shared secret");
    }
  }
  if (have < bytes) {
    Reserve(bytes, have);
    transport_->readAll(rBuf_.get() + have, bytes - have);
  }
  guard_->SetPhase(id_, ConnectionPhase::kHandling);
  setReadBuffer(rBuf_.get(), bytes);
  return true;
}

}  // namespace parallax
