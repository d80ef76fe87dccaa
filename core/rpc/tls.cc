#include "core/rpc/tls.h"

#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <thrift/transport/TSSLServerSocket.h>
#include <thrift/transport/TSSLSocket.h>
#include <thrift/transport/TServerSocket.h>
#include <thrift/transport/TSocket.h>
#include <thrift/transport/TTransportException.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

namespace parallax {

const char kTlsCertHelp[] =
    "serve TLS with this PEM certificate (with its chain, if any); it must name the host "
    "clients connect to (subjectAltName DNS or IP). Needs --tls-key. Without: plaintext";
const char kTlsKeyHelp[] =
    "PEM private key of --tls-cert (keep it readable only by this daemon's user)";
const char kTlsCaHelp[] =
    "speak TLS to the coordinator and agents, trusting servers whose certificate this PEM CA "
    "certificate signed and that name the host connected to (default: $PARALLAX_TLS_CA). "
    "Without: plaintext";

namespace {

using apache::thrift::transport::DefaultClientAccessManager;
using apache::thrift::transport::SSLContext;
using apache::thrift::transport::TServerSocket;
using apache::thrift::transport::TSocket;
using apache::thrift::transport::TSSLServerSocket;
using apache::thrift::transport::TSSLSocket;
using apache::thrift::transport::TSSLSocketFactory;
using apache::thrift::transport::TTransportException;

// Thrown by a client socket's open() when the server's certificate is not
// trusted; ThriftConnectError maps it to PERMISSION_DENIED.
class TlsTrustError : public TTransportException {
 public:
  explicit TlsTrustError(const std::string& message)
      : TTransportException(TTransportException::INTERNAL_ERROR, message) {}
};

// Reads `path` whole, or says why not.
StatusOr<std::string> ReadPem(const std::string& path, const std::string& flag) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return FailedPrecondition(flag + " '" + path + "' cannot be read: " + std::strerror(errno) +
                              "; check the path and that this user may read it");
  }
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// A file that is not PEM gets a message of ours rather than OpenSSL's "no
// start line".
Status RequirePemBlock(const std::string& text, const std::string& path, const std::string& flag,
                       const std::string& what, const std::string& marker) {
  if (text.find("-----BEGIN ") != std::string::npos && text.find(marker) != std::string::npos) {
    return Status::Ok();
  }
  return FailedPrecondition(flag + " '" + path + "' holds no PEM " + what +
                            " (a '-----BEGIN ...' block containing '" + marker +
                            "'); give the PEM file, see docs/OPERATIONS.md (TLS) for making one");
}

// Exposes the factory's SSL_CTX to set the protocol floor, and makes client
// sockets that shake hands in open(). Sockets keep their factory alive:
// Thrift cleans up OpenSSL when the last factory goes.
class Factory : public TSSLSocketFactory {
 public:
  Factory() { SSL_CTX_set_min_proto_version(ctx_->get(), TLS1_2_VERSION); }
  std::shared_ptr<SSLContext> context() const { return ctx_; }
};

// A TLS client socket whose open() completes the handshake, so trust
// problems surface when connecting and carry a message saying what to do.
class HandshakingSocket : public TSSLSocket {
 public:
  HandshakingSocket(std::shared_ptr<Factory> factory, const std::string& host, int port,
                    std::string peer, std::string ca_file)
      : TSSLSocket(factory->context(), host, port),
        factory_(std::move(factory)),
        peer_(std::move(peer)),
        ca_file_(std::move(ca_file)) {
    server(false);
    access(std::make_shared<DefaultClientAccessManager>());
  }

  void open() override {
    TSSLSocket::open();
    try {
      initializeHandshake();
    } catch (const TTransportException& e) {
      long verify = ssl_ != nullptr ? SSL_get_verify_result(ssl_) : X509_V_OK;
      std::string detail = e.what();
      // Free the half-made session here: close() would try SSL_shutdown on
      // it, which fails ("shutdown while in init") and prints to stderr.
      if (ssl_ != nullptr) {
        SSL_free(ssl_);
        ssl_ = nullptr;
      }
      close();
      const std::string where =
          "the " + peer_ + " at " + getHost() + ":" + std::to_string(getPort());
      if (verify != X509_V_OK) {
        throw TlsTrustError("TLS: " + where + " presented a certificate that --tls-ca '" +
                            ca_file_ + "' does not trust (" +
                            X509_verify_cert_error_string(verify) +
                            "); give this client the CA certificate that signed the " + peer_ +
                            "'s certificate with --tls-ca or $PARALLAX_TLS_CA");
      }
      if (detail.rfind("authorize:", 0) == 0) {
        throw TlsTrustError("TLS: " + where +
                            " has a certificate signed by the trusted CA that "
                            "does not name '" +
                            getHost() + "' (" + detail +
                            "); connect with a host name or address its certificate lists "
                            "(subjectAltName), or reissue the certificate with this one");
      }
      if (e.getType() == TTransportException::TIMED_OUT) throw;
      throw TTransportException(
          e.getType(), "TLS handshake with " + where + " failed (" + detail + "); if the " + peer_ +
                           " serves plaintext (started without --tls-cert), leave out "
                           "--tls-ca and $PARALLAX_TLS_CA, or give it --tls-cert and --tls-key");
    }
  }

