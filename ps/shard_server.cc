#include "ps/shard_server.h"

#include <array>
#include <mutex>
#include <set>
#include <thread>

#include <zmq.hpp>
#include <zmq_addon.hpp>

#include "core/base/logging.h"
#include "ps/shard_connections.h"

namespace parallax::ps {
namespace {

// Moves a frame into a ZeroMQ message without copying large bodies.
zmq::message_t ToMessage(std::string&& s) {
  if (s.size() < 4096) return zmq::message_t(s.data(), s.size());
  auto* owned = new std::string(std::move(s));
  return zmq::message_t(
      owned->data(), owned->size(), [](void*, void* hint) { delete static_cast<std::string*>(hint); },
      owned);
}

// Hands a row frame to ZeroMQ, which frees it once sent.
zmq::message_t ToMessage(ValueFrame&& v) {
  if (v.empty()) return zmq::message_t();
  const size_t size = v.size();
  return zmq::message_t(v.Release(), size, [](void* data, void*) { delete[] static_cast<char*>(data); });
}

class ZmqShardServer final : public ShardServer {
 public:
  ZmqShardServer(std::unique_ptr<ShardCore> core, std::string listen, ShardCurveOptions curve,
                 int max_connections, int handshake_timeout_ms)
      : core_(std::move(core)),
        listen_(std::move(listen)),
        curve_(std::move(curve)),
        max_connections_(max_connections),
        handshake_timeout_ms_(handshake_timeout_ms),
        ctx_(1) {
    // What the shard is before it handles anything (a next generation's
    // lost updates are reported at once).
    snapshot_.rows_held = core_->rows_held();
    snapshot_.dynamic_tables = core_->dynamic_stats();
    snapshot_.generation = core_->options().generation;
    snapshot_.lost_updates = core_->lost_updates();
  }
  ~ZmqShardServer() override { Stop(); }

  Status Bind() {
    std::string address = listen_;
    if (address.size() > 2 && address.compare(address.size() - 2, 2, ":0") == 0 &&
        address.rfind("tcp://", 0) == 0) {
      address.replace(address.size() - 1, 1, "*");
    }
    try {
      if (curve_.enabled) StartZap();
      router_ = zmq::socket_t(ctx_, zmq::socket_type::router);
      if (curve_.enabled) {
        router_.set(zmq::sockopt::curve_server, 1);
        router_.set(zmq::sockopt::curve_secretkey, curve_.keys.secret_key);
        router_.set(zmq::sockopt::zap_domain, "parallax-ps");
      }
      router_.set(zmq::sockopt::linger, 0);
      router_.set(zmq::sockopt::sndhwm, 0);
      router_.set(zmq::sockopt::rcvhwm, 0);
      // Megabyte messages: large kernel buffers, fewer I/O-thread wake-ups.
      router_.set(zmq::sockopt::sndbuf, 4 << 20);
      router_.set(zmq::sockopt::rcvbuf, 4 << 20);
      // A frame larger than the limit makes ZeroMQ drop the connection; the
      // core answers TOO_LARGE for messages under it whose frames add up over.
      router_.set(zmq::sockopt::maxmsgsize,
                  static_cast<int64_t>(core_->options().limits.max_message_bytes) + 1);
      // Connections that never finish the handshake go; the rest are capped.
      router_.set(zmq::sockopt::handshake_ivl, handshake_timeout_ms_);
      router_.set(zmq::sockopt::backlog, 4096);
      connections_ = std::make_unique<ShardConnections>(ctx_, router_, max_connections_);
      router_.bind(address);
      endpoint_ = router_.get(zmq::sockopt::last_endpoint);
      const std::string inproc = "inproc://px-shard-stop";
      stop_recv_ = zmq::socket_t(ctx_, zmq::socket_type::pair);
      stop_recv_.bind(inproc);
      stop_send_ = zmq::socket_t(ctx_, zmq::socket_type::pair);
      stop_send_.connect(inproc);
    } catch (const zmq::error_t& e) {
      return Unavailable("PS shard cannot bind \"" + listen_ + "\": " + e.what());
    }
    thread_ = std::thread([this] { Loop(); });
    return Status::Ok();
  }

  const std::string& endpoint() const override { return endpoint_; }
  const std::string& curve_public_key() const override { return curve_.keys.public_key; }

  ShardSnapshot Snapshot() const override {
    std::lock_guard<std::mutex> lock(snapshot_mu_);
    return snapshot_;
  }

  void Stop() override {
    if (zap_thread_.joinable()) {
      zap_stop_send_.send(zmq::str_buffer("stop"), zmq::send_flags::none);
      zap_thread_.join();
    }
    if (!thread_.joinable()) return;
    stop_send_.send(zmq::str_buffer("stop"), zmq::send_flags::none);
    thread_.join();
  }

