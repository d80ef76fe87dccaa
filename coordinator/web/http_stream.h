// One accepted HTTP connection as an httplib::Stream, plain or TLS, with the
// limits httplib's own socket stream lacks: all reads together may take at
// most max_read_bytes and must finish by read_deadline (so neither a flood of
// header lines nor a byte-per-second sender holds memory or a thread for
// long), and the whole reply must be written within write_timeout of its
// first byte. Internal to coordinator/web/http_server.cc.
#ifndef PARALLAX_COORDINATOR_HTTP_STREAM_H_
#define PARALLAX_COORDINATOR_HTTP_STREAM_H_

#include <httplib.h>
#include <openssl/ssl.h>

#include <chrono>
#include <cstddef>
#include <functional>
#include <memory>

namespace parallax::coordinator {

struct StreamLimits {
  std::chrono::steady_clock::time_point read_deadline;
  size_t max_read_bytes = 16 << 10;
  std::chrono::milliseconds write_timeout{10'000};
  // Called once, on the stream's thread, when the first byte of the request
  // has been read (for TLS: when the handshake is done); may be empty.
  std::function<void()> on_first_byte;
};

class ConnectionStream : public httplib::Stream {
 public:
  ~ConnectionStream() override = default;
  // Whether a read was refused for max_read_bytes.
  virtual bool read_limit_hit() const = 0;
  // Bytes written so far (0: nothing answered yet).
  virtual size_t bytes_written() const = 0;
};

// Makes `sock` non-blocking and, with `tls`, completes the TLS handshake by
// limits.read_deadline. Null when the handshake fails or times out (nothing
// to answer). Does not own `sock`: the caller closes it after the stream is
// gone. `tls` must outlive the stream.
std::unique_ptr<ConnectionStream> OpenConnectionStream(int sock, SSL_CTX* tls,
                                                       const StreamLimits& limits);

}  // namespace parallax::coordinator

#endif  // PARALLAX_COORDINATOR_HTTP_STREAM_H_
