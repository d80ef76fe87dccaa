#include "core/ps/client.h"

#include <algorithm>
#include <array>
#include <atomic>
#include <condition_variable>
#include <cstring>
#include <functional>
#include <mutex>
#include <optional>
#include <thread>
#include <unordered_map>

#include <zmq.hpp>
#include <zmq_addon.hpp>

#include "core/base/logging.h"
#include "core/ps/aggregate.h"
#include "core/ps/lost_shards.h"
#include "core/ps/row_state.h"
#include "core/ps/shm_region.h"
#include "core/ps/wire.h"

namespace parallax::ps {
namespace {

constexpr uint32_t kStopLoop = 0xffffffffu;
// A resolver thread finished (ZmqPsClient::TakeRecoveries).
constexpr uint32_t kRecoveryDone = 0xfffffffeu;
constexpr uint32_t kNoPos = 0xffffffffu;
constexpr int kSocketBufferBytes = 4 << 20;
// request_id of ATTACH requests (tickets count up from 1 and never reach it).
constexpr uint64_t kAttachRequestId = ~uint64_t{0};

struct Part {
  uint32_t partition = 0;  // data ops: partition; control ops: shard
  uint32_t shard = 0;
  std::vector<uint32_t> uniq;  // indexes into the distinct ids, in wire order
  // Offsets in the shard's shared memory region (none: values inline).
  std::optional<uint64_t> shm_values = std::nullopt;
  std::optional<uint64_t> shm_reply = std::nullopt;
  bool shm() const { return shm_values || shm_reply; }
};

// A shard's shared memory region and what of it is in use.
struct ShmLink {
  std::unique_ptr<ShmRegion> region;
  std::unique_ptr<ShmArena> arena;   // guarded by the client's shm_mu_
  std::atomic<bool> ready{false};    // the shard attached it
};

// One ticket. Written by the caller before it is registered; afterwards the
// loop thread writes `out`/`texts` and, under mu_, `remaining`/`done`/`status`.
struct Request {
  Op op = Op::kPull;
  const VariableSpec* var = nullptr;
  size_t var_index = 0;
  // Floats of a row on the wire: var->dim, or its row state's width
  // (PullState, WriteState: ROW_STATE, float32, never in shared memory).
  uint32_t width = 0;
  bool row_state = false;
  // PullChecked: the bound sent and where the versions go (per position);
  // null versions: not a checked pull.
  int64_t check_bound = 0;
  std::vector<uint32_t>* versions = nullptr;
  bool checked() const { return versions != nullptr; }
  std::vector<float>* out = nullptr;
  std::vector<std::string>* texts = nullptr;
  std::vector<uint32_t> first_pos;  // per distinct id: its first position
  std::vector<uint32_t> index_of;   // per position: distinct id index
  bool has_duplicates = false;
  std::vector<Part> parts;
  std::vector<int32_t> part_of;  // partition (or shard) → index into parts
  size_t remaining = 0;
  bool done = false;
  std::chrono::steady_clock::time_point submitted;  // only with on_complete
  Status status;
};

StatusCode CodeFor(ErrorCode code) {
  switch (code) {
    case ErrorCode::kBadClock: return StatusCode::kFailedPrecondition;
    case ErrorCode::kCheckpoint: return StatusCode::kFailedPrecondition;
    case ErrorCode::kStaleAttempt: return StatusCode::kPermissionDenied;
    case ErrorCode::kStaleGeneration: return StatusCode::kPermissionDenied;
    case ErrorCode::kTableFull: return StatusCode::kFailedPrecondition;
    case ErrorCode::kInternal: return StatusCode::kInternal;
    default: return StatusCode::kInvalidArgument;  // BAD_SETTING among them
  }
}

zmq::message_t HeaderMessage(const Header& h) {
  zmq::message_t m(ps_wire::kHeaderSize);
  ps_wire::WriteHeader(h, m.data());
  return m;
}

class ZmqPsClient final : public PsClient {
 public:
  explicit ZmqPsClient(PsClientOptions options) : options_(std::move(options)), ctx_(1) {
    last_version_.resize(options_.plan.variables.size());
    for (size_t i = 0; i < last_version_.size(); ++i)
      last_version_[i].assign(options_.plan.variables[i].partitions, 0);
    last_resets_.resize(last_version_.size());
    for (size_t i = 0; i < last_resets_.size(); ++i)
      last_resets_[i].assign(options_.plan.variables[i].partitions, 0);
  }

  ~ZmqPsClient() override {
    if (thread_.joinable()) {
      {
        std::lock_guard<std::mutex> lock(send_mu_);
        uint32_t stop = kStopLoop;
        cmd_send_.send(zmq::const_buffer(&stop, sizeof stop), zmq::send_flags::none);
      }
      thread_.join();
    }
    lost_.reset();  // joins its lookups, which may still wake the stopped loop
  }

  Status Start() {
    const auto& plan = options_.plan;
    if (options_.shard_endpoints.size() != plan.num_shards)
      return InvalidArgument("PS client: " + std::to_string(options_.shard_endpoints.size()) +
                             " shard endpoints given but the plan has " +
                             std::to_string(plan.num_shards) + " shards");
    if (!options_.shard_generations.empty() && options_.shard_generations.size() != plan.num_shards)
      return InvalidArgument("PS client: " + std::to_string(options_.shard_generations.size()) +
                             " shard generations given but the plan has " +
                             std::to_string(plan.num_shards) + " shards");
    if (options_.resolve_shard && options_.shared_memory)
      return InvalidArgument(
          "PS client: shard recovery and shared memory do not go together (a region is mapped "
          "by one shard process); turn one of them off");
    lost_ = std::make_unique<LostShards>(options_, plan.num_shards, [this] {
      std::lock_guard<std::mutex> lock(send_mu_);
      uint32_t done = kRecoveryDone;
      cmd_send_.send(zmq::const_buffer(&done, sizeof done), zmq::send_flags::none);
    });
    const bool curve = !options_.shard_curve_keys.empty();
    if (curve && (options_.shard_curve_keys.size() != plan.num_shards ||
                  options_.curve_keys.public_key.empty())) {
      return InvalidArgument("PS client: CURVE needs one public key per shard (" +
                             std::to_string(options_.shard_curve_keys.size()) + " given for " +
                             std::to_string(plan.num_shards) + " shards) and a client key pair");
    }
    try {
      const std::string inproc = "inproc://px-ps-client-" + std::to_string(reinterpret_cast<uintptr_t>(this));
      cmd_recv_ = zmq::socket_t(ctx_, zmq::socket_type::pull);
      cmd_recv_.set(zmq::sockopt::rcvhwm, 0);
      cmd_recv_.bind(inproc);
      cmd_send_ = zmq::socket_t(ctx_, zmq::socket_type::push);
      cmd_send_.set(zmq::sockopt::sndhwm, 0);
      cmd_send_.set(zmq::sockopt::linger, 0);
      cmd_send_.connect(inproc);
      dealers_.resize(plan.num_shards);
      monitors_.resize(plan.num_shards);
      for (uint32_t shard = 0; shard < plan.num_shards; ++shard) {
        Connect(shard, options_.shard_endpoints[shard],
                curve ? options_.shard_curve_keys[shard] : std::string());
      }
      shm_.resize(options_.shard_endpoints.size());
      for (size_t shard = 0; shard < options_.shard_endpoints.size(); ++shard) {
        shm_[shard] = std::make_unique<ShmLink>();
        if (options_.shared_memory) StartAttach(static_cast<uint32_t>(shard));
      }
    } catch (const zmq::error_t& e) {
      return InvalidArgument(std::string("PS client: cannot set up sockets: ") + e.what());
    }
    thread_ = std::thread([this] { Loop(); });
    return Status::Ok();
  }

