// The Gloo backend: a TCP device bound to options.bind_address, a full mesh
// connected through the RendezvousStore, and Gloo's own collectives
// (gloo::allreduce, broadcast, allgather, allgatherv, barrier) with a timeout
// derived from each call's deadline. Gloo reports failures by throwing; every
// call here catches at this wrapper and returns a Status.
#include <gloo/allgather.h>
#include <gloo/allgatherv.h>
#include <gloo/allreduce.h>
#include <gloo/barrier.h>
#include <gloo/broadcast.h>
#include <gloo/common/error.h>
#include <gloo/math.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/store.h>
#include <gloo/transport/tcp/device.h>
#include <gloo/types.h>
#include <netdb.h>
#include <signal.h>
#include <sys/socket.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cstring>
#include <map>
#include <mutex>
#include <set>
#include <tuple>

#include "core/base/logging.h"
#include "core/comm/backends.h"
#include "core/comm/reduce.h"
#include "core/comm/rendezvous_store.h"
#include "core/comm/wire_bytes.h"

namespace parallax::comm::internal {
namespace {

using std::chrono::milliseconds;

milliseconds Left(Deadline deadline) {
  return std::chrono::duration_cast<milliseconds>(deadline - std::chrono::steady_clock::now());
}

// "prefix/3" -> "rank 3"; other keys as they are.
std::string DescribeKey(const std::string& key) {
  size_t end = key.size();
  size_t begin = end;
  while (begin > 0 && std::isdigit(static_cast<unsigned char>(key[begin - 1]))) --begin;
  if (begin == end) return "key \"" + key + "\"";
  return "rank " + key.substr(begin) + " (key \"" + key + "\")";
}

// gloo::rendezvous::Store on a RendezvousStore (in a job: the coordinator's
// key-value RPCs), under `prefix/`. Gloo expects exceptions; the Status that
// caused one is kept for Create() to return.
class GlooStoreAdapter : public gloo::rendezvous::Store {
 public:
  GlooStoreAdapter(RendezvousStore* store, std::string prefix, Deadline deadline)
      : store_(store), prefix_(std::move(prefix)), deadline_(deadline) {}

  void set(const std::string& key, const std::vector<char>& data) override {
    Check(store_->Set(Full(key), std::string(data.begin(), data.end())));
  }

  std::vector<char> get(const std::string& key) override {
    auto it = cache_.find(key);
    if (it == cache_.end()) {
      wait({key}, Left(deadline_));
      it = cache_.find(key);
    }
    return std::vector<char>(it->second.begin(), it->second.end());
  }

  void wait(const std::vector<std::string>& keys) override { wait(keys, Left(deadline_)); }

  void wait(const std::vector<std::string>& keys, const milliseconds& timeout) override {
    std::vector<std::string> full;
    for (const auto& k : keys) full.push_back(Full(k));
    Deadline d = std::min(deadline_, std::chrono::steady_clock::now() + timeout);
    StatusOr<std::vector<std::string>> values = store_->Get(full, d);
    if (!values.ok()) {
      std::string who;
      for (const auto& k : full) who += (who.empty() ? "" : ", ") + DescribeKey(k);
      Status s = values.status();
      if (s.code() == StatusCode::kDeadlineExceeded) {
        s = DeadlineExceeded("no address from " + who + " before the rendezvous deadline (" +
                             s.message() + "); is that rank running, with the same key prefix " +
                             "and world size?");
      }
      Check(s);
    }
    for (size_t i = 0; i < keys.size(); ++i) cache_[keys[i]] = std::move(values.value()[i]);
  }

  const Status& error() const { return error_; }

 private:
  std::string Full(const std::string& key) const { return prefix_ + "/" + key; }
  void Check(const Status& s) {
    if (s.ok()) return;
    error_ = s;
    throw gloo::IoException(s.ToString());
  }

