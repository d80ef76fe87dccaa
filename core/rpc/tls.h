// Optional TLS on the Thrift control plane, built from Thrift's own
// TSSLSocketFactory / TSSLServerSocket (OpenSSL underneath). A server with a
// certificate and key serves TLS only; a client with a CA file speaks TLS
// only, verifies the server's certificate chain against that CA and checks
// that the certificate names the host it connected to (subjectAltName DNS or
// IP entry, else the common name). Without them everything is plain TCP, as
// before. Clients present no certificate: the shared secret in every request
// header (core/rpc/request_header.h) authenticates them, now inside TLS.
//
// Where the settings come from (docs/OPERATIONS.md, "TLS"):
//   parallax-coordinator, parallax-agent  --tls-cert FILE --tls-key FILE
//   parallax, parallax-agent               --tls-ca FILE or $PARALLAX_TLS_CA
//   tasks (trainer ranks, PS shards)       $PARALLAX_TLS_CA, set by the agent
#ifndef PARALLAX_CORE_RPC_TLS_H_
#define PARALLAX_CORE_RPC_TLS_H_

#include <exception>
#include <functional>
#include <memory>
#include <string>

#include "parallax/status.h"

namespace apache::thrift::transport {
class TServerSocket;
class TSocket;
}  // namespace apache::thrift::transport

namespace parallax {

// A Thrift server's listening socket and how its accepted connections are
// wrapped.
struct ThriftServerSocket {
  // Binds on listen(); the server accepts on its descriptor itself.
  std::shared_ptr<apache::thrift::transport::TServerSocket> listener;
  // The Thrift socket of an accepted descriptor, which it then owns: a TLS
  // socket that shakes hands on its first read, or a plain one.
  std::function<std::shared_ptr<apache::thrift::transport::TSocket>(int fd)> wrap;
};

// A listening socket for a Thrift server on host:port: TLS when cert_file and
// key_file (PEM) are given, plain TCP when both are empty. Fails, naming the
// flag and the file, with INVALID_ARGUMENT when only one is given and
// FAILED_PRECONDITION when a file cannot be read, holds no PEM certificate or
// key, or the key does not belong to the certificate. Nothing is bound yet
// (the server binds on listen()).
StatusOr<ThriftServerSocket> NewThriftServerSocket(const std::string& host, int port,
                                                   const std::string& cert_file,
                                                   const std::string& key_file);

// A client socket to host:port, not yet open. `peer` names the server in
// messages ("coordinator", "agent"). With ca_file, a TLS socket whose open()
// also completes the handshake, so a server that is not trusted (or does not
// speak TLS) fails open() with a message that says which and what to do.
// Without, a plain socket that, when a server closes a new connection
// without answering (what a TLS server does to a plaintext request), says
// that it may require TLS. FAILED_PRECONDITION naming the file when ca_file
// cannot be read or holds no PEM certificate.
StatusOr<std::shared_ptr<apache::thrift::transport::TSocket>> NewThriftClientSocket(
    const std::string& host, int port, const std::string& ca_file, const std::string& peer);

// The Status for an exception thrown while opening a client socket from
// NewThriftClientSocket and saying Hello: PERMISSION_DENIED when the server's
// certificate is not trusted (retrying cannot help), UNAVAILABLE otherwise.
// The message is `context` + ": " + what happened.
Status ThriftConnectError(const std::string& context, const std::exception& e);

// What NewThriftServerSocket would fail with for these files, without
// binding; for main() to refuse bad flags at start. OK when both are empty.
Status CheckTlsServerFiles(const std::string& cert_file, const std::string& key_file);

// FAILED_PRECONDITION naming `flag` when `ca_file` cannot be used as a trust
// anchor; for main() to refuse a bad --tls-ca at start instead of at the first
// connection. OK for "".
Status CheckTlsCaFile(const std::string& ca_file, const std::string& flag);

// --help text of the flags, the same in every binary.
extern const char kTlsCertHelp[];
extern const char kTlsKeyHelp[];
extern const char kTlsCaHelp[];

}  // namespace parallax

#endif  // PARALLAX_CORE_RPC_TLS_H_