  // (Re)opens the DEALER socket of `shard` to `endpoint` (Start() or the
  // loop thread). With recovery, a monitor reports the connection dropping.
  // Throws zmq::error_t.
  void Connect(uint32_t shard, const std::string& endpoint, const std::string& curve_key) {
    zmq::socket_t s(ctx_, zmq::socket_type::dealer);
    if (!curve_key.empty()) {
      s.set(zmq::sockopt::curve_serverkey, curve_key);
      s.set(zmq::sockopt::curve_publickey, options_.curve_keys.public_key);
      s.set(zmq::sockopt::curve_secretkey, options_.curve_keys.secret_key);
    }
    s.set(zmq::sockopt::linger, 0);
    s.set(zmq::sockopt::sndhwm, 0);
    s.set(zmq::sockopt::rcvhwm, 0);
    // Rows travel in megabyte messages: large kernel buffers mean fewer
    // wake-ups of ZeroMQ's I/O threads per message (capped by the
    // kernel's wmem_max/rmem_max).
    s.set(zmq::sockopt::sndbuf, kSocketBufferBytes);
    s.set(zmq::sockopt::rcvbuf, kSocketBufferBytes);
    if (options_.resolve_shard) {
      // A peer whose host went silent drops like one that died.
      s.set(zmq::sockopt::heartbeat_ivl, 1000);
      s.set(zmq::sockopt::heartbeat_timeout, 10000);
      const std::string addr = "inproc://px-ps-monitor-" +
                               std::to_string(reinterpret_cast<uintptr_t>(this)) + "-" +
                               std::to_string(shard) + "-" + std::to_string(++monitor_serial_);
      if (zmq_socket_monitor(s.handle(), addr.c_str(), ZMQ_EVENT_DISCONNECTED) != 0)
        throw zmq::error_t();
      zmq::socket_t mon(ctx_, zmq::socket_type::pair);
      mon.set(zmq::sockopt::linger, 0);
      mon.connect(addr);
      monitors_[shard] = std::move(mon);
    }
    s.connect(endpoint);
    dealers_[shard] = std::move(s);
  }

  // Makes shard's region and sends ATTACH ahead of any request (Start()
  // only: the loop thread does not run yet). The region is used once the
  // shard answers.
  void StartAttach(uint32_t shard) {
    auto region = ShmRegion::Create(ShmRegion::NewName(), options_.shared_memory_bytes);
    if (!region.ok()) {
      PX_LOG(WARNING) << "PS shard " << shard << ": no shared memory, values go over the socket: "
                      << region.status().message();
      return;
    }
    ShmLink& link = *shm_[shard];
    link.region = std::move(region).value();
    link.arena = std::make_unique<ShmArena>(ShmRegion::kHeaderBytes, link.region->size());
    Header h;
    h.op = static_cast<uint8_t>(Op::kAttach);
    h.partition = shard;
    h.worker = options_.worker;
    h.request_id = kAttachRequestId;
    h.attempt = options_.attempt;
    const std::string& name = link.region->name();
    std::array<zmq::message_t, 3> frames;
    frames[0] = HeaderMessage(h);
    frames[1] = zmq::message_t(name.data(), name.size());
    CountFrames(h.op, frames[0].size() + frames[1].size(), /*sent=*/true);
    messages_sent_.fetch_add(1, std::memory_order_relaxed);
    dealers_[shard].send(frames[0], zmq::send_flags::sndmore);
    dealers_[shard].send(frames[1], zmq::send_flags::sndmore);
    dealers_[shard].send(frames[2], zmq::send_flags::none);
  }

  // Loop thread: the shard's answer to ATTACH.
  void HandleAttachReply(uint32_t shard, const MessageView& m) {
    ShmLink& link = *shm_[shard];
    if (link.region == nullptr) return;
    if (m.header.op == static_cast<uint8_t>(Op::kAttach)) {
      link.region->Unlink();  // mapped on both sides: the name is not needed any more
      link.ready.store(true, std::memory_order_release);
      return;
    }
    // Expected for a shard on another machine: it cannot open the name.
    PX_LOG(INFO) << "PS shard " << shard << " at " << options_.shard_endpoints[shard]
                 << " did not map this worker's shared memory, so values go over the socket: " << m.text;
    link.region.reset();  // never used: ready stays false
    link.arena.reset();
  }

  // Reserves a part's spans in its shard's region (both or neither); false:
  // send the values inline.
  bool ReserveShm(Part& part, size_t bytes, bool values, bool reply) {
    ShmLink& link = *shm_[part.shard];
    if (bytes == 0 || !link.ready.load(std::memory_order_acquire)) return false;
    std::lock_guard<std::mutex> lock(shm_mu_);
    std::optional<uint64_t> v, r;
    if (values && !(v = link.arena->Allocate(bytes))) return false;
    if (reply && !(r = link.arena->Allocate(bytes))) {
      if (v) link.arena->Free(*v);
      return false;
    }
    part.shm_values = v;
    part.shm_reply = r;
    return true;
  }

  void ReleaseShm(const Part& part) {
    if (!part.shm()) return;
    ShmLink& link = *shm_[part.shard];
    std::lock_guard<std::mutex> lock(shm_mu_);
    if (part.shm_values) link.arena->Free(*part.shm_values);
    if (part.shm_reply) link.arena->Free(*part.shm_reply);
  }

  StatusOr<Ticket> Pull(uint32_t var, std::span<const int64_t> ids, int64_t clock,
                        std::vector<float>* out) override {
    return SubmitData(Op::kPull, var, ids, {}, clock, out);
  }
  StatusOr<Ticket> PullChecked(uint32_t var, std::span<const int64_t> ids,
                               const RowVersionCheck& check, int64_t clock,
                               std::vector<float>* out) override {
    return SubmitData(Op::kPull, var, ids, {}, clock, out, /*row_state=*/false, &check);
  }
  StatusOr<Ticket> Push(uint32_t var, std::span<const int64_t> ids, std::span<const float> grads,
                        int64_t clock) override {
    return SubmitData(Op::kPush, var, ids, grads, clock, nullptr);
  }
  StatusOr<Ticket> PushPull(uint32_t var, std::span<const int64_t> ids,
                            std::span<const float> grads, int64_t clock,
                            std::vector<float>* out) override {
    return SubmitData(Op::kPushPull, var, ids, grads, clock, out);
  }
  StatusOr<Ticket> Write(uint32_t var, std::span<const int64_t> ids,
                         std::span<const float> values) override {
    return SubmitData(Op::kWrite, var, ids, values, 0, nullptr);
  }
  StatusOr<Ticket> PullState(uint32_t var, std::span<const int64_t> ids, int64_t clock,
                             std::vector<float>* out) override {
    return SubmitData(Op::kPull, var, ids, {}, clock, out, /*row_state=*/true);
  }
  StatusOr<Ticket> WriteState(uint32_t var, std::span<const int64_t> ids,
                              std::span<const float> states) override {
    return SubmitData(Op::kWrite, var, ids, states, 0, nullptr, /*row_state=*/true);
  }
  StatusOr<Ticket> Clock(int64_t clock) override { return SubmitControl(Op::kClock, "", clock, nullptr); }
  StatusOr<Ticket> Save(const std::string& dir, int64_t step) override {
    return SubmitControl(Op::kSave, dir, step, nullptr);
  }
  StatusOr<Ticket> Load(const std::string& dir, int64_t step) override {
    if (step < 0 || step > ps_wire::kMaxClock)
      return InvalidArgument("LOAD: step " + std::to_string(step) + " is out of range");
    return SubmitControl(Op::kLoad, dir, step, nullptr);
  }
  StatusOr<Ticket> Stats(std::vector<std::string>* out) override {
    out->assign(options_.plan.num_shards, "");
    return SubmitControl(Op::kStats, "", 0, out);
  }
  StatusOr<Ticket> Set(uint32_t var, const std::string& name, const std::string& value,
                       int64_t clock) override {
    if (var != ps_wire::kAllVariables && options_.plan.FindVariable(var) == nullptr)
      return InvalidArgument("SET " + name + ": variable " + std::to_string(var) + " is not on the PS");
    if (clock < 0 || clock > ps_wire::kMaxClock)
      return InvalidArgument("SET " + name + ": step " + std::to_string(clock) + " is out of range");
    return SubmitControl(Op::kSet, FormatSetting(name, value), clock, nullptr, var);
  }