  RendezvousStore* const store_;
  const std::string prefix_;
  const Deadline deadline_;
  std::map<std::string, std::string> cache_;
  Status error_;
};

void SumBFloat16(void* c, const void* a, const void* b, size_t n) {
  const void* in[2] = {a, b};
  SumOf(DataType::kBFloat16, c, in, 2, n);
}

using ReduceFn = void (*)(void*, const void*, const void*, size_t);

// What every rank states before a collective it checks (verify_arguments),
// and after one that failed unchecked (Diagnose).
struct CallHeader {
  int32_t op;
  int32_t type;
  int64_t count;
  int64_t root;
};
static_assert(sizeof(CallHeader) == 24);

enum class Op : int32_t { kAllReduce = 1, kBroadcast, kAllGather, kAllGatherv, kBarrier };

// Which WireCounters field an operation counts in.
enum class Kind { kAllReduce, kAllGather, kOther };

const char* OpName(Op op) {
  switch (op) {
    case Op::kAllReduce:
      return "AllReduce";
    case Op::kBroadcast:
      return "Broadcast";
    case Op::kAllGather:
      return "AllGather";
    case Op::kAllGatherv:
      return "AllGatherv";
    case Op::kBarrier:
      return "Barrier";
  }
  return "?";
}

class GlooCommunicator : public Communicator {
 public:
  GlooCommunicator(CommunicatorOptions options, std::shared_ptr<gloo::rendezvous::Context> context,
                   RendezvousStore* store)
      : options_(std::move(options)), store_(store), context_(std::move(context)) {}

  ~GlooCommunicator() override {
    // Pairs close their sockets; peers blocked on us see the connection drop.
    std::lock_guard<std::mutex> lock(mu_);
    context_.reset();
  }

  int rank() const override { return options_.rank; }
  int world_size() const override { return options_.world_size; }
  Backend backend() const override { return Backend::kGloo; }
  bool Supports(DataType type) const override {
    return type == DataType::kFloat32 || type == DataType::kFloat16 ||
           type == DataType::kBFloat16 || type == DataType::kInt32;
  }
  WireCounters wire_bytes() const override {
    return {counters_[0].Load(), counters_[1].Load(), counters_[2].Load()};
  }

  Status AllReduce(void* data, size_t count, DataType type, ReduceOp op,
                   Deadline deadline) override {
    std::string what = std::string("AllReduce of ") + std::to_string(count) + " " +
                       std::string(DataTypeName(type)) + " (" + std::string(ReduceOpName(op)) + ")";
    if (type == DataType::kUInt8)
      return InvalidArgument(Prefix() + what + ": uint8 cannot be reduced");
    const WireBytes wire = GlooAllReduceWire(options_.world_size, options_.rank,
                                             count * DataTypeSize(type), DataTypeSize(type));
    return Run(
        Op::kAllReduce, Kind::kAllReduce, wire, type, count, 0, what, data, deadline,
        [&](milliseconds timeout) {
          if (count == 0 || options_.world_size == 1) return;
          gloo::AllreduceOptions opts(context_);
          opts.setTag(tag_);
          opts.setTimeout(timeout);
          switch (type) {
            case DataType::kFloat32:
              opts.setOutput(static_cast<float*>(data), count);
              opts.setReduceFunction(static_cast<ReduceFn>(&gloo::sum<float>));
              break;
            case DataType::kFloat16:
              opts.setOutput(static_cast<gloo::float16*>(data), count);
              opts.setReduceFunction(static_cast<ReduceFn>(&gloo::sum<gloo::float16>));
              break;
            case DataType::kBFloat16:
              opts.setOutput(static_cast<uint16_t*>(data), count);
              opts.setReduceFunction(&SumBFloat16);
              break;
            case DataType::kInt32:
              opts.setOutput(static_cast<int32_t*>(data), count);
              opts.setReduceFunction(static_cast<ReduceFn>(&gloo::sum<int32_t>));
              break;
            case DataType::kUInt8:
              break;
          }
          gloo::allreduce(opts);
        },
        [&] {
          if (op == ReduceOp::kMean) DivideBy(type, data, count, options_.world_size);
        });
  }

