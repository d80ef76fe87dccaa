// DynamicTable: an embedding table with no row count, as recommender models
// train them. Any 64-bit value is an id (an int64 from the model is taken as
// its unsigned bits: a hash of a raw feature value); an id becomes a row only
// after it was seen in `admit_after` contributions, and rows go again when
// they have not been touched for `ttl_steps` steps or when the table is at
// its row budget `max_rows` and a new row needs room (the coldest first, by
// LRU or sampled LFU). A row evicted and seen again starts over from the
// initializer.
//
// Layout: a hash map (Abseil's absl::flat_hash_map, Debian's libabsl-dev:
// open addressing over flat arrays, and prefetch(key), with which AdmitAll
// fetches the index entries of a batch's next ids while it looks up the
// current one; a hash miss per id is what the dynamic table pays over the
// fixed table's dense index) from id to a 64-bit slot; each slot holds the
// row's weights and optimizer state together, contiguous (1 + StateSlots
// floats × dim), in chunks of 16,384 rows (growing never copies rows; on
// transparent huge pages, as the table's other large arrays), plus
// its id and, when TTL or a budget needs them, the step it was last touched,
// how often, and its place in a list ordered by last step. A freed slot is
// reused by the next new row, so memory stays at the budget under a stream
// of new ids.
// Admission counts contributions (one call of Admit per distinct id and
// push) in a count-min sketch of `sketch_width` × 4 32-bit counters (16 ×
// sketch_width bytes whatever the number of ids): it may admit an id a
// little early when other ids share its counters, never late. Ids in
// `never_admit` (a padding id, a model's "missing value") are never rows and
// read as zeros.
//
// Steps: AdvanceTo(step) starts a step (and evicts the rows whose TTL ran
// out); every row touched from then on belongs to the step in progress and
// is never evicted for the budget under it. If one step alone needs more
// rows than the budget, Admit fails with FAILED_PRECONDITION saying so and
// what to set. Eviction samples (LFU) come from a seeded generator whose
// state is part of the checkpoint (Serialize), so a run and its resume evict
// the same rows.
//
// Not thread-safe: owned by one thread (a shard's event loop, or a process
// training alone).
#ifndef PARALLAX_CORE_PS_DYNAMIC_TABLE_H_
#define PARALLAX_CORE_PS_DYNAMIC_TABLE_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/ps/plan.h"
#include "parallax/status.h"

namespace parallax::ps {

// kLru: the row touched longest ago; kLfu: of `lfu_sample` rows drawn at
// random, the one with the fewest contributions (include/parallax/settings.h).
using parallax::EvictionPolicy;

struct DynamicTableOptions {
  // The variable: its id (for the initializer), dim, optimizer and
  // initializer. `rows` is ignored.
  VariableSpec var;
  int64_t admit_after = 1;  // contributions before an id becomes a row (1: at once)
  int64_t ttl_steps = 0;    // a row untouched this many steps is evicted (0: never)
  int64_t max_rows = 0;     // rows at most (0: no budget)
  EvictionPolicy policy = EvictionPolicy::kLru;
  int lfu_sample = 16;              // rows compared per LFU eviction
  uint32_t sketch_width = 1 << 20;  // counters per row of the admission sketch
  std::vector<uint64_t> never_admit;
  uint64_t seed = 0;  // of the sampled eviction
  // Of the sketch's hashes: the same for every shard of a variable, so that
  // the sketches of a checkpoint's shards add up under another partitioning
  // (Absorb).
  uint64_t sketch_seed = 0;
  // A table with a budget commits the memory of its first rows when it is
  // created (Create; not Restore, which holds what it restores): their
  // values, bookkeeping and index entries, written once on huge pages, up to
  // this many bytes (whole when the budget fits). A shard passes its
  // --prefault-mb, as a fixed table's arrays get it: rows then land in
  // memory already mapped instead of faulting in (and being zeroed by the
  // kernel) while the shard serves. 0: none.
  size_t commit_bytes = 0;
};

// The counters, by the names STATS, `parallax status` and Python give them.
struct DynamicTableStats;
struct DynamicCounter {
  const char* name;
  int64_t DynamicTableStats::*field;
};

struct DynamicTableStats {
  int64_t rows = 0;                // held now
  int64_t admitted = 0;            // ids that became rows
  int64_t not_admitted_reads = 0;  // reads of an id that is not a row (answered by the initializer)
  int64_t dropped_gradients = 0;   // gradients of ids not (yet) admitted
  int64_t evicted_ttl = 0;
  int64_t evicted_budget = 0;
  int64_t bytes = 0;  // rows, their bookkeeping, the index and the sketch
};
inline constexpr DynamicCounter kDynamicCounters[] = {
    {"rows", &DynamicTableStats::rows},
    {"admitted", &DynamicTableStats::admitted},
    {"not_admitted_reads", &DynamicTableStats::not_admitted_reads},
    {"dropped_gradients", &DynamicTableStats::dropped_gradients},
    {"evicted_ttl", &DynamicTableStats::evicted_ttl},
    {"evicted_budget", &DynamicTableStats::evicted_budget},
    {"bytes", &DynamicTableStats::bytes},
};


class DynamicTable {
 public:
  static constexpr int64_t kNotARow = -1;

