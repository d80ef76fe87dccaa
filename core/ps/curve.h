// ZeroMQ CURVE for the PS data plane: keys and where they are published.
//
// When a job's control plane has a shared secret, every PS socket uses CURVE
// (encrypted, and each side authenticated by its key pair):
// - each shard makes a key pair at start and publishes its public key next
//   to its endpoint, under job/<id>/<attempt>/ps-keys/<shard>;
// - each client makes a key pair and publishes its public key under
//   job/<id>/<attempt>/ps-clients/<hex of the key> before it connects;
// - a shard admits a connection only when the client's key is published for
//   the shard's own job and attempt (ZAP handler in ps/shard_server.cc).
// Only holders of the control-plane secret can write those keys, so only
// they can talk to a shard. Keys are Z85 text (40 characters).
#ifndef PARALLAX_CORE_PS_CURVE_H_
#define PARALLAX_CORE_PS_CURVE_H_

#include <cstdint>
#include <string>

#include "parallax/status.h"

namespace parallax::ps {

struct CurveKeyPair {
  std::string public_key;  // Z85
  std::string secret_key;  // Z85; never leaves the process
};

// A fresh key pair. FAILED_PRECONDITION when this libzmq was built without
// CURVE (zmq_has("curve") is false).
StatusOr<CurveKeyPair> NewCurveKeyPair();

// The Z85 text of a 32-byte binary key ("" when `binary` is not 32 bytes).
std::string Z85FromBinaryKey(const std::string& binary);

// Rendezvous keys (see above). ClientCurveKey is "" for a malformed key.
std::string ClientCurveKey(int64_t job_id, int32_t attempt, const std::string& public_key_z85);

}  // namespace parallax::ps

#endif  // PARALLAX_CORE_PS_CURVE_H_