  Status Broadcast(void* data, size_t count, DataType type, int root, Deadline deadline) override {
    std::string what = "Broadcast of " + std::to_string(count) + " " +
                       std::string(DataTypeName(type)) + " from rank " + std::to_string(root);
    if (root < 0 || root >= options_.world_size) {
      return InvalidArgument(Prefix() + what + ": root is not a rank");
    }
    const WireBytes wire = count == 0 ? WireBytes{}
                                      : GlooBroadcastWire(options_.world_size, options_.rank, root,
                                                          count * DataTypeSize(type));
    return Run(Op::kBroadcast, Kind::kOther, wire, type, count, root, what, data, deadline,
               [&](milliseconds timeout) {
                 if (count == 0 || options_.world_size == 1) return;
                 gloo::BroadcastOptions opts(context_);
                 opts.setTag(tag_);
                 opts.setTimeout(timeout);
                 opts.setRoot(root);
                 opts.setOutput(static_cast<uint8_t*>(data), count * DataTypeSize(type));
                 gloo::broadcast(opts);
               });
  }

  Status AllGather(const void* in, size_t count, DataType type, void* out,
                   Deadline deadline) override {
    std::string what =
        "AllGather of " + std::to_string(count) + " " + std::string(DataTypeName(type));
    size_t bytes = count * DataTypeSize(type);
    const WireBytes wire =
        count == 0 ? WireBytes{} : GlooAllGatherWire(options_.world_size, options_.rank, bytes);
    return Run(Op::kAllGather, Kind::kAllGather, wire, type, count, 0, what, out, deadline,
               [&](milliseconds timeout) {
                 if (count == 0) return;
                 if (options_.world_size == 1) {
                   std::memmove(out, in, bytes);
                   return;
                 }
                 gloo::AllgatherOptions opts(context_);
                 opts.setTag(tag_);
                 opts.setTimeout(timeout);
                 opts.setInput(static_cast<uint8_t*>(const_cast<void*>(in)), bytes);
                 opts.setOutput(static_cast<uint8_t*>(out), bytes * options_.world_size);
                 gloo::allgather(opts);
               });
  }

  Status AllGatherv(const void* in, const std::vector<size_t>& counts, DataType type, void* out,
                    Deadline deadline) override {
    if (counts.size() != static_cast<size_t>(options_.world_size)) {
      return InvalidArgument(Prefix() + "AllGatherv: " + std::to_string(counts.size()) +
                             " counts given for a world of " + std::to_string(options_.world_size) +
                             "; pass one per rank");
    }
    size_t total = 0;
    for (size_t c : counts) total += c;
    size_t mine = counts[options_.rank];
    std::string what = "AllGatherv of " + std::to_string(mine) + " of " + std::to_string(total) +
                       " " + std::string(DataTypeName(type));
    // The header carries the total and a digest of the counts, so ranks with
    // different count vectors are caught.
    uint64_t digest = 1469598103934665603ull;  // FNV-1a over the counts
    for (size_t c : counts) digest = (digest ^ c) * 1099511628211ull;
    std::vector<size_t> byte_counts;
    for (size_t c : counts) byte_counts.push_back(c * DataTypeSize(type));
    const WireBytes wire =
        total == 0 ? WireBytes{}
                   : GlooAllGathervWire(options_.world_size, options_.rank, byte_counts);
    return Run(Op::kAllGatherv, Kind::kAllGather, wire, type, total,
               static_cast<int64_t>(digest >> 1), what, out, deadline, [&](milliseconds timeout) {
                 if (total == 0) return;
                 size_t esize = DataTypeSize(type);
                 if (options_.world_size == 1) {
                   std::memmove(out, in, mine * esize);
                   return;
                 }
                 std::vector<size_t> bytes;
                 for (size_t c : counts) bytes.push_back(c * esize);
                 gloo::AllgathervOptions opts(context_);
                 opts.setTag(tag_);
                 opts.setTimeout(timeout);
                 opts.setInput(static_cast<uint8_t*>(const_cast<void*>(in)), mine * esize);
                 opts.setOutput(static_cast<uint8_t*>(out), bytes);
                 gloo::allgatherv(opts);
               });
  }

  Status Barrier(Deadline deadline) override {
    return Run(Op::kBarrier, Kind::kOther, GlooBarrierWire(options_.world_size, options_.rank),
               DataType::kUInt8, 0, 0, "Barrier", nullptr, deadline, [&](milliseconds timeout) {
                 if (options_.world_size == 1) return;
                 gloo::BarrierOptions opts(context_);
                 opts.setTag(tag_);
                 opts.setTimeout(timeout);
                 gloo::barrier(opts);
               });
  }