 private:
  // The ZAP handler (ZeroMQ RFC 27): libzmq asks it, on this inproc address,
  // whether each CURVE handshake on the router may complete.
  void StartZap() {
    zap_ = zmq::socket_t(ctx_, zmq::socket_type::rep);
    zap_.set(zmq::sockopt::linger, 0);
    zap_.bind("inproc://zeromq.zap.01");
    zap_stop_recv_ = zmq::socket_t(ctx_, zmq::socket_type::pair);
    zap_stop_recv_.bind("inproc://px-shard-zap-stop");
    zap_stop_send_ = zmq::socket_t(ctx_, zmq::socket_type::pair);
    zap_stop_send_.connect("inproc://px-shard-zap-stop");
    zap_thread_ = std::thread([this] { ZapLoop(); });
  }

  void ZapLoop() {
    std::set<std::string> admitted;  // public keys (Z85)
    zmq::pollitem_t items[2] = {{zap_.handle(), 0, ZMQ_POLLIN, 0},
                                {zap_stop_recv_.handle(), 0, ZMQ_POLLIN, 0}};
    std::vector<zmq::message_t> request;
    while (true) {
      try {
        zmq::poll(items, 2, std::chrono::milliseconds(-1));
        if (items[1].revents & ZMQ_POLLIN) return;
        if (!(items[0].revents & ZMQ_POLLIN)) continue;
        request.clear();
        if (!zmq::recv_multipart(zap_, std::back_inserter(request))) continue;
        // version, request id, domain, address, identity, mechanism, credentials...
        std::string request_id = request.size() > 1 ? request[1].to_string() : "";
        std::string address = request.size() > 3 ? request[3].to_string() : "?";
        bool ok = false;
        std::string key;
        if (request.size() >= 7 && request[0].to_string() == "1.0" &&
            request[5].to_string() == "CURVE") {
          key = Z85FromBinaryKey(request[6].to_string());
          ok = !key.empty() && (admitted.count(key) ||
                                (curve_.authorize && curve_.authorize(key)));
          if (ok) admitted.insert(key);
        }
        if (!ok) {
          PX_LOG(WARNING) << "PS shard refused a connection from " << address
                          << (key.empty() ? std::string(" (no CURVE key)")
                                          : " (client key \"" + key + "\" is not one of this job's)");
        }
        std::array<zmq::const_buffer, 6> reply = {
            zmq::str_buffer("1.0"), zmq::buffer(request_id),
            ok ? zmq::str_buffer("200") : zmq::str_buffer("400"),
            ok ? zmq::str_buffer("OK") : zmq::str_buffer("unknown client key"),
            zmq::buffer(key), zmq::const_buffer(nullptr, 0)};
        zmq::send_multipart(zap_, reply);
      } catch (const zmq::error_t& e) {
        PX_LOG(WARNING) << "PS shard ZAP handler: " << e.what();
        if (e.num() == ETERM) return;
      }
    }
  }

  void Loop() {
    zmq::pollitem_t items[3] = {{router_.handle(), 0, ZMQ_POLLIN, 0},
                                {stop_recv_.handle(), 0, ZMQ_POLLIN, 0},
                                {connections_->monitor().handle(), 0, ZMQ_POLLIN, 0}};
    std::vector<zmq::message_t> msgs;
    std::vector<OutMessage> out;
    std::vector<const void*> data;
    std::vector<size_t> sizes;
    while (true) {
      zmq::poll(items, 3, std::chrono::milliseconds(-1));
      if (items[1].revents & ZMQ_POLLIN) return;
      if (items[2].revents & ZMQ_POLLIN) connections_->OnMonitorEvents();
      if (!(items[0].revents & ZMQ_POLLIN)) continue;
      while (true) {
        msgs.clear();
        std::optional<size_t> got;
        try {
          got = zmq::recv_multipart(router_, std::back_inserter(msgs), zmq::recv_flags::dontwait);
        } catch (const zmq::error_t& e) {
          PX_LOG(WARNING) << "PS shard receive failed: " << e.what();
          break;
        }
        if (!got) break;
        if (msgs.empty()) continue;
        connections_->Spoke(msgs.back().get(ZMQ_SRCFD));
        const std::string identity = msgs[0].to_string();
        data.clear();
        sizes.clear();
        for (size_t i = 1; i < msgs.size(); ++i) {
          data.push_back(msgs[i].data());
          sizes.push_back(msgs[i].size());
        }
        out.clear();
        core_->Handle(identity, data.data(), sizes.data(), data.size(), &out);
        for (auto& m : out) Send(m);
      }
      std::lock_guard<std::mutex> lock(snapshot_mu_);
      snapshot_.stats = core_->stats();
      snapshot_.rows_held = core_->rows_held();
    snapshot_.dynamic_tables = core_->dynamic_stats();
      snapshot_.generation = core_->options().generation;
      snapshot_.lost_updates = core_->lost_updates();
    }
  }