  StatusOr<Ticket> SetConsistency(int64_t from, const ConsistencyMode& mode) override {
    if (from < 0 || from > ps_wire::kMaxClock)
      return InvalidArgument("SET consistency: step " + std::to_string(from) + " is out of range");
    {
      std::lock_guard<std::mutex> lock(mu_);
      schedule_.Set(from, mode);
    }
    return SubmitControl(Op::kSet, FormatSetting("consistency", FormatConsistencyMode(mode)), from,
                         nullptr, ps_wire::kAllVariables);
  }
  ConsistencyMode ConsistencyAt(int64_t step) const override {
    std::lock_guard<std::mutex> lock(mu_);
    return schedule_.At(step);
  }
  ConsistencySchedule consistency() const override {
    std::lock_guard<std::mutex> lock(mu_);
    return schedule_;
  }

  Status Wait(Ticket ticket, Deadline deadline) override {
    std::unique_lock<std::mutex> lock(mu_);
    auto it = requests_.find(ticket);
    if (it == requests_.end())
      return NotFound("PS ticket " + std::to_string(ticket) + " is unknown or already waited for");
    Request* r = it->second.get();
    if (!cv_.wait_until(lock, deadline, [r] { return r->done; })) {
      return DeadlineExceeded("PS ticket " + std::to_string(ticket) + ": " +
                              std::to_string(r->remaining) + " of " +
                              std::to_string(r->parts.size()) + " shard replies still outstanding");
    }
    Status s = r->status;
    requests_.erase(ticket);
    return s;
  }

  const PsPlan& plan() const override { return options_.plan; }

  std::vector<uint16_t> PartitionResets(uint32_t var) const override {
    const VariableSpec* spec = options_.plan.FindVariable(var);
    if (spec == nullptr) return {};
    std::lock_guard<std::mutex> lock(mu_);
    return last_resets_[static_cast<size_t>(spec - options_.plan.variables.data())];
  }

 private:
  // INVALID_ARGUMENT naming the variable and the bad id or size.
  StatusOr<const VariableSpec*> CheckData(Op op, uint32_t var_id, std::span<const int64_t> ids,
                                          std::span<const float> grads, bool row_state) const {
    const VariableSpec* var = options_.plan.FindVariable(var_id);
    if (var == nullptr)
      return InvalidArgument("PS: variable " + std::to_string(var_id) + " is not in the plan");
    if (row_state && var->dynamic)
      return InvalidArgument("PS row state of \"" + var->name +
                             "\": a dynamic table's rows are not handed over");
    const size_t width = row_state ? RowStateWidth(*var) : var->dim;
    if (op != Op::kPull && grads.size() != ids.size() * width)
      return InvalidArgument("PS " + std::string(OpName(static_cast<uint8_t>(op))) + " to \"" +
                             var->name + "\": " + std::to_string(grads.size()) + " values for " +
                             std::to_string(ids.size()) + " ids of " +
                             (row_state ? "row-state width " : "dim ") + std::to_string(width));
    if (ids.size() >= kNoPos) return InvalidArgument("PS: too many ids in one request");
    // A dynamic table's ids are any 64-bit values.
    for (size_t i = 0; i < ids.size() && !var->dynamic; ++i) {
      if (ids[i] < 0 || ids[i] >= var->rows)
        return InvalidArgument("PS: id " + std::to_string(ids[i]) + " at position " +
                               std::to_string(i) + " is outside variable \"" + var->name +
                               "\" (rows 0.." + std::to_string(var->rows - 1) + ")");
    }
    return var;
  }

  // The request's parts: one per partition its distinct ids touch (every
  // partition for a sync push: the shard counts one contribution per worker
  // and step, even an empty one), each listing its distinct ids.
  void SplitByPartition(const Dedupe& d, bool all_partitions, Request* r) const {
    const VariableSpec& var = *r->var;
    r->part_of.assign(var.partitions, -1);
    if (all_partitions) {
      for (uint32_t p = 0; p < var.partitions; ++p) {
        r->part_of[p] = static_cast<int32_t>(p);
        r->parts.push_back(Part{p, ShardOf(var, p), {}});
      }
    }
    const Partitioner partition_of(var);
    for (size_t u = 0; u < d.unique.size(); ++u) {
      const uint32_t p = partition_of(d.unique[u]);
      if (r->part_of[p] < 0) {
        r->part_of[p] = static_cast<int32_t>(r->parts.size());
        r->parts.push_back(Part{p, ShardOf(var, p), {}});
      }
      r->parts[r->part_of[p]].uniq.push_back(static_cast<uint32_t>(u));
    }
  }