 private:
  std::string Prefix() const { return RankName(options_) + ": "; }

  // Runs `body` (the Gloo call, with tag_ set for it) after the argument
  // check, if this call needs one; `wire` is what the body moves on this
  // rank, counted under `kind` once it succeeded.
  template <typename Body, typename After = void (*)()>
  Status Run(
      Op op, Kind kind, WireBytes wire, DataType type, size_t count, int64_t root,
      const std::string& what, const void* data, Deadline deadline, Body body,
      After after = [] {}) {
    if (data == nullptr && count > 0) return InvalidArgument(Prefix() + what + ": null buffer");
    std::lock_guard<std::mutex> lock(mu_);
    if (!broken_.ok()) {
      return FailedPrecondition(Prefix() + what + ": communicator is broken by an earlier error (" +
                                broken_.message() + "); start a new attempt");
    }
    const CallHeader header{static_cast<int32_t>(op), static_cast<int32_t>(type),
                            static_cast<int64_t>(count), root};
    const bool check = options_.verify_arguments && options_.world_size > 1 &&
                       (options_.verify_every_call || verified_.count(Shape(header)) == 0);
    try {
      if (check) {
        milliseconds left = Left(deadline);
        if (left.count() <= 0)
          return Fail(DeadlineExceeded(Prefix() + what + ": deadline already passed"));
        tag_ = NextTag(kCheckShape);
        Status verified = Verify(header, what, left);
        Count(kind, GlooAllGatherWire(options_.world_size, options_.rank, sizeof(CallHeader)));
        PX_RETURN_IF_ERROR(verified);
        verified_.insert(Shape(header));
      }
      milliseconds left = Left(deadline);
      if (left.count() <= 0)
        return Fail(DeadlineExceeded(Prefix() + what + ": deadline already passed"));
      tag_ = NextTag(ShapeTag(header));
      body(left);
      Count(kind, wire);
      after();
      return Status::Ok();
    } catch (const gloo::IoException& e) {
      std::string m = e.what();
      const std::string others = check ? "" : Diagnose(header);
      if (m.find("Timed out") != std::string::npos || m.find("timed out") != std::string::npos) {
        return Fail(
            DeadlineExceeded(Prefix() + what + " did not finish before its deadline: a peer " +
                             "did not take part (is every rank alive and issuing the same " +
                             "collectives?): " + m + others));
      }
      return Fail(Unavailable(Prefix() + what + " failed: a peer closed its connection (did it " +
                              "exit?): " + m + others));
    } catch (const std::exception& e) {
      return Fail(Internal(Prefix() + what + " failed in Gloo: " + e.what()));
    }
  }

  // A call's shape, as far as checks go. AllGatherv's counts change from
  // call to call by design (the sparse rows of a step): it is checked once
  // per type, its tag still carrying the counts' digest.
  using ShapeKey = std::tuple<int32_t, int32_t, int64_t, int64_t>;
  static ShapeKey Shape(const CallHeader& h) {
    if (static_cast<Op>(h.op) == Op::kAllGatherv) return {h.op, h.type, 0, 0};
    return {h.op, h.type, h.count, h.root};
  }

  // 16 bits of a call's shape: ranks that disagree use different Gloo slots,
  // so their messages never meet (a size mismatch inside Gloo's TCP pair
  // throws on its loop thread and terminates the process).
  static uint32_t ShapeTag(const CallHeader& h) {
    uint64_t digest = 1469598103934665603ull;
    const auto* p = reinterpret_cast<const unsigned char*>(&h);
    for (size_t i = 0; i < sizeof(h); ++i) digest = (digest ^ p[i]) * 1099511628211ull;
    const auto tag = static_cast<uint32_t>((digest >> 32) ^ digest) & 0xffff;
    return tag == kCheckShape ? 0 : tag;
  }
  static constexpr uint32_t kCheckShape = 0xffff;  // the argument check's own tags

  // The tag of the next call: its shape tag, then a sequence number.
  uint32_t NextTag(uint32_t shape) { return (shape << 16) | (sequence_++ & 0xffff); }

