// libparallax: the API a trainer process (one rank of a job) uses to keep its
// variables in sync the way the job's plan says. Built-in models and custom
// trainers use it alike.
//
//   auto options = parallax::SessionOptions::FromEnvironment();  // set by the agent
//   auto session = parallax::Session::Create(*options);
//   int emb = *(*session)->RegisterSparse("emb", 100'000, 64);
//   int w = *(*session)->RegisterDense("w", 64);
//   PX_RETURN_IF_ERROR((*session)->Start());        // plan, rendezvous, PS connect
//   for (step ...) {
//     (*session)->Lookup(emb, ids, &rows);          // rows of this batch
//     ... forward/backward with (*session)->Dense(w) ...
//     (*session)->Gradient(w, dw);                  // dense, backward order
//     (*session)->Gradient(emb, ids, drows);        // sparse rows
//     PX_RETURN_IF_ERROR((*session)->Step());       // exchange + optimizer
//     (*session)->ReportMetrics(step, loss, batch);
//   }
//
// Paths (chosen per variable by the plan): "allreduce" (dense gradients are
// averaged through fusion buckets; a sparse variable there is a whole-table
// gradient), "allgather" (sparse: every rank keeps a replica; the (ids, rows)
// of every rank are gathered and applied locally), "ps" (rows live on PS
// shards; pulled per batch, gradients pushed; never materialised whole on a
// worker). Every worker-held variable is updated by the same optimizer on
// every rank; a variable keeps its optimizer whichever path it takes.
//
// Errors are Statuses naming the variable, the step and the peer or shard.
// After Step() fails the session is broken: later calls fail with
// FAILED_PRECONDITION and the job should start a new attempt.
//
// Thread-compatible: one thread drives a session. This header includes only
// the public headers beside it (include/parallax/), which are all that
// `cmake --install` ships: Session is an interface, its implementation and
// everything it uses stay in libparallax.
//
// Dense values and gradients are host memory (std::span<float>), except
// GradientDevice: a dense gradient in CUDA memory, all-reduced by NCCL in
// place. Further device-pointer variants belong beside it, named with a
// Device suffix.
#ifndef PARALLAX_INCLUDE_PARALLAX_SESSION_H_
#define PARALLAX_INCLUDE_PARALLAX_SESSION_H_

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "parallax/job_config.h"
#include "parallax/settings.h"
#include "parallax/status.h"

namespace parallax {

struct VariableOptions {
  Initializer init;
  // Explicit initial values instead of `init`: size() elements of a dense
  // variable, rows × dim of a sparse one (row-major). Rank 0's values win:
  // broadcast to the other ranks' copies, written to the PS shards by rank 0
  // at Start() (not when the job resumes from a checkpoint).
  std::vector<float> initial_values;
  // Instead of the job's [optimizer.dense] / [optimizer.sparse].
  std::optional<OptimizerSettings> optimizer;
};

struct SessionOptions {
  // Identity of this rank (schemas/task_env.md).
  int64_t job_id = 0;
  int attempt = 1;
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;
  int local_world_size = 1;
  int host_index = 0;
  int num_hosts = 1;
  int num_shards = 0;  // PS shards of the job; 0: none (sparse variables stay on workers)

  // Coordinator HOST:PORT. Empty: no coordinator, allowed only for a single
  // rank without PS (the plan is computed locally; metrics are dropped).
  std::string coordinator;
  std::string bind_address = "127.0.0.1";  // Gloo binds and advertises this
  std::string token;                       // control-plane secret
  std::string tls_ca_file;                 // PEM CA: TLS to the coordinator; "" plaintext

  // The job's settings, from its job file (PARALLAX_JOB_FILE); the
  // defaults of every key when there is none (`config.source` is empty).
  // Custom trainers read their own keys here: config.trainer.steps,
  // config.user_toml ([user], as TOML text), ...
  JobConfig config;
  bool has_job_file() const { return !config.source.empty(); }

  // Partition search ([ps] partitions = "auto"): Session::Create sets these
  // from the coordinator for each attempt (and config.ps.partitions to the
  // P under trial). In a trial attempt (trial_steps > 0) the rank runs
  // trial_warmup_steps + trial_steps steps, rank 0 publishes the median time
  // of the last trial_steps, and no checkpoint or metric point is written. A
  // custom trainer loops to options().trial_warmup_steps +
  // options().trial_steps when trial_steps > 0 (the coordinator stops a
  // trial that runs on).
  int64_t trial_steps = 0;
  int64_t trial_warmup_steps = 0;