  // Every part's id and value frames (or its shared-memory references),
  // built before the request is registered so the loop never sees a
  // half-built one. `grad_of(u)` is distinct id u's gradient row.
  // (A template, not a std::function: it is called for every row.)
  template <typename GradOf>
  std::vector<std::array<zmq::message_t, 3>> BuildFrames(Request& r, const Dedupe& d, bool pushes,
                                                         bool replies, const GradOf& grad_of,
                                                         std::span<const uint32_t> held = {}) {
    const uint32_t dim = r.width;
    const bool fp16 = options_.plan.value_encoding == ValueEncoding::kFp16 && !r.row_state;
    const size_t vbytes = ValueBytes(fp16 ? ps_wire::kFlagFp16 : 0);
    std::vector<std::array<zmq::message_t, 3>> frames(r.parts.size());
    for (size_t k = 0; k < r.parts.size(); ++k) {
      Part& part = r.parts[k];
      const size_t count = part.uniq.size();
      zmq::message_t id_msg(count * sizeof(int64_t));
      auto* idp = static_cast<char*>(id_msg.data());
      for (size_t j = 0; j < count; ++j) std::memcpy(idp + j * 8, &d.unique[part.uniq[j]], 8);
      if (r.checked()) {  // the versions held, in wire order; never in shared memory
        zmq::message_t held_msg(count * sizeof(uint32_t));
        auto* hp = static_cast<char*>(held_msg.data());
        for (size_t j = 0; j < count; ++j)
          std::memcpy(hp + j * 4, &held[r.first_pos[part.uniq[j]]], 4);
        frames[k][1] = std::move(id_msg);
        frames[k][2] = std::move(held_msg);
        continue;
      }
      const bool shm = !r.row_state && ReserveShm(part, count * dim * vbytes, pushes, replies);
      zmq::message_t val_msg(shm ? ps_wire::kShmRefSize : pushes ? count * dim * vbytes : 0);
      if (shm) {
        ps_wire::ShmRef ref;
        ref.values = part.shm_values.value_or(0);
        ref.reply = part.shm_reply.value_or(0);
        std::memcpy(val_msg.data(), &ref, sizeof ref);
      }
      if (pushes) {
        auto* vp = shm ? shm_[part.shard]->region->data() + *part.shm_values
                       : static_cast<char*>(val_msg.data());
        for (size_t j = 0; j < count; ++j) {
          EncodeValues(grad_of(part.uniq[j]), dim, fp16, vp + j * dim * vbytes);
        }
      }
      frames[k][1] = std::move(id_msg);
      frames[k][2] = std::move(val_msg);
    }
    return frames;
  }

  // A data request checked and split, its frames built (headers not yet):
  // what SubmitData and Batch send.
  struct Prepared {
    std::unique_ptr<Request> request;
    std::vector<std::array<zmq::message_t, 3>> frames;  // by part
    uint32_t var_id = 0;
  };

  StatusOr<Prepared> Prepare(Op op, uint32_t var_id, std::span<const int64_t> ids,
                             std::span<const float> grads, int64_t clock,
                             std::vector<float>* out, bool row_state = false,
                             const RowVersionCheck* check = nullptr) {
    PX_ASSIGN_OR_RETURN(const VariableSpec* var, CheckData(op, var_id, ids, grads, row_state));
    if (check != nullptr) {
      const std::string what = "PS pull of \"" + var->name + "\" with row versions: ";
      if (op != Op::kPull || out == nullptr || check->versions == nullptr)
        return InvalidArgument(what + "only a pull with rows and versions to fill checks versions");
      if (check->held.size() != ids.size())
        return InvalidArgument(what + std::to_string(check->held.size()) + " versions held for " +
                               std::to_string(ids.size()) + " ids");
      if (check->bound < 0 || check->bound > ps_wire::kMaxClock)
        return InvalidArgument(what + "bound " + std::to_string(check->bound) + " is out of range");
    }
    const PsPlan& plan = options_.plan;
    const uint32_t dim = row_state ? RowStateWidth(*var) : var->dim;
    const bool pushes = op != Op::kPull;
    Prepared prepared;
    prepared.var_id = var_id;
    prepared.request = std::make_unique<Request>();
    Request& r = *prepared.request;
    r.op = op;
    r.var = var;
    r.width = dim;
    r.row_state = row_state;
    if (check != nullptr) {
      r.check_bound = check->bound;
      r.versions = check->versions;
    }
    if (options_.on_complete) r.submitted = std::chrono::steady_clock::now();
    r.var_index = static_cast<size_t>(var - plan.variables.data());
    r.out = out;
    Dedupe d = DedupeIdsFirstSeen(ids, &r.first_pos);
    r.has_duplicates = d.unique.size() != ids.size();
    if ((op == Op::kWrite || check != nullptr) && r.has_duplicates)
      return InvalidArgument("PS " + std::string(check != nullptr ? "checked pull of" : "write to") +
                             " \"" + var->name + "\": repeated ids (each row once)");
    if (check != nullptr) check->versions->assign(ids.size(), ps_wire::kRowFresh);
    const bool one_per_partition = op != Op::kWrite && pushes &&
                                   ConsistencyAt(clock).consistency == Consistency::kSync;
    SplitByPartition(d, one_per_partition, &r);
    // Gradient of each distinct id: the caller's row, or the sum of its repeats.
    std::vector<float> summed;
    if (pushes && r.has_duplicates) {
      summed.assign(d.unique.size() * dim, 0.0f);
      for (size_t i = 0; i < ids.size(); ++i) {
        float* dst = summed.data() + size_t{d.index_of[i]} * dim;
        const float* src = grads.data() + i * dim;
        for (uint32_t j = 0; j < dim; ++j) dst[j] += src[j];
      }
    }
    if (out != nullptr) out->resize(ids.size() * dim);
    prepared.frames = BuildFrames(r, d, pushes, out != nullptr, [&](uint32_t u) {
      return r.has_duplicates ? summed.data() + size_t{u} * dim
                              : grads.data() + size_t{r.first_pos[u]} * dim;
    }, check != nullptr ? check->held : std::span<const uint32_t>{});
    if (r.has_duplicates) r.index_of = std::move(d.index_of);
    return prepared;
  }

  // Registers a prepared request under a new ticket and writes its parts'
  // headers (the versions last pulled are read under the same lock).
  Ticket Register(Prepared& p, int64_t clock) {
    Request& r = *p.request;
    const Op op = r.op;
    Ticket ticket;
    std::vector<int64_t> versions(r.parts.size());
    {
      std::lock_guard<std::mutex> lock(mu_);
      ticket = ++next_ticket_;
      for (size_t k = 0; k < r.parts.size(); ++k)
        versions[k] = last_version_[r.var_index][r.parts[k].partition];
      r.remaining = r.parts.size();
      r.done = r.remaining == 0;
      requests_.emplace(ticket, std::move(p.request));
    }
    for (size_t k = 0; k < p.frames.size(); ++k) {
      Header h;
      h.op = static_cast<uint8_t>(op);
      h.flags = r.row_state ? ps_wire::kFlagRowState
                : options_.plan.value_encoding == ValueEncoding::kFp16 ? ps_wire::kFlagFp16
                                                                       : 0;
      if (r.parts[k].shm()) h.flags |= ps_wire::kFlagShm;
      if (r.checked()) h.flags |= ps_wire::kFlagRowVersions;
      h.variable = p.var_id;
      h.partition = r.parts[k].partition;
      h.worker = options_.worker;
      h.count = static_cast<uint32_t>(r.parts[k].uniq.size());
      h.dim = r.width;
      h.request_id = ticket;
      h.clock = clock;
      h.version_seen = r.checked() ? r.check_bound : versions[k];
      h.attempt = options_.attempt;
      p.frames[k][0] = HeaderMessage(h);
    }
    return ticket;
  }

  StatusOr<Ticket> SubmitData(Op op, uint32_t var_id, std::span<const int64_t> ids,
                              std::span<const float> grads, int64_t clock, std::vector<float>* out,
                              bool row_state = false, const RowVersionCheck* check = nullptr) {
    PX_ASSIGN_OR_RETURN(Prepared p, Prepare(op, var_id, ids, grads, clock, out, row_state, check));
    const Request& r = *p.request;  // registered below; owned by requests_ then
    const Ticket ticket = Register(p, clock);
    for (size_t k = 0; k < p.frames.size(); ++k) SendToLoop(r.parts[k].shard, p.frames[k]);
    return ticket;
  }

