#include "core/ps/curve.h"

#include <zmq.h>

#include "schemas/kv_keys.h"

namespace parallax::ps {

StatusOr<CurveKeyPair> NewCurveKeyPair() {
  if (!zmq_has("curve")) {
    return FailedPrecondition(
        "this libzmq has no CURVE support, so PS traffic cannot be authenticated; install a "
        "libzmq5 built with libsodium (Debian's is)");
  }
  char pub[41] = {0}, sec[41] = {0};
  if (zmq_curve_keypair(pub, sec) != 0) {
    return Internal(std::string("zmq_curve_keypair failed: ") + zmq_strerror(zmq_errno()));
  }
  return CurveKeyPair{pub, sec};
}

std::string Z85FromBinaryKey(const std::string& binary) {
  if (binary.size() != 32) return "";
  char text[41] = {0};
  if (zmq_z85_encode(text, reinterpret_cast<const uint8_t*>(binary.data()), 32) == nullptr) {
    return "";
  }
  return text;
}

std::string ClientCurveKey(int64_t job_id, int32_t attempt, const std::string& public_key_z85) {
  uint8_t key[32];
  if (public_key_z85.size() != 40 || zmq_z85_decode(key, public_key_z85.c_str()) == nullptr) {
    return "";
  }
  static const char kHex[] = "0123456789abcdef";
  std::string hex;
  for (uint8_t b : key) {
    hex += kHex[b >> 4];
    hex += kHex[b & 15];
  }
  return kv_keys::ClientCurveKey(job_id, attempt, hex);
}

}  // namespace parallax::ps
