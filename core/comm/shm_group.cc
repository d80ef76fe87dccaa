#include "core/comm/shm_group.h"

#include <linux/futex.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <climits>
#include <cstring>

#include "core/base/logging.h"
#include "core/comm/reduce.h"

namespace parallax::comm {

// One per local rank, in the segment; written only by that rank (but for
// `sleepers`), so each sits on cache lines of its own.
struct alignas(128) ShmGroup::RankLine {
  std::atomic<uint32_t> arrived;   // the last step this rank arrived at
  std::atomic<uint32_t> sleepers;  // ranks asleep on `arrived`
  std::atomic<int32_t> pid;
  uint32_t unused;
  Call header[2];  // the call of a first step, by the step's parity
};

namespace {

using Clock = std::chrono::steady_clock;

static_assert(std::atomic<uint32_t>::is_always_lock_free);
static_assert(sizeof(ShmGroup::Call) == 16);

constexpr size_t kPage = 4096;
// In the segment's first page, after the nonce: why FailBroadcast failed.
constexpr size_t kFailureOffset = 64;
constexpr size_t kFailureBytes = 1024;
constexpr size_t kLineBytes = 128;
// Chunks up to this size are summed by every rank itself (one step).
constexpr size_t kDirectBytes = 64 << 10;
// How a wait waits. A peer that is running arrives within microseconds:
// spin. One that lost its CPU briefly comes back sooner than a sleeper would
// be woken and scheduled again: yield the CPU for a while. Not for long: a
// peer still computing its step (ranks drift apart by milliseconds) is better
// slept on, since on a host with more processes than cores (ranks, PS shards)
// a yielding waiter still takes CPU time from the very peer it waits for. W3
// on 2 cores ran 1.06x faster with 0.5 ms of yielding than with 20 ms
// (docs/PERFORMANCE.md, "Dense all-reduce through shared memory").
constexpr auto kSpin = std::chrono::microseconds(10);
constexpr auto kYield = std::chrono::microseconds(500);
constexpr auto kSleepSlice = std::chrono::milliseconds(1);

size_t RoundUp(size_t n, size_t to) { return (n + to - 1) / to * to; }

inline void CpuRelax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

void FutexWait(std::atomic<uint32_t>* word, uint32_t seen, std::chrono::nanoseconds timeout) {
  timespec ts{};
  ts.tv_sec = static_cast<time_t>(timeout.count() / 1'000'000'000);
  ts.tv_nsec = static_cast<long>(timeout.count() % 1'000'000'000);
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAIT, seen, &ts, nullptr, 0);
}

void FutexWake(std::atomic<uint32_t>* word) {
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAKE, INT_MAX, nullptr, nullptr, 0);
}

// [begin, end) of slice `i` of `n` elements cut in `k`.
std::pair<size_t, size_t> Slice(size_t n, int k, int i) {
  const size_t per = n / k, extra = n % k;
  const size_t begin = i * per + std::min<size_t>(i, extra);
  return {begin, begin + per + (static_cast<size_t>(i) < extra ? 1 : 0)};
}

// Walks the concatenation of pieces a chunk at a time: Seek() to a chunk's
// first byte (only forward), then ForEach() visits the parts of pieces in
// [begin, end) as (piece bytes, offset from begin, length), in order.
class PieceCursor {
 public:
  PieceCursor(std::span<const Piece> pieces, size_t esize) : pieces_(pieces), esize_(esize) {}

  size_t total_bytes() const {
    size_t n = 0;
    for (const Piece& p : pieces_) n += p.count * esize_;
    return n;
  }

  void Seek(size_t begin) {
    while (index_ < pieces_.size() && start_ + Bytes(index_) <= begin) {
      start_ += Bytes(index_);
      ++index_;
    }
  }

  template <typename Fn>
  void ForEach(size_t begin, size_t end, Fn fn) const {
    size_t start = start_;
    for (size_t i = index_; i < pieces_.size() && start < end; start += Bytes(i), ++i) {
      const size_t from = std::max(begin, start), to = std::min(end, start + Bytes(i));
      if (from < to)
        fn(static_cast<char*>(pieces_[i].data) + (from - start), from - begin, to - from);
    }
  }

 private:
  size_t Bytes(size_t i) const { return pieces_[i].count * esize_; }