  StatusOr<std::vector<Ticket>> Batch(std::span<const BatchCall> calls, int64_t clock) override {
    std::vector<Prepared> prepared;
    prepared.reserve(calls.size());
    for (size_t c = 0; c < calls.size(); ++c) {
      const BatchCall& call = calls[c];
      const Op op = call.kind == BatchCall::Kind::kPull       ? Op::kPull
                    : call.kind == BatchCall::Kind::kPush     ? Op::kPush
                    : call.kind == BatchCall::Kind::kPushPull ? Op::kPushPull
                                                              : Op::kWrite;
      if ((op == Op::kPull || op == Op::kPushPull) != (call.out != nullptr)) {
        Unprepare(prepared);
        return InvalidArgument("PS batch call " + std::to_string(c) + ": " + OpName(static_cast<uint8_t>(op)) +
                               (call.out == nullptr ? " needs" : " takes no") + " output buffer");
      }
      StatusOr<Prepared> p = Prepare(op, call.var, call.ids, call.grads,
                                     op == Op::kWrite ? 0 : clock, call.out,
                                     /*row_state=*/false, call.check);
      if (!p.ok()) {
        Unprepare(prepared);
        return p.status().WithContext("PS batch call " + std::to_string(c));
      }
      prepared.push_back(std::move(p).value());
    }
    std::vector<Ticket> tickets;
    tickets.reserve(prepared.size());
    // Each shard's parts, in the calls' order.
    std::vector<std::vector<zmq::message_t>> by_shard(options_.plan.num_shards);
    for (Prepared& p : prepared) {
      const Request& r = *p.request;
      tickets.push_back(Register(p, r.op == Op::kWrite ? 0 : clock));
      for (size_t k = 0; k < p.frames.size(); ++k) {
        auto& f = by_shard[r.parts[k].shard];
        for (auto& frame : p.frames[k]) f.push_back(std::move(frame));
      }
    }
    for (uint32_t shard = 0; shard < by_shard.size(); ++shard) SendBatches(shard, by_shard[shard], clock);
    return tickets;
  }

  // Frees what Prepare reserved of requests that will not be sent.
  void Unprepare(std::vector<Prepared>& prepared) {
    for (Prepared& p : prepared)
      for (const Part& part : p.request->parts) ReleaseShm(part);
  }

  // Sends a shard's parts (3 frames each) as batches of at most
  // max_batch_bytes; a batch of one part goes as a plain version-1 message.
  void SendBatches(uint32_t shard, std::vector<zmq::message_t>& parts, int64_t clock) {
    size_t begin = 0;
    while (begin < parts.size()) {
      size_t end = begin, bytes = ps_wire::kHeaderSize;
      while (end < parts.size()) {
        const size_t part_bytes = parts[end].size() + parts[end + 1].size() + parts[end + 2].size();
        if (end > begin && bytes + part_bytes > options_.max_batch_bytes) break;
        bytes += part_bytes;
        end += 3;
      }
      const size_t n = (end - begin) / 3;
      std::vector<zmq::message_t> frames;
      if (n == 1) {
        for (size_t i = begin; i < end; ++i) frames.push_back(std::move(parts[i]));
      } else {
        Header h;
        h.version = ps_wire::kBatchVersion;
        h.op = ps_wire::kOpBatch;
        h.partition = shard;
        h.worker = options_.worker;
        h.count = static_cast<uint32_t>(n);
        h.clock = clock;
        h.attempt = options_.attempt;
        {
          std::lock_guard<std::mutex> lock(mu_);
          h.request_id = ++next_ticket_;  // never registered: names the batch
        }
        frames.push_back(HeaderMessage(h));
        // The parts' headers, ids and values, each one after another.
        size_t sizes[3] = {0, 0, 0};
        for (size_t i = begin; i < end; ++i) sizes[(i - begin) % 3] += parts[i].size();
        for (size_t f = 0; f < 3; ++f) {
          zmq::message_t joined(sizes[f]);
          char* at = static_cast<char*>(joined.data());
          for (size_t i = begin + f; i < end; i += 3) {
            if (parts[i].size() > 0) std::memcpy(at, parts[i].data(), parts[i].size());
            at += parts[i].size();
          }
          frames.push_back(std::move(joined));
        }
      }
      SendToLoop(shard, frames.data(), frames.size());
      begin = end;
    }
  }

  StatusOr<Ticket> SubmitControl(Op op, const std::string& text, int64_t clock,
                                 std::vector<std::string>* texts, uint32_t variable = 0) {
    const uint32_t num_shards = options_.plan.num_shards;
    auto req = std::make_unique<Request>();
    Request& r = *req;
    r.op = op;
    r.texts = texts;
    if (options_.on_complete) r.submitted = std::chrono::steady_clock::now();
    r.part_of.assign(num_shards, -1);
    for (uint32_t s = 0; s < num_shards; ++s) {
      r.part_of[s] = static_cast<int32_t>(s);
      r.parts.push_back(Part{s, s, {}});
    }
    Ticket ticket;
    {
      std::lock_guard<std::mutex> lock(mu_);
      ticket = ++next_ticket_;
      r.remaining = num_shards;
      requests_.emplace(ticket, std::move(req));
    }
    for (uint32_t s = 0; s < num_shards; ++s) {
      Header h;
      h.op = static_cast<uint8_t>(op);
      h.variable = variable;
      h.partition = s;
      h.worker = options_.worker;
      h.request_id = ticket;
      h.clock = clock;
      h.attempt = options_.attempt;
      std::array<zmq::message_t, 3> frames;
      frames[0] = HeaderMessage(h);
      frames[1] = zmq::message_t(text.data(), text.size());
      SendToLoop(s, frames);
    }
    return ticket;
  }

  // Hands a message to the loop thread, which owns the shard sockets.
  // inproc moves message bodies without copying them.
  void SendToLoop(uint32_t shard, zmq::message_t* frames, size_t n) {
    std::lock_guard<std::mutex> lock(send_mu_);
    cmd_send_.send(zmq::const_buffer(&shard, sizeof shard), zmq::send_flags::sndmore);
    for (size_t i = 0; i < n; ++i)
      cmd_send_.send(frames[i], i + 1 < n ? zmq::send_flags::sndmore : zmq::send_flags::none);
  }
  void SendToLoop(uint32_t shard, std::array<zmq::message_t, 3>& frames) {
    SendToLoop(shard, frames.data(), frames.size());
  }

  // Loop thread: the sockets to poll: commands, every dealer, and with
  // recovery every dealer's monitor (rebuilt when a dealer is replaced).
  std::vector<zmq::pollitem_t> PollItems() {
    std::vector<zmq::pollitem_t> items;
    items.push_back({cmd_recv_.handle(), 0, ZMQ_POLLIN, 0});
    for (auto& d : dealers_) items.push_back({d.handle(), 0, ZMQ_POLLIN, 0});
    if (options_.resolve_shard)
      for (auto& m : monitors_) items.push_back({m.handle(), 0, ZMQ_POLLIN, 0});
    return items;
  }