  // Deadlines of the blocking parts.
  std::chrono::milliseconds plan_timeout{300'000};        // GetPlan
  std::chrono::milliseconds rendezvous_timeout{300'000};  // Gloo and PS endpoints
  std::chrono::milliseconds step_timeout{300'000};        // each collective / PS wait
  int rpc_timeout_ms = 30'000;
  // How long an idempotent coordinator call (plan, rendezvous key-value,
  // checkpoint commit) keeps reconnecting while the coordinator is away, so a
  // coordinator restart costs no job restart; 0: fail at once
  // (core/rpc/coordinator_client.h, "Retries").
  int coordinator_retry_ms = 30'000;

  // Dense fusion buckets (bytes of float32): gradients are packed into
  // buckets in backward order and each full bucket is all-reduced while
  // backward goes on. Smaller buckets start the all-reduce of the last layers
  // earlier, at one collective call's fixed cost each; 0: no fusion.
  size_t fusion_bucket_bytes = 64u << 20;

  // The step timeline (config.trainer.timeline) keeps at most this many
  // events per rank.
  size_t timeline_max_events = 200'000;

  // Reads the task environment (PARALLAX_JOB_ID, _ATTEMPT, _RANK,
  // _WORLD_SIZE, _LOCAL_RANK, _LOCAL_WORLD_SIZE, _HOST_INDEX, _NUM_HOSTS,
  // _NUM_SHARDS, _COORDINATOR, _BIND_ADDR, _TOKEN, _JOB_FILE, _JOB_SOURCE) and the job
  // file. INVALID_ARGUMENT naming the variable that is malformed; the job
  // file's own errors as core/config reports them. The one place libparallax
  // reads the environment.
  static StatusOr<SessionOptions> FromEnvironment();
};

class Session {
 public:
  virtual ~Session() = default;

  // Checks the options (INVALID_ARGUMENT naming the field) and connects to
  // the coordinator when there is one (UNAVAILABLE naming it).
  static StatusOr<std::unique_ptr<Session>> Create(const SessionOptions& options);

  // ---- Before Start() ----
  // Variables get ids 0, 1, ... in registration order; every rank registers
  // the same variables in the same order. ALREADY_EXISTS for a name used
  // twice; INVALID_ARGUMENT for a bad shape or optimizer.
  virtual StatusOr<int> RegisterDense(const std::string& name, size_t size,
                                      const VariableOptions& options = {}) = 0;
  virtual StatusOr<int> RegisterSparse(const std::string& name, int64_t rows, uint32_t dim,
                                       const VariableOptions& options = {}) = 0;
  // A dynamic table: an embedding table with no row count, as recommender
  // models have them. Any int64 is an id (its 64 bits: a hash of a raw
  // feature value); rows are created, admitted and evicted on the PS shards
  // as `settings` says (include/parallax/settings.h). Only PS shards hold
  // it: Start() fails, naming it, under arch "allreduce" or "allgather",
  // without shards, or with a [[variable]] path other than "ps". Lookup of
  // an id that is not a row reads the initializer's values. INVALID_ARGUMENT
  // for dim 0, a setting out of range, or initial_values.
  virtual StatusOr<int> RegisterDynamic(const std::string& name, uint32_t dim,
                                        const DynamicTableSettings& settings = {},
                                        const VariableOptions& options = {}) = 0;
  // Sparsity measurement: the ids one batch of the model's own generator
  // touches in `var` (call once per batch, over a few consecutive batches).
  // Rank 0's samples decide the plan: the variable's density (α) and, with
  // several ranks per host, its consecutive batches stand for the host's
  // ranks together; the rows' frequencies place PS partitions. At most 64
  // batches (or 4M ids) per variable are kept; later calls are ignored.
  virtual Status SampleIds(int var, std::span<const int64_t> ids) = 0;

  // Per-rank state saved with every checkpoint and restored by Start() when
  // the job resumes (the data reader's position, RNG state). `save` is
  // called at the checkpoint step after Step(); `restore` with the bytes
  // `save` returned. ALREADY_EXISTS for a name used twice;
  // FAILED_PRECONDITION after Start().
  virtual Status RegisterState(const std::string& name, std::function<std::string()> save,
                               std::function<Status(std::string_view)> restore) = 0;

  // Rank 0 builds the plan (core/plan's BuildPlan: under arch = "hybrid" the
  // cost model picks each variable's path from its shape and measured
  // density; other archs force one path; [[variable]] tables override) and
  // puts it to the coordinator; every rank waits for it (DEADLINE_EXCEEDED after plan_timeout), checks that its
  // registrations match it and hears every other rank's verdict
  // (FAILED_PRECONDITION naming the rank and the variable, on every rank), joins
  // the collectives under job/<id>/<attempt>/comm, connects to the PS shards
  // published under job/<id>/<attempt>/ps/<shard>, and receives rank 0's
  // dense initial values.
  //
  // Start() resumes from the newest complete checkpoint of the job when
  // there is one (ListCheckpoints; a checkpoint whose checksums fail is
  // skipped for the one before it): dense values and worker-side optimizer
  // state restored, PS shards LOAD their partitions, RegisterState restores
  // called; step() then returns the checkpoint's step. A trainer loops
  // `while (session->step() < steps)`.
  virtual Status Start() = 0;

  // Whether Start() resumed from a checkpoint, and from which step.
  virtual std::optional<int64_t> resumed_from() const = 0;

  // ---- After Start(), per step ----
  // The path the plan gave `var`.
  virtual StatusOr<VariablePath> PathOf(int var) const = 0;

  // Starts pulling the rows of the next step (step() + 1) while this one
  // computes. Every Lookup() of the next step whose ids are all among
  // `next_ids` is served from it (waiting for it to arrive), as often as the
  // model looks the table up; other ids are pulled. A second Prefetch() of a
  // variable in one step replaces the first. Under sync the shard answers
  // once this step is applied everywhere (no staleness); under async it
  // answers at once, so the rows miss this step's own update (the decoupled
  // eager pull); ssp within its bound.
  virtual Status Prefetch(int var, std::span<const int64_t> next_ids) = 0;
  // Prefetch() of several variables at once (vars[i] with next_ids[i]): with
  // the job's [ps] batch, their pulls go to each PS shard as one message
  // (a model of many tables, one request per shard instead of one per table).
  virtual Status PrefetchMany(std::span<const int> vars,
                              std::span<const std::span<const int64_t>> next_ids) = 0;
  // Rows of `ids` (ids.size() × dim into *rows) as of the start of this
  // step. INVALID_ARGUMENT for an id outside [0, rows) (any id of a dynamic
  // table is valid).
  virtual Status Lookup(int var, std::span<const int64_t> ids, std::vector<float>* rows) = 0;

  // Dense gradient of this step (size() elements), at most once per variable
  // per step, in backward order: it starts reducing at once.
  virtual Status Gradient(int var, std::span<const float> grad) = 0;
  // The dense gradient of this step in device memory: `count` (== size())
  // float32 values at `device_grad`, a CUDA address on this rank's GPU (a
  // torch tensor's data_ptr(); its writes must be finished). All ranks'
  // gradients are averaged in device memory through an NCCL communicator
  // (joined by every rank at its first call, under job/<id>/<attempt>/nccl),
  // the buffer holding the mean afterwards; the mean is then copied to the
  // host and applied as Gradient(var, grad) applies a host gradient. At most
  // once per variable per step, in the same order on every rank; waits for
  // the all-reduce. FAILED_PRECONDITION when the build has no CUDA/NCCL or the
  // address is not device memory. Untested: the development machine has no
  // GPU.
  virtual Status GradientDevice(int var, const void* device_grad, size_t count) = 0;
  // Sparse gradient rows (ids.size() × dim); may be called several times a
  // step, repeated ids are summed.
  virtual Status Gradient(int var, std::span<const int64_t> ids,
                          std::span<const float> row_grads) = 0;

  // Finishes the step (sync: every rank's gradients averaged and applied
  // once) and applies the optimizer of every worker-held variable. A
  // variable with no gradient this step counts as a zero gradient.
  // Writes a checkpoint when step() % config.trainer.checkpoint_every == 0
  // after the step
  // (every rank takes part; rank 0 commits it to the coordinator once every
  // part is written).
  virtual Status Step() = 0;
  // Steps finished so far.
  virtual int64_t step() const = 0;

  // Current values of a dense variable (valid until the next Step()).
  virtual StatusOr<std::span<const float>> Dense(int var) const = 0;
  // Rows [first_row, first_row + count) of a sparse variable as of now, into
  // *out (count × dim): from the local replica, or pulled from the shards.
  // For tests and export; read a large table in chunks.
  virtual Status ReadSparse(int var, int64_t first_row, int64_t count, std::vector<float>* out) = 0;

  // The learning rate of `var`'s optimizer from this step (step()) on,
  // wherever the variable lives: the rank's optimizer for all-reduce and
  // all-gather variables, the PS shards' for PS variables (a SET message,
  // schemas/ps_wire.md, "Settings"; waits for every shard's ack). Every rank
  // must set the same rate at the same step. INVALID_ARGUMENT for an lr that
  // is not finite and > 0.
  virtual Status SetLearningRate(int var, double lr) = 0;

  // Records this step's loss and samples; every config.trainer.metrics_every
  // steps sends loss and samples/s to the coordinator. INVALID_ARGUMENT
  // naming the step for a NaN or infinite loss (stop training).
  virtual Status ReportMetrics(int64_t step, double loss, int64_t samples) = 0;

  virtual const SessionOptions& options() const = 0;
};

// Elements per row when a dense variable of `size` elements is laid out as
// rows (initializer, PS path): min(size, 1024).
uint32_t DenseRowDim(size_t size);
// The initial values of dense variable `var_id` of `size` elements under
// `init` (what the session uses when no initial_values are given).
std::vector<float> InitialDenseValues(const Initializer& init, uint32_t var_id, size_t size);
// Row `row` of sparse variable `var_id` under `init` (dim values into out).
void InitialSparseRow(const Initializer& init, uint32_t var_id, int64_t row, uint32_t dim,
                      float* out);

}  // namespace parallax

#endif  // PARALLAX_INCLUDE_PARALLAX_SESSION_H_