  // INVALID_ARGUMENT naming the setting when dim is 0, admit_after < 1,
  // ttl_steps or max_rows < 0, lfu_sample < 1 or sketch_width < 1.
  static StatusOr<std::unique_ptr<DynamicTable>> Create(DynamicTableOptions options);
  // About the bytes one row of a table of these options costs: its weights
  // and optimizer state, its bookkeeping and its index entry (what a budget
  // of max_rows rows costs; the admission sketch comes on top).
  static int64_t BytesPerRow(const DynamicTableOptions& options);
  // How many rows' memory Create commits (DynamicTableOptions::commit_bytes).
  static size_t CommittedRows(const DynamicTableOptions& options);
  ~DynamicTable();

  // Starts step `step` (steps only grow) and evicts the rows whose TTL ran
  // out: those last touched before step - ttl_steps.
  void AdvanceTo(int64_t step);
  int64_t step() const { return step_; }

  // The slot of `id`, or kNotARow. Touches nothing.
  int64_t Find(uint64_t id) const;
  // Writes `id`'s dim values to `out`: its row's weights (the row becomes
  // the step's), else the initializer's values without storing them (zeros
  // for a never-admitted id).
  void Read(uint64_t id, float* out);
  // Read for n ids (n × dim values into `out`), their index entries and rows
  // fetched ahead.
  void ReadAll(const uint64_t* ids, size_t n, float* out);
  // ReadAll for ids whose slots AdmitAll gave in the step in progress, with
  // nothing admitted since (a push's rows after it applied): no lookup.
  void ReadSlots(const uint64_t* ids, const int64_t* slots, size_t n, float* out);
  // Counts one contribution of `id` and returns its slot, creating the row
  // (from the initializer) when this contribution admits it; kNotARow while
  // it is not admitted (its gradient is then to be dropped: count it with
  // DropGradient). FAILED_PRECONDITION when the table is at max_rows and
  // every row belongs to the step in progress. Call once per distinct id of
  // a contribution.
  StatusOr<int64_t> Admit(uint64_t id);
  // Admit for the n ids of one contribution, `slots[i]` for `ids[i]`: each
  // distinct id counts once (a repeat gets its first occurrence's slot), in
  // the order of first occurrence; with `distinct`, also whether no id
  // repeats. The rows held are looked up first, their index entries fetched
  // ahead (a shard's batch is scattered over a large table). Stops at the
  // first error.
  //
  // What a row that makes room for a new one must not be: with kStep (sync),
  // a row of the step in progress; with kContribution (async, ssp: a push
  // of any step may come at any time), a row of this call. Under async, a
  // worker far behind the others pushes at an old step while the table's
  // step is the newest any push named: sparing that step's rows would spare
  // every row the late worker touches until the budget is full.
  enum class Spare { kStep, kContribution };
  Status AdmitAll(const uint64_t* ids, size_t n, int64_t* slots, bool* distinct = nullptr,
                  Spare spare = Spare::kStep);
  void DropGradient() { ++stats_.dropped_gradients; }
  // One contribution (a process training alone, through the Python
  // binding): AdmitAll, then ApplyRepeated. Stops at AdmitAll's error,
  // nothing applied.
  Status Push(const uint64_t* ids, size_t n, const float* grads, float lr_scale = 1.0f);
  // The gradients of one contribution's n ids (`slots` from AdmitAll):
  // those of a repeated id summed in order, each distinct id's sum applied
  // to its row (Apply), or dropped when it is not a row.
  void ApplyRepeated(const uint64_t* ids, const int64_t* slots, size_t n, const float* grads,
                     float lr_scale = 1.0f);
  // Fetches the row in `slot` into the cache ahead of Apply or a read.
  void PrefetchRow(int64_t slot) const;
  // Applies gradient `g` (dim values) to the row in `slot` with the
  // variable's optimizer and lr × lr_scale.
  void Apply(int64_t slot, const float* g, float lr_scale = 1.0f);