  void Loop() {
    std::vector<zmq::pollitem_t> items = PollItems();
    std::vector<zmq::message_t> msgs;
    const size_t num_shards = dealers_.size();
    while (true) {
      zmq::poll(items.data(), items.size(), std::chrono::milliseconds(-1));
      bool replaced = false;
      if (items[0].revents & ZMQ_POLLIN) {
        while (true) {
          msgs.clear();
          auto got = zmq::recv_multipart(cmd_recv_, std::back_inserter(msgs), zmq::recv_flags::dontwait);
          if (!got) break;
          uint32_t shard;
          std::memcpy(&shard, msgs[0].data(), sizeof shard);
          if (shard == kStopLoop) return;
          if (shard == kRecoveryDone) {
            replaced |= TakeRecoveries();
            continue;
          }
          std::vector<zmq::message_t> frames(std::make_move_iterator(msgs.begin() + 1),
                                             std::make_move_iterator(msgs.end()));
          SendToShard(shard, frames);
        }
      }
      for (size_t s = 0; s < num_shards; ++s) {
        if (!(items[s + 1].revents & ZMQ_POLLIN)) continue;
        while (true) {
          msgs.clear();
          auto got = zmq::recv_multipart(dealers_[s], std::back_inserter(msgs), zmq::recv_flags::dontwait);
          if (!got) break;
          HandleReply(static_cast<uint32_t>(s), msgs);
        }
      }
      if (options_.resolve_shard) {
        for (size_t s = 0; s < num_shards; ++s) {
          if (!(items[1 + num_shards + s].revents & ZMQ_POLLIN)) continue;
          while (true) {
            msgs.clear();
            auto got = zmq::recv_multipart(monitors_[s], std::back_inserter(msgs), zmq::recv_flags::dontwait);
            if (!got) break;
            lost_->Lose(static_cast<uint32_t>(s), "its connection dropped");
          }
        }
      }
      if (replaced) items = PollItems();
    }
  }

  // Loop thread: sends a request (3 frames, or a batch) to its shard, or
  // with recovery keeps it (a shared copy: ZeroMQ counts references) until
  // the shard answers, to send it again to the shard's next generation if
  // this one is lost.
  void SendToShard(uint32_t shard, std::vector<zmq::message_t>& frames) {
    Header h = ps_wire::ReadHeader(frames[0].data());
    if (h.generation != lost_->generation(shard)) {  // a header no one else holds yet
      h.generation = lost_->generation(shard);
      ps_wire::WriteHeader(h, frames[0].data());
    }
    const bool batch = h.version == ps_wire::kBatchVersion;
    if (batch && !batches_.count(h.request_id)) {
      // Its parts, to finish them from the batch's one answer.
      auto& parts = batches_[h.request_id];
      const char* headers = static_cast<const char*>(frames[1].data());
      for (size_t at = 0; at + ps_wire::kHeaderSize <= frames[1].size(); at += ps_wire::kHeaderSize) {
        const Header ph = ps_wire::ReadHeader(headers + at);
        parts.push_back({ph.request_id, ph.partition});
      }
    }
    if (lost_->enabled() && h.request_id != kAttachRequestId) {
      if (!lost_->gone(shard).ok()) {
        FailRequest(h.request_id, h.partition, lost_->gone(shard));
        return;
      }
      lost_->Keep(shard, h.request_id, h.partition, frames);
      if (lost_->lost(shard)) return;  // sent once the next generation is found
    }
    if (batch) {
      const char* headers = static_cast<const char*>(frames[1].data());
      for (size_t at = 0; at + ps_wire::kHeaderSize <= frames[1].size(); at += ps_wire::kHeaderSize) {
        const Header ph = ps_wire::ReadHeader(headers + at);
        size_t id_bytes = 0, value_bytes = 0;
        PartFrameSizes(ph, /*is_reply=*/false, &id_bytes, &value_bytes);
        CountFrames(ph.op, ps_wire::kHeaderSize + id_bytes + value_bytes, /*sent=*/true);
      }
      CountFrames(ps_wire::kOpBatch, frames[0].size(), /*sent=*/true);
    } else {
      CountFrames(h.op, frames[0].size() + frames[1].size() + frames[2].size(), /*sent=*/true);
    }
    auto& d = dealers_[shard];
    messages_sent_.fetch_add(1, std::memory_order_relaxed);
    for (size_t i = 0; i < frames.size(); ++i)
      d.send(frames[i], i + 1 < frames.size() ? zmq::send_flags::sndmore : zmq::send_flags::none);
  }

  // Loop thread: request `id`'s part for `partition` ends with `status`
  // without a reply; for a batch, every part in it.
  void FailRequest(uint64_t id, uint32_t partition, const Status& status) {
    auto it = batches_.find(id);
    if (it == batches_.end()) {
      FailPart(id, partition, status);
      return;
    }
    const auto parts = std::move(it->second);
    batches_.erase(it);
    for (const auto& [ticket, part] : parts) FailPart(ticket, part, status);
  }

  // Loop thread: connects to the shards whose next generation was found
  // and sends them what the lost process had not answered; fails the
  // requests of those that did not come back. True when a socket changed.
  bool TakeRecoveries() {
    bool replaced = false;
    for (auto& [shard, found] : lost_->TakeFound()) {
      replaced = true;
      Status st = found.status();
      if (st.ok()) st = Reconnect(shard, found.value());
      if (st.ok()) continue;
      for (const auto& [key, frames] : lost_->Gone(shard, st.message()))
        FailRequest(key.first, key.second, lost_->gone(shard));
    }
    return replaced;
  }

  Status Reconnect(uint32_t shard, const ShardAddress& address) {
    try {
      Connect(shard, address.endpoint, address.curve_key);
    } catch (const zmq::error_t& e) {
      return Unavailable("cannot connect to " + address.endpoint + ": " + e.what());
    }
    PX_LOG(INFO) << "PS shard " << shard << " is back at " << address.endpoint << " (generation "
                 << address.generation << "); sending it " << lost_->held(shard)
                 << " unanswered request(s) again";
    for (auto& [key, frames] : lost_->Recovered(shard, address.generation)) {
      Header h = ps_wire::ReadHeader(frames[0].data());
      h.generation = address.generation;
      std::vector<zmq::message_t> again;
      again.push_back(HeaderMessage(h));
      for (size_t i = 1; i < frames.size(); ++i) again.push_back(std::move(frames[i]));
      SendToShard(shard, again);
    }
    return Status::Ok();
  }

  // Loop thread: a batch's answer: each part's reply handled as if it had
  // come alone, or the batch's ERROR for every part.
  void HandleBatchReply(uint32_t shard, std::vector<zmq::message_t>& msgs) {
    std::vector<const void*> data(msgs.size());
    std::vector<size_t> sizes(msgs.size());
    for (size_t i = 0; i < msgs.size(); ++i) {
      data[i] = msgs[i].data();
      sizes[i] = msgs[i].size();
    }
    Header h;
    std::string_view text;
    std::vector<BatchPart> parts;
    WireLimits limits;
    limits.max_message_bytes = ~size_t{0};
    WireError err = ParseBatch(data.data(), sizes.data(), msgs.size(), limits, /*expect_reply=*/true,
                               &h, &parts, &text);
    if (!err.ok()) {
      PX_LOG(WARNING) << "PS shard " << shard << " sent a malformed batch reply: " << err.text;
      return;
    }
    CountFrames(ps_wire::kOpBatch, msgs[0].size() + (h.op == ps_wire::kOpBatch ? 0 : msgs[1].size()),
                /*sent=*/false);
    auto it = batches_.find(h.request_id);
    if (it == batches_.end()) return;  // answered already (sent again to a next generation)
    if (h.op == static_cast<uint8_t>(Op::kError)) {
      const auto code = static_cast<ErrorCode>(h.error_code);
      if (options_.resolve_shard && code == ErrorCode::kStaleGeneration) {
        lost_->Lose(shard, std::string(text));  // the batch stays held
        return;
      }
      if (options_.resolve_shard) lost_->Answered(shard, h.request_id, h.partition);
      FailRequest(h.request_id, h.partition,
                  Status(CodeFor(code), "PS shard " + std::to_string(shard) + ": " +
                                            ErrorCodeName(code) + ": " + std::string(text)));
      return;
    }
    if (options_.resolve_shard) lost_->Answered(shard, h.request_id, h.partition);
    batches_.erase(it);
    for (BatchPart& part : parts) {
      // An ERROR part's count is its text's length here, 0 when alone.
      Header ph = ps_wire::ReadHeader(part.frames[0]);
      char fixed[ps_wire::kHeaderSize];
      if (ph.op == static_cast<uint8_t>(Op::kError)) {
        ph.count = 0;
        ps_wire::WriteHeader(ph, fixed);
        part.frames[0] = fixed;
      }
      HandleParsedReply(shard, part.frames, part.sizes, 3,
                        part.sizes[0] + part.sizes[1] + part.sizes[2]);
    }
  }