  // After a call that was not checked up front failed: states this rank's
  // call in the rendezvous store and reads the other ranks' (waiting up to
  // kDiagnosisWait for them to fail too), so the error names ranks that
  // called something else, and ranks that never said. Called with mu_ held.
  std::string Diagnose(const CallHeader& mine) {
    if (store_ == nullptr) return "";
    const std::string key = options_.key_prefix + "/failed/";
    const std::string value(reinterpret_cast<const char*>(&mine), sizeof(mine));
    if (!store_->Set(key + std::to_string(options_.rank), value).ok()) return "";
    const Deadline until = std::chrono::steady_clock::now() + kDiagnosisWait;
    std::string diffs, silent;
    for (int r = 0; r < options_.world_size; ++r) {
      if (r == options_.rank) continue;
      auto theirs = store_->Get({key + std::to_string(r)}, until);
      if (!theirs.ok() || theirs.value()[0].size() != sizeof(CallHeader)) {
        silent += (silent.empty() ? "" : ", ") + std::to_string(r);
        continue;
      }
      CallHeader h;
      std::memcpy(&h, theirs.value()[0].data(), sizeof(h));
      if (std::memcmp(&h, &mine, sizeof(h)) == 0) continue;
      diffs += "; rank " + std::to_string(r) + " called " + Describe(h) + " but rank " +
               std::to_string(options_.rank) + " called " + Describe(mine);
    }
    std::string out;
    if (!diffs.empty()) out += "; ranks disagree on the collective" + diffs;
    if (!silent.empty()) {
      out += "; rank(s) " + silent + " did not state their call within " +
             std::to_string(kDiagnosisWait.count()) + " ms (exited or stuck elsewhere?)";
    }
    return out;
  }
  static constexpr milliseconds kDiagnosisWait{2000};

  void Count(Kind kind, const WireBytes& w) {
    Counter& c = counters_[static_cast<int>(kind)];
    c.sent.fetch_add(w.sent, std::memory_order_relaxed);
    c.received.fetch_add(w.received, std::memory_order_relaxed);
  }

  Status Fail(Status s) {
    broken_ = s;
    return s;
  }

  // Exchanges the call's header with every rank; INVALID_ARGUMENT names the
  // ranks that disagree. Called with mu_ held and tag_ set; may throw Gloo
  // exceptions.
  Status Verify(const CallHeader& mine, const std::string& what, milliseconds timeout) {
    std::vector<CallHeader> all(options_.world_size);
    gloo::AllgatherOptions opts(context_);
    opts.setTag(tag_);
    opts.setTimeout(timeout);
    opts.setInput(reinterpret_cast<uint8_t*>(const_cast<CallHeader*>(&mine)), sizeof(mine));
    opts.setOutput(reinterpret_cast<uint8_t*>(all.data()), sizeof(CallHeader) * all.size());
    gloo::allgather(opts);
    std::string diffs;
    for (int r = 0; r < options_.world_size; ++r) {
      const CallHeader& h = all[r];
      if (std::memcmp(&h, &all[0], sizeof(h)) == 0) continue;
      diffs += "; rank " + std::to_string(r) + " called " + Describe(h) + " but rank 0 called " +
               Describe(all[0]);
    }
    if (diffs.empty()) return Status::Ok();
    return InvalidArgument(Prefix() + what + ": ranks disagree on the collective" + diffs +
                           " (every rank must pass the same operation, count, type and root)");
  }

  static std::string Describe(const CallHeader& h) {
    std::string s = OpName(static_cast<Op>(h.op));
    if (static_cast<Op>(h.op) == Op::kBarrier) return s;
    s += " of " + std::to_string(h.count) + " " +
         std::string(DataTypeName(static_cast<DataType>(h.type)));
    if (static_cast<Op>(h.op) == Op::kBroadcast) s += " from rank " + std::to_string(h.root);
    if (static_cast<Op>(h.op) == Op::kAllGatherv) {
      s += " in total (counts digest " + std::to_string(h.root) + ")";
    }
    return s;
  }

  struct Counter {
    std::atomic<int64_t> sent{0};
    std::atomic<int64_t> received{0};
    WireBytes Load() const {
      return {sent.load(std::memory_order_relaxed), received.load(std::memory_order_relaxed)};
    }
  };