  void Send(OutMessage& m) {
    try {
      router_.send(zmq::buffer(m.identity), zmq::send_flags::sndmore);
      router_.send(ToMessage(std::move(m.frames[0])), zmq::send_flags::sndmore);
      if (m.part_headers) router_.send(ToMessage(std::move(*m.part_headers)), zmq::send_flags::sndmore);
      router_.send(ToMessage(std::move(m.frames[1])), zmq::send_flags::sndmore);
      router_.send(ToMessage(std::move(m.values)), zmq::send_flags::none);
    } catch (const zmq::error_t& e) {
      PX_LOG(WARNING) << "PS shard send failed: " << e.what();
    }
  }

  // Loop thread only once started.
  std::unique_ptr<ShardCore> core_;
  const std::string listen_;
  ShardCurveOptions curve_;  // constant after construction
  const int max_connections_;
  const int handshake_timeout_ms_;
  zmq::context_t ctx_;
  // ZAP thread only once started (zap_stop_send_: Stop() only).
  zmq::socket_t zap_;
  zmq::socket_t zap_stop_recv_;
  zmq::socket_t zap_stop_send_;
  std::thread zap_thread_;
  zmq::socket_t router_;
  std::unique_ptr<ShardConnections> connections_;  // loop thread only once started
  zmq::socket_t stop_recv_;
  std::string endpoint_;  // constant after Bind
  zmq::socket_t stop_send_;  // Stop() only
  std::thread thread_;
  mutable std::mutex snapshot_mu_;
  ShardSnapshot snapshot_;  // GUARDED_BY(snapshot_mu_); written by the loop
};

// The updates the predecessor of `core` (a next generation, its checkpoint
// loaded) applied after that checkpoint; -1 when unknown. Logged either way.
int64_t CountLostUpdates(const ShardCore& core, const std::string& previous_updates_file) {
  const uint32_t shard = core.options().shard, generation = core.options().generation;
  const int64_t loaded = core.UpdatesApplied();
  std::string why;
  if (previous_updates_file.empty()) {
    why = "its predecessor's updates file is not on this host";
  } else if (StatusOr<int64_t> before = UpdatesFile::Read(previous_updates_file); !before.ok()) {
    why = before.status().message();
  } else if (*before < loaded) {
    why = "its predecessor counted " + std::to_string(*before) + " updates, fewer than the " +
          std::to_string(loaded) + " of the checkpoint loaded";
  } else {
    PX_LOG(WARNING) << "PS shard \"" << shard << "\" generation " << generation << ": "
                    << (*before - loaded) << " update(s) its predecessor applied after the "
                    << "checkpoint loaded are lost (it had applied " << *before
                    << ", the checkpoint holds " << loaded << ")";
    return *before - loaded;
  }
  PX_LOG(WARNING) << "PS shard \"" << shard << "\" generation " << generation
                  << ": the updates its predecessor applied after the checkpoint loaded are "
                  << "lost, how many is unknown: " << why;
  return -1;
}

}  // namespace

StatusOr<std::unique_ptr<ShardServer>> ShardServer::Start(ShardServerOptions options) {
  PX_ASSIGN_OR_RETURN(auto core, ShardCore::Create(std::move(options.shard)));
  if (!options.load_checkpoint.empty()) {
    PX_RETURN_IF_ERROR(core->LoadCheckpoint(options.load_checkpoint, options.load_step)
                           .WithContext("loading the checkpoint \"" + options.load_checkpoint + "\""));
  }
  if (core->options().generation > 1) {
    core->set_lost_updates(CountLostUpdates(*core, options.previous_updates_file));
  }
  if (!options.updates_file.empty()) {
    PX_ASSIGN_OR_RETURN(auto file, UpdatesFile::Create(options.updates_file, 0));
    core->AttachUpdatesFile(std::move(file));
  }
  if (options.curve.enabled && options.curve.keys.public_key.empty()) {
    PX_ASSIGN_OR_RETURN(options.curve.keys, NewCurveKeyPair());
  }
  auto server = std::make_unique<ZmqShardServer>(std::move(core), options.listen,
                                                 std::move(options.curve),
                                                 options.max_connections,
                                                 options.handshake_timeout_ms);
  PX_RETURN_IF_ERROR(server->Bind());
  return std::unique_ptr<ShardServer>(std::move(server));
}

}  // namespace parallax::ps
