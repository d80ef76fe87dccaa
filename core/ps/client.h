// PsClient: a worker's asynchronous connection to every PS shard of a job.
//
// Pull/Push/PushPull return a Ticket at once; the request has been split by
// partition and queued for every shard concurrently. Wait(ticket, deadline)
// blocks until every shard answered (or the deadline passes). Before a push
// leaves the process its ids are deduplicated and the gradients of repeated
// ids summed; a pull sends each distinct id once and fills every position of
// the caller's id list, in the caller's order.
//
// Ownership: buffers passed as `out` must stay alive, and the caller must not
// read them, until Wait() for that ticket returned OK or an error other than
// DEADLINE_EXCEEDED. Input spans are copied before the call returns.
//
// Versions: every pull reply carries its partition's version (the number of
// updates applied to it); a later push to that partition carries the version
// last pulled, which lets the shard measure staleness.
//
// Thread-safety: all methods may be called from any thread. A single I/O
// thread owns the sockets.
#ifndef PARALLAX_CORE_PS_CLIENT_H_
#define PARALLAX_CORE_PS_CLIENT_H_

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "core/ps/consistency_schedule.h"
#include "core/ps/curve.h"
#include "core/ps/plan.h"
#include "parallax/status.h"

namespace parallax::ps {

using Ticket = uint64_t;
using Deadline = std::chrono::steady_clock::time_point;

// A deadline `ms` milliseconds from now.
inline Deadline DeadlineIn(int64_t ms) {
  return std::chrono::steady_clock::now() + std::chrono::milliseconds(ms);
}

// A request whose last shard answered (PsClientOptions::on_complete).
struct CompletedRequest {
  enum class Kind { kPull, kPush, kPushPull, kControl };
  Kind kind = Kind::kControl;
  uint32_t var = 0;  // data requests: the variable
  std::chrono::steady_clock::time_point submitted;  // when Pull/Push/... was called
  std::chrono::steady_clock::time_point completed;  // when the last reply was handled
};

// Where a PS shard's process of one generation listens
// (schemas/ps_wire.md, "Fencing").
struct ShardAddress {
  std::string endpoint;
  std::string curve_key;  // the shard's CURVE public key; empty without CURVE
  uint32_t generation = 0;
};

// Finds the process of generation `generation` of shard `shard`, waiting at
// most until `deadline`: DEADLINE_EXCEEDED when it has not been published
// by then, any other error when it never will be.
using ShardResolver =
    std::function<StatusOr<ShardAddress>(uint32_t shard, uint32_t generation, Deadline deadline)>;

struct PsClientOptions {
  PsPlan plan;
  // ZeroMQ endpoint of every shard, by shard index (size == plan.num_shards).
  std::vector<std::string> shard_endpoints;
  // Contributor rank written into every request: the worker's rank, or its
  // host's index when this client pushes a host's aggregated gradients.
  uint32_t worker = 0;
  // Job attempt sent for fencing; 0 disables the shard's check.
  uint32_t attempt = 0;
  // Each shard's generation, sent for fencing (schemas/ps_wire.md,
  // "Fencing"), by shard index; empty: 0 for every shard (not checked).
  std::vector<uint32_t> shard_generations;
  // Recovery of a lost shard (async and ssp; docs/RELIABILITY.md, "A lost PS
  // shard"). A shard is lost when its connection drops (ZeroMQ heartbeats
  // find a silent peer too) or it answers STALE_GENERATION. The client then
  // holds that shard's requests, asks `resolve_shard` (on a thread of its
  // own) for the shard's next generation, connects to it and sends it every
  // request the lost process had not answered, in the order they were made
  // (a push is answered only once it applied, so none of those was). Until
  // then requests to the shard wait; other shards are served as usual. When
  // no next generation is found within `shard_recovery_timeout_ms`, every
  // waiting and later request to that shard fails with UNAVAILABLE naming
  // it. Empty: a lost shard's requests wait for their caller's deadline.
  // REQUIRES: not together with `shared_memory` (a region is mapped by one
  // process; the resent values would be in it).
  ShardResolver resolve_shard;
  int64_t shard_recovery_timeout_ms = 60000;
  // CURVE (core/ps/curve.h): each shard's public key, by shard index, and
  // this client's key pair, whose public key the shards must admit. Empty
  // shard_curve_keys: plain TCP.
  std::vector<std::string> shard_curve_keys;
  CurveKeyPair curve_keys;
  // Same-host shared memory (schemas/ps_wire.md, "Shared memory"): for each
  // shard the client makes a region of `shared_memory_bytes` and names it to
  // the shard (ATTACH). A shard on this machine maps it, and from its answer
  // on gradients and rows go through the region while the socket carries
  // headers, ids and offsets. Values go inline, as without it, before that
  // answer, for a request that does not fit the free space, and for every
  // request to a shard that could not map the region (one on another
  // machine: the region is then freed, and the refusal logged once).
  bool shared_memory = false;
  size_t shared_memory_bytes = size_t{64} << 20;
  // Batch(): the largest message (all frames) sent to one shard; a shard's
  // parts over it go as several batches (a single part over it goes alone).
  // Keep it under the shards' --max-message-mb.
  size_t max_batch_bytes = size_t{64} << 20;
  // For tracing (trainer/timeline.h): called on the I/O thread, with the
  // client's lock held, when a request's last shard answered (never for a
  // request sent to no shard). Must be quick and must not call the client.
  // Empty: no clock is read.
  std::function<void(const CompletedRequest&)> on_complete;
};

// Bytes of the ZeroMQ frames a client sent to and received from the shards
// (header + ids + values frames, as handed to and taken from the sockets by
// the I/O thread), by operation: PUSH requests and their acks count as
// push; PULL requests and their rows as pull; a PUSH_PULL request as push
// and its rows as pull; CLOCK, SAVE, LOAD, STATS, ATTACH and errors as
// other. Values moved through shared memory are not in them: they never
// cross a socket (the 16-byte reference that replaces them is).
struct TransportBytes {
  int64_t push_sent = 0, push_received = 0;
  int64_t pull_sent = 0, pull_received = 0;
  int64_t other_sent = 0, other_received = 0;
  // Messages handed to the shard sockets, every op (a batch counts once,
  // a request sent again to a recovered shard again).
  int64_t messages_sent = 0;
};

// A pull's row version check (schemas/ps_wire.md, "Row versions"; the row
// cache's `cache_rule = "version"`): the shard sends a row only when the
// caller holds none or its copy is more than `bound` pushes behind.
struct RowVersionCheck {
  // Per id: the version of the row the caller holds, or ps_wire::kNotHeld.
  std::span<const uint32_t> held;
  int64_t bound = 0;
  // Out, per id: the row's version now when its row was sent (and written
  // to the pull's `out`), ps_wire::kRowFresh when not (that row of `out` is
  // left as it was).
  std::vector<uint32_t>* versions = nullptr;
};

// One call of a batch (PsClient::Batch): what Pull, Push, PushPull or Write
// would be given.
struct BatchCall {
  enum class Kind { kPull, kPush, kPushPull, kWrite };
  Kind kind = Kind::kPull;
  uint32_t var = 0;
  std::span<const int64_t> ids;
  std::span<const float> grads;       // kPush, kPushPull: gradients; kWrite: values
  std::vector<float>* out = nullptr;  // kPull, kPushPull: the rows
  const RowVersionCheck* check = nullptr;  // kPull: as PullChecked
};

class PsClient {
 public:
  virtual ~PsClient() = default;