  // Constant after construction.
  const CommunicatorOptions options_;
  RendezvousStore* const store_;  // for Diagnose(); outlives this object

  // Written under mu_, read from any thread; indexed by Kind.
  Counter counters_[3];

  std::mutex mu_;                                       // serializes collectives
  std::shared_ptr<gloo::rendezvous::Context> context_;  // guarded by mu_
  uint32_t tag_ = 0;                                    // guarded by mu_: the call's
  uint32_t sequence_ = 0;                               // guarded by mu_
  std::set<ShapeKey> verified_;                         // guarded by mu_: checked shapes
  Status broken_;                                       // guarded by mu_
};

// Resolves a bind address to a numeric one. Gloo's own lookup crashes on some
// failures (seen: a segfault in CreateDeviceAttr on an unresolvable name), so
// it only ever sees an address that resolved here.
StatusOr<std::string> ResolveBindAddress(const std::string& host) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* result = nullptr;
  int rc = getaddrinfo(host.c_str(), nullptr, &hints, &result);
  if (rc != 0 || result == nullptr) {
    return InvalidArgument("cannot resolve bind address \"" + host + "\": " + gai_strerror(rc) +
                           " (check PARALLAX_BIND_ADDR)");
  }
  char numeric[NI_MAXHOST];
  rc = getnameinfo(result->ai_addr, result->ai_addrlen, numeric, sizeof(numeric), nullptr, 0,
                   NI_NUMERICHOST);
  freeaddrinfo(result);
  if (rc != 0) {
    return InvalidArgument("cannot use bind address \"" + host + "\": " + gai_strerror(rc));
  }
  return std::string(numeric);
}

// Gloo writes to its sockets with writev(), without MSG_NOSIGNAL: a write to
// a peer that died raises SIGPIPE, which by default kills this process
// before the call can fail with UNAVAILABLE. Unless the program chose a
// disposition of its own, ignore it (as gRPC does).
void IgnoreSigpipeUnlessHandled() {
  static std::once_flag once;
  std::call_once(once, [] {
    struct sigaction current {};
    if (sigaction(SIGPIPE, nullptr, &current) == 0 && current.sa_handler == SIG_DFL) {
      signal(SIGPIPE, SIG_IGN);
    }
  });
}

}  // namespace

StatusOr<std::unique_ptr<Communicator>> CreateGlooCommunicator(const CommunicatorOptions& options,
                                                               RendezvousStore* store) {
  IgnoreSigpipeUnlessHandled();
  const std::string who = RankName(options);
  StatusOr<std::string> address = ResolveBindAddress(options.bind_address);
  if (!address.ok()) return address.status().WithContext(who);
  std::shared_ptr<gloo::transport::Device> device;
  try {
    gloo::transport::tcp::attr attr;
    attr.hostname = address.value();
    device = gloo::transport::tcp::CreateDevice(attr);
  } catch (const std::exception& e) {
    return InvalidArgument(who + ": cannot bind a Gloo TCP device to \"" + options.bind_address +
                           "\" (check PARALLAX_BIND_ADDR): " + e.what());
  }
  auto context = std::make_shared<gloo::rendezvous::Context>(options.rank, options.world_size);
  context->setTimeout(options.rendezvous_timeout);
  GlooStoreAdapter adapter(store, options.key_prefix, DeadlineAfter(options.rendezvous_timeout));
  try {
    context->connectFullMesh(adapter, device);
  } catch (const std::exception& e) {
    std::string where = " under \"" + options.key_prefix + "\" within " +
                        std::to_string(options.rendezvous_timeout.count()) + " ms";
    if (!adapter.error().ok()) {
      return Status(adapter.error().code(),
                    who + ": rendezvous" + where + " failed: " + adapter.error().message());
    }
    std::string m = e.what();
    if (m.find("imed out") != std::string::npos) {
      return DeadlineExceeded(who + ": rendezvous" + where + " failed connecting to peers: " + m);
    }
    return Unavailable(who + ": rendezvous" + where + " failed connecting to peers: " + m);
  }
  return std::unique_ptr<Communicator>(
      std::make_unique<GlooCommunicator>(options, std::move(context), store));
}

}  // namespace parallax::comm::internal
