// BuildPlan: the one place a job's plan is made, from typed inputs. The
// trainer's rank 0 calls it with what its ranks registered and sampled
// (Session::Start), and `parallax plan` with the same inputs taken from the
// built-in model offline, so the plan a job records and the plan the CLI
// predicts are the same plan.
//
// For each variable, in order of precedence:
//   1. a [[variable]] path in the job file (a dense variable asked onto
//      all-gather stays on all-reduce, which is its all-gather form);
//   2. arch = allreduce | allgather | ps forces one path for every variable
//      (dense variables stay on all-reduce under allgather);
//   3. arch = hybrid: the cost model (core/plan/cost_model.h) picks the
//      cheapest predicted path; a dense variable goes to all-reduce; a sparse
//      variable never sampled (no SampleIds) goes to the PS when the job has
//      shards, else to all-gather.
// A PS variable has P partitions ([[variable]] partitions, else [ps]
// partitions, else one per shard), placed on shards round robin, or by the
// sampled load of their rows when there are more partitions than shards.
#ifndef PARALLAX_CORE_PLAN_PLAN_BUILDER_H_
#define PARALLAX_CORE_PLAN_PLAN_BUILDER_H_

#include <cstddef>
#include <cstdint>
#include <optional>
#include <vector>

#include "core/plan/cost_model.h"
#include "core/plan/job_plan.h"
#include "core/plan/plan_correction.h"
#include "core/plan/hot_presence.h"
#include "core/plan/straggler.h"
#include "parallax/job_config.h"
#include "parallax/status.h"

namespace parallax::plan {

// What rank 0 registered for one variable, before it has a path.
struct VariableInput {
  // Id (its index), name, kind, shape, optimizer and initializer; the path,
  // density and reason are the builder's.
  PlannedVariable var;
  // The ids a few of rank 0's consecutive batches touch (SampleIds), one
  // vector per batch; empty: not measured.
  std::vector<std::vector<int64_t>> sampled_batches;
};

// The cluster an attempt runs on and what its ranks do besides the job file.
struct PlanInputs {
  ClusterShape cluster;                    // workers, hosts, PS shards (0: none)
  size_t fusion_bucket_bytes = 64u << 20;  // the trainer's dense fusion buckets
  // The trainer's communicator all-reduces a host's ranks through shared
  // memory, hierarchically across hosts (its CommunicatorOptions::
  // shared_memory, on by default); false: Gloo's ring over every rank.
  bool shm_allreduce = true;
  std::vector<VariableInput> variables;    // in registration order, ids 0..n-1
  // What the hosts measured (agents when they start, `parallax plan
  // --measure`); the job's [plan] overrides them (core/plan/host_figures.h).
  std::vector<HostFigures> host_figures;
  // The model corrected by what an earlier attempt measured (re-planning on
  // evidence, core/plan/plan_correction.h): its time scales.
  std::optional<PlanCorrection> correction;
  // What an earlier sync job of this many workers measured of the wait for
  // its slowest rank (core/plan/straggler.h); used by a sync plan of the
  // same workers and hosts.
  std::optional<MeasuredStraggler> straggler;
  // [ps] hot_rows: what an earlier attempt's rank 0 measured of each sparse
  // PS table's rows while training (core/plan/hot_presence.h). A table in
  // it with at least 2 steps takes its hot rows from these counts instead
  // of from its sampled batches.
  std::optional<MeasuredPresence> presence;
};

// INVALID_ARGUMENT for a [[variable]] naming no registered variable;
// FAILED_PRECONDITION for arch = "ps" or a [[variable]] path "ps" without
// shards, or explicit dense values on the PS path.
StatusOr<JobPlan> BuildPlan(const JobConfig& job, const PlanInputs& inputs);

// The PS shards an attempt of `job` runs when its ranks span `hosts` hosts:
// [ps] shards, else one per host; none under arch = allreduce | allgather.
int PsShards(const JobConfig& job, int hosts);

// ClusterShape::ps_hosts of an attempt of `job` with `shards` PS shards:
// under [ps] hosts = "ps", one PS host per shard (what shards = "auto"
// places; with a fixed count above the PS hosts registered, their links
// carry more than this predicts); else 0.
int PsHostsOf(const JobConfig& job, int shards);

// The cost model's figures for `job` run as `inputs` says: its [plan] table
// over the hosts' measured figures over the defaults (their sources into
// *sources when given), a re-plan's time scales, what the job's settings change (value encoding, PS
// shared memory) and how the trainer's collectives run (fusion buckets, the
// shared-memory all-reduce); local aggregation is BuildPlan's decision.
CostOptions CostOptionsFor(const JobConfig& job, const PlanInputs& inputs,
                           FigureSources* sources = nullptr);

}  // namespace parallax::plan

#endif  // PARALLAX_CORE_PLAN_PLAN_BUILDER_H_