  // Connects (asynchronously, as ZeroMQ does) to every shard and starts the
  // I/O thread. Fails on a bad endpoint or options that do not fit the plan.
  static StatusOr<std::unique_ptr<PsClient>> Create(const PsClientOptions& options);

  // Rows of `ids` of variable `var` as of worker step `clock` (sync: after
  // step clock-1 applied; ssp: once the slowest worker reached
  // clock - staleness; async: newest). `out` is resized to ids.size() × dim.
  // INVALID_ARGUMENT for an unknown variable or an id outside it.
  virtual StatusOr<Ticket> Pull(uint32_t var, std::span<const int64_t> ids, int64_t clock,
                                std::vector<float>* out) = 0;

  // Pull with a row version check (RowVersionCheck): `ids` distinct,
  // check.held.size() == ids.size(); never through shared memory.
  // INVALID_ARGUMENT otherwise.
  virtual StatusOr<Ticket> PullChecked(uint32_t var, std::span<const int64_t> ids,
                                       const RowVersionCheck& check, int64_t clock,
                                       std::vector<float>* out) = 0;

  // Gradients of step `clock` for `ids` (grads.size() == ids.size() × dim).
  // In sync mode every partition of `var` receives a (possibly empty) push,
  // since the shard waits for one contribution per worker per step.
  virtual StatusOr<Ticket> Push(uint32_t var, std::span<const int64_t> ids,
                                std::span<const float> grads, int64_t clock) = 0;

  // Push, then the same ids' rows after the push applied (sync: after the
  // whole step applied), in one round trip.
  virtual StatusOr<Ticket> PushPull(uint32_t var, std::span<const int64_t> ids,
                                    std::span<const float> grads, int64_t clock,
                                    std::vector<float>* out) = 0;

  // The rows of `ids` (distinct) become `values` (ids.size() × dim) on their
  // shards, outside any step: a job's initial values, written before the
  // first pull. The rows' optimizer state is left alone. INVALID_ARGUMENT
  // for repeated ids.
  virtual StatusOr<Ticket> Write(uint32_t var, std::span<const int64_t> ids,
                                 std::span<const float> values) = 0;