  const std::span<const Piece> pieces_;
  const size_t esize_;
  size_t index_ = 0;  // the piece holding byte start_ ...
  size_t start_ = 0;  // ... which is its first byte
};

}  // namespace

size_t ShmGroup::SegmentBytes(int local_size, size_t chunk_bytes) {
  return kPage + RoundUp(local_size * kLineBytes, kPage) + 2 * local_size * chunk_bytes;
}

ShmGroup::ShmGroup(ShmGroupOptions options, std::unique_ptr<ShmSegment> segment)
    : options_(std::move(options)),
      segment_(std::move(segment)),
      me_(options_.local_rank),
      size_(static_cast<int>(options_.ranks.size())),
      pidfds_(size_, -1),
      pids_(size_, 0),
      in_(size_) {
  static_assert(sizeof(RankLine) == kLineBytes);
  Line(me_).pid.store(getpid(), std::memory_order_release);
}

ShmGroup::~ShmGroup() {
  for (int fd : pidfds_) {
    if (fd >= 0) close(fd);
  }
}

ShmGroup::RankLine& ShmGroup::Line(int local) const {
  return *reinterpret_cast<RankLine*>(segment_->data() + kPage + local * kLineBytes);
}

char* ShmGroup::Slot(int set, int local) const {
  const size_t base = kPage + RoundUp(size_ * kLineBytes, kPage);
  return segment_->data() + base +
         (static_cast<size_t>(set) * size_ + local) * options_.chunk_bytes;
}

void ShmGroup::WatchPeers() {
  const pid_t self = getpid();
  for (int j = 0; j < size_; ++j) {
    pids_[j] = Line(j).pid.load(std::memory_order_acquire);
    // Ranks that are threads of this process (tests) need no watching.
    if (j == me_ || pids_[j] == self || pids_[j] <= 0) continue;
    pidfds_[j] = static_cast<int>(syscall(SYS_pidfd_open, pids_[j], 0));
    if (pidfds_[j] < 0) {
      PX_LOG(DEBUG) << options_.who << ": pidfd_open(" << pids_[j] << "): " << std::strerror(errno)
                    << "; watching it with kill(0) instead";
    }
  }
}

bool ShmGroup::Exited(int local) {
  if (pidfds_[local] >= 0) {
    pollfd p{pidfds_[local], POLLIN, 0};
    return poll(&p, 1, 0) > 0;
  }
  const pid_t pid = pids_[local];
  return pid > 0 && pid != getpid() && kill(pid, 0) != 0 && errno == ESRCH;
}

std::string ShmGroup::Rank(int local) const {
  return "rank " + std::to_string(options_.ranks[local]);
}

std::string ShmGroup::Describe(const Call& call) const {
  const auto type = static_cast<DataType>(call.type);
  if (call.op == kFailedBroadcast) return "nothing (its all-reduce among hosts failed)";
  std::string what = call.op == kBroadcast        ? "Broadcast"
                     : call.op == kReduceToLeader ? "Reduce to the host's first rank"
                                                  : "AllReduce";
  return what + " of " + std::to_string(call.count) + " " + std::string(DataTypeName(type));
}

Status ShmGroup::Fail(Status s) {
  broken_ = s;
  return s;
}

Status ShmGroup::WaitFor(int j, uint32_t step, const Call& call, Deadline deadline) {
  RankLine& line = Line(j);
  auto arrived = [&](uint32_t seen) { return static_cast<int32_t>(seen - step) >= 0; };
  const auto start = Clock::now();
  for (int i = 1;; ++i) {
    if (arrived(line.arrived.load(std::memory_order_acquire))) return Status::Ok();
    CpuRelax();
    if (i % 64 == 0 && Clock::now() > start + kSpin) break;
  }
  while (Clock::now() < start + kYield) {
    if (arrived(line.arrived.load(std::memory_order_acquire))) return Status::Ok();
    sched_yield();
  }
  while (true) {
    const auto now = Clock::now();
    if (now >= deadline) {
      return DeadlineExceeded(options_.who + ": " + Describe(call) + " through shared memory: " +
                              Rank(j) + " did not arrive before the deadline (is it alive and " +
                              "issuing the same collectives?)");
    }
    if (Exited(j)) {
      return Unavailable(options_.who + ": " + Describe(call) +
                         " through shared memory: " + Rank(j) + " (pid " +
                         std::to_string(pids_[j]) + ") exited in the middle of it");
    }
    line.sleepers.fetch_add(1);
    const uint32_t seen = line.arrived.load();
    if (!arrived(seen))
      FutexWait(&line.arrived, seen, std::min<Clock::duration>(kSleepSlice, deadline - now));
    line.sleepers.fetch_sub(1);
    if (arrived(line.arrived.load(std::memory_order_acquire))) return Status::Ok();
  }
}

Status ShmGroup::Step(const Call& call, bool check, Deadline deadline) {
  const uint32_t step = ++steps_;
  RankLine& mine = Line(me_);
  if (check) mine.header[step & 1] = call;
  // seq_cst store, then seq_cst load of sleepers: a rank that went to sleep
  // on our counter either saw this store or is seen here (and woken).
  mine.arrived.store(step);
  if (mine.sleepers.load() > 0) FutexWake(&mine.arrived);
  for (int j = 0; j < size_; ++j) {
    if (j == me_) continue;
    Status s = WaitFor(j, step, call, deadline);
    if (!s.ok()) return Fail(s);
  }
  if (!check) return Status::Ok();
  std::string diffs;
  for (int j = 0; j < size_; ++j) {
    const Call& theirs = Line(j).header[step & 1];
    if (theirs.op == kFailedBroadcast && call.op != kFailedBroadcast) {
      const char* why = segment_->data() + kFailureOffset;
      return Fail(Unavailable(options_.who + ": " + Describe(call) + ": " + Rank(j) +
                              ", which reduces this host's sum with the other hosts, failed: " +
                              std::string(why, strnlen(why, kFailureBytes))));
    }
    if (std::memcmp(&theirs, &call, sizeof(Call)) == 0) continue;
    diffs += "; " + Rank(j) + " called " + Describe(theirs) + " but " + Rank(me_) + " called " +
             Describe(call);
  }
  if (diffs.empty()) return Status::Ok();
  return Fail(InvalidArgument(options_.who + ": ranks on this host disagree on the collective" +
                              diffs +
                              " (every rank must pass the same operation, count and type)"));
}

Status ShmGroup::Reduce(std::span<const Piece> pieces, DataType type, bool to_all,
                        Deadline deadline) {
  if (!broken_.ok()) return broken_;
  const size_t esize = DataTypeSize(type);
  const size_t chunk = options_.chunk_bytes / esize * esize;
  PieceCursor cursor(pieces, esize);
  const size_t total = cursor.total_bytes();
  const Call call{to_all ? kReduceAll : kReduceToLeader, static_cast<uint32_t>(type),
                  total / esize};
  const bool wanted = to_all || me_ == 0;
  std::vector<const void*>& in = in_;
  for (size_t off = 0; off < total; off += chunk) {
    const size_t n = std::min(chunk, total - off);  // bytes
    const int set = set_;
    set_ ^= 1;
    cursor.Seek(off);
    char* mine = Slot(set, me_);
    cursor.ForEach(off, off + n,
                   [&](char* p, size_t at, size_t len) { std::memcpy(mine + at, p, len); });
    PX_RETURN_IF_ERROR(Step(call, off == 0, deadline));
    if (size_ <= 2 || n <= kDirectBytes) {
      if (!wanted) continue;
      // This rank's part is still in its pieces (and in cache): read it there.
      cursor.ForEach(off, off + n, [&](char* p, size_t at, size_t len) {
        for (int j = 0; j < size_; ++j) in[j] = j == me_ ? p : Slot(set, j) + at;
        SumOf(type, p, in.data(), size_, len / esize);
      });
      continue;
    }
    // Reduce-scatter: slice i of the chunk is summed by local rank i into
    // its own slot, then every rank that wants the sum copies the slices.
    const size_t elems = n / esize;
    auto [begin, end] = Slice(elems, size_, me_);
    for (int j = 0; j < size_; ++j) in[j] = Slot(set, j) + begin * esize;
    SumOf(type, mine + begin * esize, in.data(), size_, end - begin);
    PX_RETURN_IF_ERROR(Step(call, false, deadline));
    if (!wanted) continue;
    cursor.ForEach(off, off + n, [&](char* p, size_t at, size_t len) {
      for (int j = 0; j < size_; ++j) {
        auto [b, e] = Slice(elems, size_, j);
        const size_t from = std::max(at, b * esize), to = std::min(at + len, e * esize);
        if (from < to) std::memcpy(p + (from - at), Slot(set, j) + from, to - from);
      }
    });
  }
  return Status::Ok();
}

void ShmGroup::FailBroadcast(const Status& why, Deadline deadline) {
  if (!broken_.ok()) return;
  const std::string text = why.ToString().substr(0, kFailureBytes - 1);
  std::memcpy(segment_->data() + kFailureOffset, text.c_str(), text.size() + 1);
  // The others wait at the step; arrive there and let them read the failure.
  Step(Call{kFailedBroadcast, 0, 0}, true, deadline).IgnoreError();
  broken_ = why;
}

Status ShmGroup::Broadcast(std::span<const Piece> pieces, DataType type, Deadline deadline) {
  if (!broken_.ok()) return broken_;
  const size_t esize = DataTypeSize(type);
  const size_t chunk = options_.chunk_bytes / esize * esize;
  PieceCursor cursor(pieces, esize);
  const size_t total = cursor.total_bytes();
  const Call call{kBroadcast, static_cast<uint32_t>(type), total / esize};
  for (size_t off = 0; off < total; off += chunk) {
    const size_t n = std::min(chunk, total - off);
    const int set = set_;
    set_ ^= 1;
    cursor.Seek(off);
    char* slot = Slot(set, 0);
    if (me_ == 0) {
      cursor.ForEach(off, off + n,
                     [&](char* p, size_t at, size_t len) { std::memcpy(slot + at, p, len); });
    }
    PX_RETURN_IF_ERROR(Step(call, off == 0, deadline));
    if (me_ != 0) {
      cursor.ForEach(off, off + n,
                     [&](char* p, size_t at, size_t len) { std::memcpy(p, slot + at, len); });
    }
  }
  return Status::Ok();
}

}  // namespace parallax::comm