 private:
  std::shared_ptr<Factory> factory_;
  std::string peer_;
  std::string ca_file_;
};

// A plaintext client socket. A TLS server drops a plaintext request without
// a word (OpenSSL sends no alert to something that is not TLS), so a new
// connection closed before any answer says that this may be why.
class PlainSocket : public TSocket {
 public:
  PlainSocket(const std::string& host, int port, std::string peer)
      : TSocket(host, port), peer_(std::move(peer)) {}

  void open() override {
    answered_ = false;
    TSocket::open();
  }

  uint32_t read(uint8_t* buf, uint32_t len) override {
    uint32_t n = TSocket::read(buf, len);
    if (n > 0) {
      answered_ = true;
    } else if (len > 0 && !answered_) {
      throw TTransportException(
          TTransportException::END_OF_FILE,
          "the " + peer_ + " at " + getHost() + ":" + std::to_string(getPort()) +
              " closed the connection without answering; if it serves TLS (started with "
              "--tls-cert), give this client the CA that signed its certificate with --tls-ca "
              "or $PARALLAX_TLS_CA; otherwise its log says why");
    }
    return n;
  }

 private:
  std::string peer_;
  bool answered_ = false;
};

}  // namespace

Status CheckTlsCaFile(const std::string& ca_file, const std::string& flag) {
  if (ca_file.empty()) return Status::Ok();
  PX_ASSIGN_OR_RETURN(std::string text, ReadPem(ca_file, flag));
  PX_RETURN_IF_ERROR(RequirePemBlock(text, ca_file, flag, "CA certificate", "CERTIFICATE"));
  try {
    Factory factory;
    factory.loadTrustedCertificates(ca_file.c_str());
  } catch (const TTransportException& e) {
    return FailedPrecondition(flag + " '" + ca_file + "' is not a usable CA certificate (" +
                              e.what() + "); give the PEM certificate of the CA");
  }
  return Status::Ok();
}

StatusOr<ThriftServerSocket> NewThriftServerSocket(const std::string& host, int port,
                                                   const std::string& cert_file,
                                                   const std::string& key_file) {
  if (cert_file.empty() && key_file.empty()) {
    return ThriftServerSocket{std::make_shared<TServerSocket>(host, port),
                              [](int fd) { return std::make_shared<TSocket>(fd); }};
  }
  if (cert_file.empty() || key_file.empty()) {
    return InvalidArgument(std::string(cert_file.empty() ? "--tls-key" : "--tls-cert") +
                           " was given without " +
                           (cert_file.empty() ? "--tls-cert" : "--tls-key") +
                           "; TLS needs both the certificate and its private key");
  }
  PX_ASSIGN_OR_RETURN(std::string cert, ReadPem(cert_file, "--tls-cert"));
  PX_RETURN_IF_ERROR(RequirePemBlock(cert, cert_file, "--tls-cert", "certificate", "CERTIFICATE"));
  PX_ASSIGN_OR_RETURN(std::string key, ReadPem(key_file, "--tls-key"));
  PX_RETURN_IF_ERROR(RequirePemBlock(key, key_file, "--tls-key", "private key", "PRIVATE KEY"));
  auto factory = std::make_shared<Factory>();
  factory->server(true);
  factory->authenticate(false);  // clients prove themselves with the shared secret
  try {
    factory->loadCertificate(cert_file.c_str());
  } catch (const TTransportException& e) {
    return FailedPrecondition("--tls-cert '" + cert_file + "' is not a usable certificate (" +
                              e.what() + "); give a PEM certificate, see docs/OPERATIONS.md (TLS)");
  }
  try {
    factory->loadPrivateKey(key_file.c_str());
  } catch (const TTransportException& e) {
    return FailedPrecondition(
        "--tls-key '" + key_file + "' is not a usable private key for --tls-cert '" + cert_file +
        "' (" + e.what() + "); give the unencrypted PEM key the certificate was made for");
  }
  return ThriftServerSocket{
      std::make_shared<TSSLServerSocket>(host, port, factory),
      [factory](int fd) -> std::shared_ptr<TSocket> { return factory->createSocket(fd); }};
}

Status CheckTlsServerFiles(const std::string& cert_file, const std::string& key_file) {
  return NewThriftServerSocket("127.0.0.1", 0, cert_file, key_file).status();
}

StatusOr<std::shared_ptr<TSocket>> NewThriftClientSocket(const std::string& host, int port,
                                                         const std::string& ca_file,
                                                         const std::string& peer) {
  if (ca_file.empty())
    return std::shared_ptr<TSocket>(std::make_shared<PlainSocket>(host, port, peer));
  PX_ASSIGN_OR_RETURN(std::string text, ReadPem(ca_file, "--tls-ca"));
  PX_RETURN_IF_ERROR(RequirePemBlock(text, ca_file, "--tls-ca", "CA certificate", "CERTIFICATE"));
  auto factory = std::make_shared<Factory>();
  factory->server(false);
  factory->authenticate(true);  // verify the server's chain in the handshake
  try {
    factory->loadTrustedCertificates(ca_file.c_str());
  } catch (const TTransportException& e) {
    return FailedPrecondition("--tls-ca '" + ca_file + "' is not a usable CA certificate (" +
                              e.what() + "); give the PEM certificate of the CA");
  }
  return std::shared_ptr<TSocket>(
      std::make_shared<HandshakingSocket>(std::move(factory), host, port, peer, ca_file));
}

Status ThriftConnectError(const std::string& context, const std::exception& e) {
  if (dynamic_cast<const TlsTrustError*>(&e) != nullptr) {
    return PermissionDenied(context + ": " + e.what());
  }
  return Unavailable(context + ": " + e.what());
}

}  // namespace parallax