  // Row versions (schemas/ps_wire.md, "Row versions"), as VariableTable's:
  // from EnableVersions() on, every Apply() to a row advances its u32 (mod
  // 2^32, skipping 0xFFFFFFFF). An id that is not a row (its reads are the
  // initializer's values) and every row held when versions were enabled or
  // restored (LOAD) are at a base drawn at random then; a row admitted
  // later starts at a number drawn for it, so a copy of what the id read
  // before (the initializer's values, or a row evicted since) is unlikely
  // to be within a cache's bound of it. (An eviction also changes the
  // shard's `resets`, which drops the workers' copies.)
  void EnableVersions();
  // The version of the row in `slot` (kNotARow: the base).
  uint32_t version(int64_t slot) const {
    const size_t i = static_cast<size_t>(slot);
    return slot == kNotARow || i >= versions_.size() ? version_base_ : versions_[i];
  }

  uint32_t dim() const { return options_.var.dim; }
  uint64_t id_at(int64_t slot) const { return meta_[static_cast<size_t>(slot)].id; }
  const float* weights(int64_t slot) const { return Row(slot); }
  // Optimizer state slot `s` of the row in `slot`.
  const float* state(int64_t slot, int s) const { return Row(slot) + (1 + s) * size_t{dim()}; }
  // The ids held now, in no particular order.
  std::vector<uint64_t> Ids() const;
  DynamicTableStats stats() const;
  // Rows evicted so far (TTL and budget).
  int64_t evictions() const { return stats_.evicted_ttl + stats_.evicted_budget; }

  // Everything that decides the table's future: rows (ids, weights, state,
  // last step, touches), the LRU order, the sketch, the generator and the
  // counters; Restore of it continues exactly as this table would.
  std::string Serialize() const;
  // INVALID_ARGUMENT (the table unchanged) when `bytes` is not a Serialize
  // of a table with these options' dim and optimizer.
  Status Restore(std::string_view bytes);

  // Resharding (a checkpoint read under another partitioning): copies into
  // this table the rows of `from` (the same variable: dim, optimizer and
  // admission sketch alike) whose id `keep` accepts, with their weights,
  // optimizer state, last step and touches, and adds `from`'s admission
  // counts to this table's (an id counted by another shard may be admitted
  // a little early here, never late). The step becomes the larger of the
  // two. INVALID_ARGUMENT, this table unchanged, when the tables disagree or
  // `from` holds an id this one holds already. Call FitBudget once every
  // source is absorbed.
  Status Absorb(const DynamicTable& from, const std::function<bool(uint64_t id)>& keep);
  // Orders the rows by last step (as a run would have) and, when they are
  // more than max_rows, evicts by the policy until they fit, rows of the
  // newest step included (no step is in progress). Returns how many it
  // evicted (counted as evicted_budget).
  int64_t FitBudget();

 private:
  struct Index;
  // With `commit`, Commit()s (Create; Restore's scratch table does not).
  DynamicTable(DynamicTableOptions options, bool commit = false);
  // Writes once the memory of CommittedRows rows: chunks, bookkeeping,
  // marks and (Index) the index's arrays.
  void Commit();
  // Slots reserved up front for a budget (larger budgets grow as needed).
  static constexpr int64_t kReservedRows = int64_t{1} << 24;