  // Pull and Write of the rows' whole state (schemas/ps_wire.md, "Row
  // state"): per row RowStateWidth(var) floats (core/ps/row_state.h), its
  // weights, optimizer slots and step, always float32 and over the socket.
  // What the trainer's hot rows take over from their shards (PullState at
  // step `clock`, as Pull) and hand back at a checkpoint (WriteState, as
  // Write: distinct ids, outside steps). INVALID_ARGUMENT for a dynamic
  // table; a shard refuses a state no row can hold (BAD_ROW_STATE).
  virtual StatusOr<Ticket> PullState(uint32_t var, std::span<const int64_t> ids, int64_t clock,
                                     std::vector<float>* out) = 0;
  virtual StatusOr<Ticket> WriteState(uint32_t var, std::span<const int64_t> ids,
                                      std::span<const float> states) = 0;

  // Several calls of step `clock` (Write: outside steps, clock 0), every
  // part a shard owns sent to it in one message and answered in one
  // (schemas/ps_wire.md, "Batches"): one request per shard instead of one
  // per variable and partition. Each call behaves as its own Pull, Push,
  // PushPull or Write would, and gets its own ticket (in `calls`' order);
  // a shard's answer completes them all together, since it comes once
  // every part is answerable (a sync pull of step t after step t−1
  // applied). A shard refuses a batch whole: one bad part fails every call
  // with parts on that shard and nothing of the batch applies there. A
  // batch over `max_batch_bytes` for one shard goes as several. Nothing is
  // sent when a call is invalid (INVALID_ARGUMENT naming it). A shard
  // applies its parts in the calls' order.
  virtual StatusOr<std::vector<Ticket>> Batch(std::span<const BatchCall> calls,
                                              int64_t clock) = 0;

  // Tells every shard this worker finished step `clock` (ssp progress for
  // workers that push nothing to some shard).
  virtual StatusOr<Ticket> Clock(int64_t clock) = 0;

  // Checkpoint every shard's partitions to / from `dir` (each shard writes
  // its own files; a shared directory holds the whole table). In sync mode a
  // Save with step s > 0 is written once every partition applied steps
  // 0..s-1, and holds step s until then: a consistent cut. step 0: now.
  virtual StatusOr<Ticket> Save(const std::string& dir, int64_t step) = 0;
  // `step`: the checkpoint's. A variable the checkpoint's plan held on
  // workers (a plan that moved it here since) has no partition files: each
  // shard takes its rows and optimizer state from the checkpoint's
  // dense.pxck, with `step` steps applied.
  virtual StatusOr<Ticket> Load(const std::string& dir, int64_t step = 0) = 0;

  // A runtime setting of variable `var` (ps_wire::kAllVariables: every
  // variable), in effect from step `clock` on (schemas/ps_wire.md,
  // "Settings"): "lr" = the learning rate of the variable's optimizer, a
  // decimal number > 0. Sent to every shard; each applies it to the
  // partitions it holds. INVALID_ARGUMENT (BAD_SETTING, UNKNOWN_VARIABLE)
  // from Wait() when a shard refuses it; nothing changes on that shard.
  virtual StatusOr<Ticket> Set(uint32_t var, const std::string& name, const std::string& value,
                               int64_t clock) = 0;

  // The job's consistency mode from step `from` on (schemas/ps_wire.md,
  // "Settings": a SET "consistency" to every shard). The client uses it at
  // once for requests of steps >= from (sync: a push goes to every
  // partition); the shards from their ack. INVALID_ARGUMENT (BAD_SETTING)
  // from Wait() when a shard refuses it, e.g. because it already served a
  // step >= from.
  virtual StatusOr<Ticket> SetConsistency(int64_t from, const ConsistencyMode& mode) = 0;
  // The mode of step `step` as this client knows it (the plan's, and every
  // SetConsistency since).
  virtual ConsistencyMode ConsistencyAt(int64_t step) const = 0;
  virtual ConsistencySchedule consistency() const = 0;

  // Each shard's counters as a JSON object; out->size() == num_shards.
  virtual StatusOr<Ticket> Stats(std::vector<std::string>* out) = 0;

  // Blocks until `ticket` completed or `deadline`. OK or the first shard
  // error (the shard's code and text). DEADLINE_EXCEEDED leaves the ticket
  // pending (Wait again later); any other result consumes it. NOT_FOUND for a
  // ticket that was never issued or already consumed.
  virtual Status Wait(Ticket ticket, Deadline deadline) = 0;

  virtual const PsPlan& plan() const = 0;

  // Each partition of variable `var`'s `resets` as of the last data reply
  // from it (schemas/ps_wire.md, "Row cache"; 0 before any): a change means
  // the shard evicted or re-initialised rows of that partition. Empty for an
  // unknown variable.
  virtual std::vector<uint16_t> PartitionResets(uint32_t var) const = 0;

  // Totals since Create(); safe to call from any thread.
  virtual TransportBytes transport_bytes() const = 0;
};

// Submits `calls` at step `clock` as one Batch (`batch`), or each as its
// own Pull, Push, PushPull or Write; appends the tickets of the calls sent to
// *tickets, in order. On an error the calls before index tickets->size()
// were sent (with `batch`: none).
Status SubmitCalls(PsClient* ps, std::span<const BatchCall> calls, int64_t clock, bool batch,
                   std::vector<Ticket>* tickets);

}  // namespace parallax::ps

#endif  // PARALLAX_CORE_PS_CLIENT_H_