  void HandleReply(uint32_t shard, std::vector<zmq::message_t>& msgs) {
    if (!msgs.empty() && msgs[0].size() == ps_wire::kHeaderSize &&
        ps_wire::ReadHeader(msgs[0].data()).version == ps_wire::kBatchVersion) {
      HandleBatchReply(shard, msgs);
      return;
    }
    const void* data[3] = {nullptr, nullptr, nullptr};
    size_t sizes[3] = {0, 0, 0};
    const size_t n = std::min<size_t>(msgs.size(), 3);
    size_t bytes = 0;
    for (size_t i = 0; i < n; ++i) {
      data[i] = msgs[i].data();
      sizes[i] = msgs[i].size();
    }
    for (const auto& msg : msgs) bytes += msg.size();
    HandleParsedReply(shard, data, sizes, msgs.size(), bytes);
  }

  // Loop thread: a PULL or PUSH_PULL reply's rows (and with a version
  // check their versions) into the request's buffers, at each id's
  // position; an error when the reply does not fit the part asked.
  Status ReadRows(uint32_t shard, const MessageView& m, Request* r, const Part& part) {
    const Header& h = m.header;
    const uint32_t dim = r->width;
    const std::string who = "PS shard " + std::to_string(shard);
    if (h.count != part.uniq.size() || (h.count > 0 && h.dim != dim))
      return Internal(who + " returned " + std::to_string(h.count) + " rows, expected " +
                      std::to_string(part.uniq.size()));
    if (r->checked() != static_cast<bool>(h.flags & ps_wire::kFlagRowVersions))
      return Internal(who + " answered " + (r->checked() ? "without" : "with") +
                      " row versions, which was not asked");
    if (m.shm() != part.shm_reply.has_value())
      return Internal(who + " answered " + (m.shm() ? "in" : "outside") +
                      " shared memory, which was not asked");
    const size_t row_bytes = size_t{dim} * ValueBytes(h.flags);
    float* out = r->out->data();
    if (!r->checked()) {
      const char* rows = m.shm() ? shm_[shard]->region->data() + *part.shm_reply : m.values;
      for (size_t j = 0; j < part.uniq.size(); ++j) {
        DecodeValues(rows + j * row_bytes, dim, m.fp16(),
                     out + size_t{r->first_pos[part.uniq[j]]} * dim);
      }
      return Status::Ok();
    }
    // A version check: m.ids holds a version per id, m.values the rows of
    // those not fresh.
    auto version_at = [&m](size_t j) {
      uint32_t v;
      std::memcpy(&v, m.ids + j * sizeof v, sizeof v);
      return v;
    };
    size_t need = 0;
    for (size_t j = 0; j < part.uniq.size(); ++j) need += version_at(j) != ps_wire::kRowFresh;
    if (need != h.worker)
      return Internal(who + " sent " + std::to_string(h.worker) + " rows for " +
                      std::to_string(need) + " versions that need them");
    size_t sent = 0;
    for (size_t j = 0; j < part.uniq.size(); ++j) {
      const uint32_t v = version_at(j);
      const size_t pos = r->first_pos[part.uniq[j]];
      (*r->versions)[pos] = v;
      if (v == ps_wire::kRowFresh) continue;
      DecodeValues(m.values + sent * row_bytes, dim, m.fp16(), out + pos * dim);
      ++sent;
    }
    return Status::Ok();
  }

  // Loop thread: one version-1 reply (alone, or a part of a batch's),
  // `bytes` long in all.
  void HandleParsedReply(uint32_t shard, const void* const* data, const size_t* sizes,
                         size_t num_frames, size_t bytes) {
    MessageView m;
    WireError err = ParseMessage(data, sizes, num_frames, WireLimits{}, /*expect_reply=*/true, &m);
    if (!err.ok()) {
      PX_LOG(WARNING) << "PS shard " << shard << " sent a malformed reply: " << err.text;
      return;
    }
    const Header& h = m.header;
    CountFrames(h.op, bytes, /*sent=*/false);
    if (h.request_id == kAttachRequestId) {
      HandleAttachReply(shard, m);
      return;
    }
    if (auto b = batches_.find(h.request_id); b != batches_.end()) {
      // A version-1 answer to a batch: a shard that speaks only version 1
      // refused it (BAD_VERSION or BAD_FRAMES).
      if (options_.resolve_shard) lost_->Answered(shard, h.request_id, h.partition);
      const auto code = static_cast<ErrorCode>(h.error_code);
      FailRequest(h.request_id, h.partition,
                  Status(StatusCode::kFailedPrecondition,
                         "PS shard " + std::to_string(shard) + " refused a batch (wire version 2): " +
                             ErrorCodeName(code) + ": " + std::string(m.text) +
                             "; it speaks only version 1: start the job's shards from this build, "
                             "or turn batching off ([ps] batch = false)"));
      return;
    }
    if (options_.resolve_shard) {
      if (h.op == static_cast<uint8_t>(Op::kError) &&
          h.error_code == static_cast<uint16_t>(ErrorCode::kStaleGeneration)) {
        // This process is not the generation the request was for: the
        // request stays held and goes to the next generation.
        lost_->Lose(shard, std::string(m.text));
        return;
      }
      lost_->Answered(shard, h.request_id, h.partition);
    }
    Request* r = nullptr;
    {
      std::lock_guard<std::mutex> lock(mu_);
      auto it = requests_.find(h.request_id);
      if (it == requests_.end()) return;  // its ticket was abandoned
      r = it->second.get();
    }
    Status status;
    int32_t k = h.partition < r->part_of.size() ? r->part_of[h.partition] : -1;
    if (k < 0) {
      status = Internal("PS shard " + std::to_string(shard) + " answered for partition " +
                        std::to_string(h.partition) + " that was not asked");
    } else if (h.op == static_cast<uint8_t>(Op::kError)) {
      const auto code = static_cast<ErrorCode>(h.error_code);
      status = Status(CodeFor(code), "PS shard " + std::to_string(shard) + ": " +
                                         ErrorCodeName(code) + ": " + std::string(m.text));
    } else if (h.op != static_cast<uint8_t>(r->op)) {
      status = Internal("PS shard " + std::to_string(shard) + " answered " + OpName(h.op) +
                        " to " + OpName(static_cast<uint8_t>(r->op)));
    } else if (r->op == Op::kStats) {
      (*r->texts)[h.partition] = std::string(m.text);
    } else if (r->op == Op::kPull || r->op == Op::kPushPull) {
      status = ReadRows(shard, m, r, r->parts[k]);
    }
    if (k >= 0) ReleaseShm(r->parts[k]);
    std::optional<int64_t> version;
    if (k >= 0 && status.ok() &&
        (h.op == static_cast<uint8_t>(Op::kPull) || h.op == static_cast<uint8_t>(Op::kPushPull))) {
      version = h.version_seen;
    }
    std::optional<uint16_t> resets;
    if (k >= 0 && status.ok() &&
        (r->op == Op::kPull || r->op == Op::kPush || r->op == Op::kPushPull || r->op == Op::kWrite)) {
      resets = h.resets;
    }
    FinishPart(r, h.partition, status, version, resets);
  }