  // Rows live in chunks of kChunkRows, so the table grows without copying
  // what it holds.
  static constexpr size_t kChunkRows = size_t{1} << 14;
  float* Row(int64_t slot) {
    const size_t i = static_cast<size_t>(slot);
    return chunks_[i / kChunkRows].get() + (i % kChunkRows) * stride_;
  }
  const float* Row(int64_t slot) const {
    const size_t i = static_cast<size_t>(slot);
    return chunks_[i / kChunkRows].get() + (i % kChunkRows) * stride_;
  }
  bool NeverAdmitted(uint64_t id) const;
  void PrefetchWeights(int64_t slot) const;
  // Admit for an id the index does not hold.
  StatusOr<int64_t> AdmitMissing(uint64_t id, Spare spare);
  // A contribution's touch: counts it (LFU) and makes the row the step's.
  void Touch(int64_t slot);
  // A read's: makes the row the step's, counts nothing. Reading a row twice
  // in a step changes nothing, so the pulls a resumed run repeats (those
  // answered before its checkpoint was written) leave the table as one
  // read left it.
  void TouchRead(int64_t slot);
  // Makes room for one row: evicts the policy's coldest row that `spare`
  // allows: with kStep one last touched before step `protect_from` (the step
  // in progress, or INT64_MAX to spare none), with kContribution one not of
  // the AdmitAll call in progress. False when no row may go.
  bool EvictForBudget(int64_t protect_from, Spare spare);
  // Whether EvictForBudget(protect_from, spare) must spare the row in `slot`.
  bool Spared(size_t slot, int64_t protect_from, Spare spare) const;
  // AdmitAll's marks start over: no row is of the call to come.
  void NewEpoch();
  // A slot for a new row: a freed one, or a new one at the end.
  int64_t TakeSlot();
  void Evict(int64_t slot);
  // The row in `slot`'s version, the vector grown (at the base) to hold it.
  uint32_t& VersionOf(int64_t slot);
  bool versions_on_ = false;
  uint32_t version_base_ = 0;
  uint64_t version_draws_ = 0;      // the state of new rows' starts (SplitMix64)
  std::vector<uint32_t> versions_;  // by slot; slots past its end are at the base
  int64_t NewRow(uint64_t id);
  // The sketch's count of `id` after adding one.
  uint32_t CountContribution(uint64_t id);
  void Unlink(int64_t slot);
  void LinkTail(int64_t slot);
  uint64_t NextRandom();

  const DynamicTableOptions options_;
  const int state_slots_;
  const size_t stride_;  // floats per row: weights and state
  std::unique_ptr<Index> index_;
  // A chunk's rows: new[]'d, or (NewChunk, a chunk of 2 MiB or more) on
  // transparent huge pages (dynamic_table.cc says why); freed as they came.
  struct ChunkFree {
    ChunkFree() = default;
    ChunkFree(std::default_delete<float[]>) {}  // a new[]'d chunk
    bool aligned = false;
    void operator()(float* p) const;
  };
  using Chunk = std::unique_ptr<float[], ChunkFree>;
  Chunk NewChunk() const;
  std::vector<Chunk> chunks_;
  // A slot's bookkeeping, together so that touching a row costs one cache
  // line besides the row.
  struct Meta {
    uint64_t id;
    int64_t last_step;   // kFree for a free slot
    int64_t prev, next;  // the list by last step, oldest first
    uint32_t touches;
    uint32_t unused = 0;  // no padding: Serialize writes the bytes as they are
  };
  std::vector<Meta> meta_;
  std::vector<int64_t> adam_steps_;  // per row, adam only
  int64_t head_ = -1, tail_ = -1;
  std::vector<int64_t> free_;     // slots to reuse
  std::vector<uint32_t> sketch_;  // 4 × sketch_width
  // AdmitAll's check for repeats: marks_[slot] == epoch_ when the row was
  // seen in the current call (sized to meta_ on use; not state).
  std::vector<uint32_t> marks_;
  uint32_t epoch_ = 0;
  std::vector<int64_t> read_slots_;  // ReadAll's scratch, kept between calls
  int64_t step_ = 0;
  uint64_t rng_;
  // Whether rows' last steps, touch counts and the list are kept: only TTL
  // or a budget uses them.
  const bool ordered_;
  DynamicTableStats stats_;
};

}  // namespace parallax::ps

#endif  // PARALLAX_CORE_PS_DYNAMIC_TABLE_H_
