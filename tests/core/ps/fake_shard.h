// A fake PS shard for client tests: a ZeroMQ ROUTER socket on loopback TCP
// that receives requests and answers only when the test says so.
#ifndef PARALLAX_TESTS_CORE_PS_FAKE_SHARD_H_
#define PARALLAX_TESTS_CORE_PS_FAKE_SHARD_H_

#include <chrono>
#include <cstring>
#include <optional>
#include <string>
#include <vector>
#include <zmq.hpp>
#include <zmq_addon.hpp>

#include "core/ps/wire.h"

namespace parallax::ps {

// A shard that holds every request until Answer() is called.
class FakeShard {
 public:
  explicit FakeShard(zmq::context_t* ctx) : socket_(*ctx, zmq::socket_type::router) {
    socket_.set(zmq::sockopt::linger, 0);
    socket_.bind("tcp://127.0.0.1:*");
    endpoint_ = socket_.get(zmq::sockopt::last_endpoint);
  }
  const std::string& endpoint() const { return endpoint_; }

  struct Received {
    std::string identity;
    Header header;
    std::vector<int64_t> ids;
    std::vector<float> values;
  };

  // Receives one request, waiting at most timeout_ms.
  std::optional<Received> Receive(int timeout_ms = 5000) {
    zmq::pollitem_t item{socket_.handle(), 0, ZMQ_POLLIN, 0};
    if (zmq::poll(&item, 1, std::chrono::milliseconds(timeout_ms)) == 0) return std::nullopt;
    std::vector<zmq::message_t> msgs;
    (void)zmq::recv_multipart(socket_, std::back_inserter(msgs));
    if (msgs.size() != 4) return std::nullopt;
    Received r;
    r.identity = msgs[0].to_string();
    r.header = ps_wire::ReadHeader(msgs[1].data());
    r.ids.resize(msgs[2].size() / 8);
    if (!r.ids.empty()) std::memcpy(r.ids.data(), msgs[2].data(), msgs[2].size());
    r.values.resize(msgs[3].size() / 4);
    if (!r.values.empty()) std::memcpy(r.values.data(), msgs[3].data(), msgs[3].size());
    return r;
  }

  // Answers `r` with rows whose every value is row id + 0.5 (pulls) or an ack.
  void Answer(const Received& r, uint32_t dim, int64_t version = 0) {
    Header h = r.header;
    h.flags = ps_wire::kFlagReply;
    h.version_seen = version;
    std::vector<float> vals;
    const bool rows = h.op != static_cast<uint8_t>(Op::kPush);
    if (rows) {
      for (int64_t id : r.ids) vals.insert(vals.end(), dim, static_cast<float>(id) + 0.5f);
      h.dim = dim;
    } else {
      h.count = 0;
    }
    std::string head(64, '\0');
    ps_wire::WriteHeader(h, head.data());
    socket_.send(zmq::buffer(r.identity), zmq::send_flags::sndmore);
    socket_.send(zmq::buffer(head), zmq::send_flags::sndmore);
    socket_.send(zmq::message_t(), zmq::send_flags::sndmore);
    socket_.send(zmq::buffer(vals), zmq::send_flags::none);
  }

  void AnswerError(const Received& r, ErrorCode code, const std::string& text) {
    Header h = r.header;
    h.flags = ps_wire::kFlagReply;
    h.op = static_cast<uint8_t>(Op::kError);
    h.error_code = static_cast<uint16_t>(code);
    h.count = 0;
    std::string head(64, '\0');
    ps_wire::WriteHeader(h, head.data());
    socket_.send(zmq::buffer(r.identity), zmq::send_flags::sndmore);
    socket_.send(zmq::buffer(head), zmq::send_flags::sndmore);
    socket_.send(zmq::buffer(text), zmq::send_flags::sndmore);
    socket_.send(zmq::message_t(), zmq::send_flags::none);
  }

 private:
  zmq::socket_t socket_;
  std::string endpoint_;
};

}  // namespace parallax::ps

#endif  // PARALLAX_TESTS_CORE_PS_FAKE_SHARD_H_