  // Loop thread: the part of request `id` for `partition` (control ops: the
  // shard) ends with `status` without a reply.
  void FailPart(uint64_t id, uint32_t partition, const Status& status) {
    Request* r = nullptr;
    {
      std::lock_guard<std::mutex> lock(mu_);
      auto it = requests_.find(id);
      if (it == requests_.end()) return;  // its ticket was abandoned
      r = it->second.get();
    }
    if (partition < r->part_of.size() && r->part_of[partition] >= 0)
      ReleaseShm(r->parts[r->part_of[partition]]);
    FinishPart(r, partition, status, std::nullopt, std::nullopt);
  }

  // Loop thread: one part of `r` ended; the last one completes the ticket.
  void FinishPart(Request* r, uint32_t partition, const Status& status,
                  std::optional<int64_t> version, std::optional<uint16_t> resets) {
    std::lock_guard<std::mutex> lock(mu_);
    if (version) last_version_[r->var_index][partition] = *version;
    if (resets) last_resets_[r->var_index][partition] = *resets;
    if (!status.ok() && r->status.ok()) r->status = status;
    if (r->remaining > 0 && --r->remaining == 0) {
      if (r->has_duplicates && r->out != nullptr && r->status.ok()) {
        const uint32_t dim = r->width;
        float* out = r->out->data();
        for (size_t i = 0; i < r->index_of.size(); ++i) {
          const uint32_t first = r->first_pos[r->index_of[i]];
          if (first != i) std::memcpy(out + i * dim, out + size_t{first} * dim, dim * sizeof(float));
        }
      }
      r->done = true;
      cv_.notify_all();
      if (options_.on_complete) {  // under mu_: a waiter may consume the ticket after it
        CompletedRequest completed;
        completed.kind = r->op == Op::kPull       ? CompletedRequest::Kind::kPull
                         : r->op == Op::kPush     ? CompletedRequest::Kind::kPush
                         : r->op == Op::kPushPull ? CompletedRequest::Kind::kPushPull
                                                  : CompletedRequest::Kind::kControl;
        completed.var = r->var != nullptr ? r->var->id : 0;
        completed.submitted = r->submitted;
        completed.completed = std::chrono::steady_clock::now();
        options_.on_complete(completed);
      }
    }
  }

  TransportBytes transport_bytes() const override {
    TransportBytes t;
    t.push_sent = bytes_[0][0];
    t.push_received = bytes_[0][1];
    t.pull_sent = bytes_[1][0];
    t.pull_received = bytes_[1][1];
    t.other_sent = bytes_[2][0];
    t.other_received = bytes_[2][1];
    t.messages_sent = messages_sent_.load(std::memory_order_relaxed);
    return t;
  }

  // Loop thread: frame bytes by path (0 push, 1 pull, 2 other).
  void CountFrames(uint8_t op, size_t bytes, bool sent) {
    int path = 2;
    if (op == static_cast<uint8_t>(Op::kPush)) path = 0;
    if (op == static_cast<uint8_t>(Op::kPull)) path = 1;
    if (op == static_cast<uint8_t>(Op::kPushPull)) path = sent ? 0 : 1;
    bytes_[path][sent ? 0 : 1].fetch_add(static_cast<int64_t>(bytes), std::memory_order_relaxed);
  }

  // Constant after construction.
  const PsClientOptions options_;
  zmq::context_t ctx_;
  std::atomic<int64_t> bytes_[3][2] = {};
  std::atomic<int64_t> messages_sent_{0};

  mutable std::mutex mu_;
  std::condition_variable cv_;
  ConsistencySchedule schedule_{options_.plan};                     // guarded by mu_
  Ticket next_ticket_ = 0;                                          // guarded by mu_
  std::unordered_map<Ticket, std::unique_ptr<Request>> requests_;   // guarded by mu_
  std::vector<std::vector<int64_t>> last_version_;                  // guarded by mu_
  std::vector<std::vector<uint16_t>> last_resets_;                  // guarded by mu_

  std::mutex send_mu_;
  zmq::socket_t cmd_send_;  // guarded by send_mu_

  // Per shard (set up in Start()); arenas guarded by shm_mu_.
  std::vector<std::unique_ptr<ShmLink>> shm_;
  std::mutex shm_mu_;

  // Loop thread only (after Start()).
  zmq::socket_t cmd_recv_;
  std::vector<zmq::socket_t> dealers_;
  std::thread thread_;
  // Shard recovery (loop thread only, made in Start()): generations, held
  // requests, lookups; the monitors that report a dealer's connection
  // dropping.
  std::unique_ptr<LostShards> lost_;
  std::vector<zmq::socket_t> monitors_;
  uint64_t monitor_serial_ = 0;
  // Batches sent and not answered: their parts (ticket, partition).
  std::unordered_map<uint64_t, std::vector<std::pair<uint64_t, uint32_t>>> batches_;
};

}  // namespace

Status SubmitCalls(PsClient* ps, std::span<const BatchCall> calls, int64_t clock, bool batch,
                   std::vector<Ticket>* tickets) {
  if (batch) {
    PX_ASSIGN_OR_RETURN(std::vector<Ticket> all, ps->Batch(calls, clock));
    tickets->insert(tickets->end(), all.begin(), all.end());
    return Status::Ok();
  }
  for (const BatchCall& c : calls) {
    using Kind = BatchCall::Kind;
    StatusOr<Ticket> t = c.kind == Kind::kPull && c.check != nullptr
                             ? ps->PullChecked(c.var, c.ids, *c.check, clock, c.out)
                         : c.kind == Kind::kPull ? ps->Pull(c.var, c.ids, clock, c.out)
                         : c.kind == Kind::kPush ? ps->Push(c.var, c.ids, c.grads, clock)
                         : c.kind == Kind::kPushPull
                             ? ps->PushPull(c.var, c.ids, c.grads, clock, c.out)
                             : ps->Write(c.var, c.ids, c.grads);
    if (!t.ok()) return t.status();
    tickets->push_back(*t);
  }
  return Status::Ok();
}

StatusOr<std::unique_ptr<PsClient>> PsClient::Create(const PsClientOptions& options) {
  auto client = std::make_unique<ZmqPsClient>(options);
  PX_RETURN_IF_ERROR(client->Start());
  return std::unique_ptr<PsClient>(std::move(client));
}

}  // namespace parallax::ps
