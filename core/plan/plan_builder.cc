#include "core/plan/plan_builder.h"

#include <algorithm>
#include <set>
#include <cstdio>

#include "core/plan/hot_rows.h"
#include "core/plan/placement.h"
#include "core/plan/plan_cost.h"
#include "core/plan/report.h"
#include "core/plan/sparsity.h"
#include "core/ps/dynamic_table.h"

namespace parallax::plan {
namespace {

// Local aggregation pays only where a host's link carries PS traffic: with
// several hosts, and more ranks than hosts. Sync mode only: under async and
// ssp every rank keeps its own clock and staleness.
bool LocalAggregationApplies(const JobConfig& job, const ClusterShape& cluster) {
  return job.ps.local_aggregation && job.job.consistency == Consistency::kSync &&
         (cluster.hosts > 1 || cluster.ps_hosts > 0) && cluster.workers > cluster.hosts;
}

const VariableOverride* OverrideOf(const JobConfig& job, const std::string& name) {
  for (const VariableOverride& o : job.variables) {
    if (o.name == name) return &o;
  }
  return nullptr;
}

// A PS variable's partitions: [[variable]], else [ps], else one per shard;
// at most one per row and 65536.
uint32_t PartitionsOf(const JobConfig& job, const VariableOverride* over,
                      const PlannedVariable& v, int shards) {
  const int64_t want = over && over->partitions ? *over->partitions
                       : job.ps.partitions > 0  ? job.ps.partitions
                                                : std::max(1, shards);
  const int64_t most = v.dynamic ? 65536 : std::min<int64_t>(v.rows, 65536);
  return static_cast<uint32_t>(std::clamp<int64_t>(want, 1, most));
}

// A dynamic table has no row count: only PS shards, which create rows as
// ids come, can hold it. FAILED_PRECONDITION naming it when the job has no
// shards or `path` (the arch's, or [[variable]]'s) is another.
Status CheckDynamicPath(const PlannedVariable& v, const ClusterShape& cluster,
                        const std::string& asked) {
  if (!v.dynamic) return Status::Ok();
  if (cluster.shards <= 0 || v.path != VariablePath::kPs) {
    return FailedPrecondition(
        "variable \"" + v.name + "\" is a dynamic table (no row count, any 64-bit id): only PS "
        "shards hold it, but " + asked + "; use arch = \"hybrid\" or \"ps\" with [ps] shards, "
        "and no [[variable]] path other than \"ps\" for it");
  }
  return Status::Ok();
}

// What a dynamic table's budget costs a shard, or a warning that it has
// none (what `parallax plan` and `parallax status` show in its reason).
std::string DynamicBudgetNote(const PlannedVariable& v, int shards) {
  if (v.dynamic->max_rows <= 0) {
    return "; no max_rows: its rows grow with every new id (set [[variable]] max_rows)";
  }
  ps::DynamicTableOptions o;
  o.var.dim = v.dim;
  o.var.optimizer = v.optimizer;
  const int64_t per_shard = (v.dynamic->max_rows + std::max(1, shards) - 1) / std::max(1, shards);
  char buf[160];
  std::snprintf(buf, sizeof(buf), "; max_rows %lld: about %.3g MB a shard at the budget",
                static_cast<long long>(v.dynamic->max_rows),
                static_cast<double>(per_shard * ps::DynamicTable::BytesPerRow(o)) / 1e6);
  return buf;
}

// The path of `v` and why, before [[variable]] overrides.
void ChooseFor(const JobConfig& job, const ClusterShape& cluster, const CostOptions& cost,
               uint32_t partitions, PlannedVariable* v) {
  const Arch arch = job.job.arch;
  if (v->dynamic && (arch == Arch::kHybrid || arch == Arch::kPs) && cluster.shards > 0) {
    v->path = VariablePath::kPs;
    v->reason = "dynamic table: only the PS holds a table with no row count";
  } else if (arch == Arch::kPs) {
    v->path = VariablePath::kPs;
    v->reason = "arch = \"ps\"";
  } else if (arch == Arch::kAllReduce) {
    v->path = VariablePath::kAllReduce;
    v->reason = "arch = \"allreduce\"";
  } else if (arch == Arch::kAllGather) {
    v->path = v->sparse ? VariablePath::kAllGather : VariablePath::kAllReduce;
    v->reason = "arch = \"allgather\"";
  } else if (!v->sparse || v->density >= 0) {
    const Choice choice = ChoosePath(CostInputs(*v, partitions), cluster, cost);
    v->path = choice.path;
    v->reason = choice.reason;
    if (!v->sparse && v->path == VariablePath::kPs && job.job.consistency != Consistency::kSync) {
      v->path = VariablePath::kAllReduce;
      v->reason += "; kept on all-reduce: under async and ssp dense variables stay synchronous "
                   "(arch = \"ps\" moves them)";
    }
  } else {
    const bool shards = cluster.shards > 0;
    v->path = shards ? VariablePath::kPs : VariablePath::kAllGather;
    v->reason = std::string("sparsity not measured (no SampleIds): ") +
                (shards ? "PS, the job has shards" : "all-gather, the job has no shards");
  }
}

// The partitions of `spec` on `shards` shards: round robin, or, when there
// are more partitions than shards and rows were sampled, balanced by expected
// load (each sampled row's frequency on the partition the PS maps it to),
// with the imbalance added to `reason`.
void PlaceOnShards(const Sparsity& sparsity, uint32_t shards, ps::VariableSpec* spec,
                   std::string* reason) {
  spec->partition_shards.clear();
  for (uint32_t i = 0; i < spec->partitions; ++i) spec->partition_shards.push_back(i % shards);
  if (spec->partitions <= shards || sparsity.row_frequency.empty()) return;
  const ps::Partitioner partition_of(*spec);
  const std::vector<double> load = PartitionLoads(sparsity.row_frequency, spec->partitions,
                                                  [&](int64_t id) { return partition_of(id); });
  const Placement placed = PlacePartitions(load, shards);
  spec->partition_shards = placed.partition_shard;
  char buf[120];
  std::snprintf(buf, sizeof(buf), "%s%u partitions on %u shards by sampled load, imbalance %.1f%%",
                reason->empty() ? "" : "; ", spec->partitions, shards,
                100.0 * placed.imbalance());
  *reason += buf;
}

// The PS part of `v` (REQUIRES: v.path == kPs).
ps::VariableSpec PsSpecOf(const PlannedVariable& v, uint32_t partitions, uint32_t shards,
                          const Sparsity& sparsity, std::string* reason) {
  ps::VariableSpec p;
  p.id = v.id;
  p.name = v.name;
  p.rows = v.rows;
  p.dim = v.dim;
  p.partitions = partitions;
  PlaceOnShards(sparsity, shards, &p, reason);
  p.optimizer = v.optimizer;
  p.init = v.init;
  p.dynamic = v.dynamic;
  return p;
}

// Applies `over` to `v`: its path (and why) and its optimizer.
Status ApplyOverride(const VariableOverride& over, const ClusterShape& cluster,
                     PlannedVariable* v) {
  if (over.path) {
    v->path = *over.path;
    v->reason = "[[variable]] in the job file";
    // A dense variable has no all-gather form: its gradients are all-reduced.
    if (!v->sparse && v->path == VariablePath::kAllGather) v->path = VariablePath::kAllReduce;
    if (v->path == VariablePath::kPs && cluster.shards <= 0) {
      return FailedPrecondition("[[variable]] \"" + v->name +
                                "\" asks for path \"ps\", but the job has no PS shards");
    }
  }
  if (over.optimizer) v->optimizer = *over.optimizer;
  if (over.sets_dynamic()) {
    if (!v->dynamic) {
      return FailedPrecondition(
          "[[variable]] \"" + v->name + "\" sets admit_after, ttl_steps, max_rows or eviction, "
          "which only a dynamic table has; the trainer registered \"" + v->name + "\" with " +
          std::to_string(v->rows) + " rows (register it with Session::RegisterDynamic, or drop "
          "those keys)");
    }
    if (over.admit_after) v->dynamic->admit_after = *over.admit_after;
    if (over.ttl_steps) v->dynamic->ttl_steps = *over.ttl_steps;
    if (over.max_rows) v->dynamic->max_rows = *over.max_rows;
    if (over.eviction) v->dynamic->eviction = *over.eviction;
  }
  return Status::Ok();
}

Status CheckOverridesNameVariables(const JobConfig& job, const PlanInputs& inputs) {
  for (const VariableOverride& o : job.variables) {
    const bool known = std::any_of(inputs.variables.begin(), inputs.variables.end(),
                                   [&](const VariableInput& v) { return v.var.name == o.name; });
    if (known) continue;
    std::string names;
    for (const VariableInput& v : inputs.variables) names += (names.empty() ? "" : ", ") + v.var.name;
    return InvalidArgument("[[variable]] \"" + o.name +
                           "\" in the job file names no variable the trainer registered (" +
                           names + ")");
  }
  return Status::Ok();
}

ps::PsPlan PsPlanOf(const JobConfig& job, const ClusterShape& cluster) {
  ps::PsPlan ps;
  ps.consistency = job.job.consistency;
  ps.staleness = job.job.staleness;
  ps.sync_warmup_steps = job.job.sync_warmup_steps;
  ps.staleness_lr = job.ps.staleness_lr && job.job.consistency != Consistency::kSync;
  ps.num_workers = static_cast<uint32_t>(cluster.workers);
  ps.num_shards = static_cast<uint32_t>(std::max(1, cluster.shards));
  ps.value_encoding = job.ps.value_encoding;
  return ps;
}

// Under arch = "hybrid", the plan with the lowest predicted time among: each
// variable on its own cheapest path, the same with every dense variable on
// all-reduce, and every single-path plan — variables of a plan share
// collective calls and local aggregation, so the per-variable choice alone
// is not always the cheapest whole (core/plan/plan_cost.h). Variables whose
// path is fixed ([[variable]], or not measured) keep it in every candidate;
// a dense variable goes to the PS only where it may (sync, no explicit
// values). Sets each variable's path, noting a change in its reason.
void ChooseCheapestPlan(const JobConfig& job, const PlanInputs& inputs,
                        const std::vector<bool>& fixed, const CostOptions& cost,
                        std::vector<PlannedVariable>* vars) {
  const ClusterShape& cluster = inputs.cluster;
  std::vector<CostedVariable> costed;
  std::vector<VariablePath> own;
  for (const PlannedVariable& v : *vars) {
    const VariableStats stats = CostInputs(v);
    costed.push_back({stats, ChoosePath(stats, cluster, cost)});
    own.push_back(v.path);
  }
  auto allowed = [&](size_t i, VariablePath p) {
    const PlannedVariable& v = (*vars)[i];
    if (p == VariablePath::kPs && cluster.shards <= 0) return false;
    if (p == VariablePath::kPs && !v.sparse &&
        job.job.consistency != Consistency::kSync) {
      return false;
    }
    return p != VariablePath::kAllGather || v.sparse;
  };
  struct Candidate {
    const char* name;
    std::vector<VariablePath> paths;
  };
  std::vector<Candidate> candidates = {{"each variable on its cheapest path", own},
                                       {"dense variables all-reduced", own}};
  for (size_t i = 0; i < vars->size(); ++i) {
    if (!fixed[i] && !(*vars)[i].sparse) candidates[1].paths[i] = VariablePath::kAllReduce;
  }
  for (auto [name, path] : {std::pair{"all-reduce only", VariablePath::kAllReduce},
                            std::pair{"all-gather only", VariablePath::kAllGather},
                            std::pair{"PS only", VariablePath::kPs}}) {
    Candidate c{name, own};
    bool possible = true;
    for (size_t i = 0; i < vars->size(); ++i) {
      if (fixed[i]) continue;
      const VariablePath p = !(*vars)[i].sparse && path == VariablePath::kAllGather
                                 ? VariablePath::kAllReduce
                                 : path;
      possible = possible && allowed(i, p);
      c.paths[i] = p;
    }
    if (possible) candidates.push_back(std::move(c));
  }
  const Candidate* best = nullptr;
  double best_seconds = 0, own_seconds = 0;
  for (const Candidate& c : candidates) {
    const PlanBytes total = PlanCost(costed, c.paths, cluster, cost);
    if (&c == &candidates[0]) own_seconds = total.seconds;
    if (!total.feasible) continue;
    if (best == nullptr || total.seconds < best_seconds) {
      best = &c;
      best_seconds = total.seconds;
    }
  }
  if (best == nullptr) return;
  for (size_t i = 0; i < vars->size(); ++i) {
    PlannedVariable& v = (*vars)[i];
    if (best->paths[i] == v.path) continue;
    char note[200];
    std::snprintf(note, sizeof(note),
                  "; the plan puts it on %s (%s: %.3g ms/step for the whole plan, %.3g with each "
                  "variable on its cheapest path)",
                  VariablePathName(best->paths[i]), best->name, best_seconds * 1e3,
                  own_seconds * 1e3);
    v.path = best->paths[i];
    v.reason += note;
  }
}

// The wait for the slowest rank an earlier sync job of the same shape
// measured, for a sync job of more than one worker.
void ApplyStraggler(const JobConfig& job, const PlanInputs& inputs, CostOptions* cost,
                    FigureSources* sources) {
  const ClusterShape& cluster = inputs.cluster;
  if (job.job.consistency != Consistency::kSync || cluster.workers < 2) {
    sources->straggler = "none: ranks wait for each other only in sync mode, with 2 workers or more";
    return;
  }
  if (!inputs.straggler) return;  // "not measured"
  const MeasuredStraggler& m = *inputs.straggler;
  if (m.workers != cluster.workers || m.hosts != cluster.hosts) {
    sources->straggler = "not measured at this shape; " + StragglerSource(m);
    return;
  }
  cost->sync_straggler_s = m.straggler_s;
  sources->straggler = StragglerSource(m);
}

}  // namespace

int PsShards(const JobConfig& job, int hosts) {
  if (job.job.arch == Arch::kAllReduce || job.job.arch == Arch::kAllGather) return 0;
  return job.ps.shards > 0 ? job.ps.shards : std::max(1, hosts);
}

int PsHostsOf(const JobConfig& job, int shards) {
  return job.ps.hosts == PsHosts::kPs ? std::max(0, shards) : 0;
}

CostOptions CostOptionsFor(const JobConfig& job, const PlanInputs& inputs,
                           FigureSources* sources) {
  CostOptions cost;
  const FigureSources s =
      // PS hosts are machines of their own: one worker host and its PS
      // hosts talk over a link, not loopback.
      ApplyFigures(job.plan, inputs.host_figures, inputs.cluster.hosts + inputs.cluster.ps_hosts,
                   &cost);
  if (inputs.correction) ApplyCorrection(*inputs.correction, &cost);
  FigureSources with_straggler = s;
  ApplyStraggler(job, inputs, &cost, &with_straggler);
  if (sources) *sources = with_straggler;
  cost.value_bytes = job.ps.value_encoding == ValueEncoding::kFp16 ? 2 : 4;
  cost.ps_shared_memory = job.ps.shared_memory;
  cost.fusion_bucket_bytes = inputs.fusion_bucket_bytes;
  cost.shm_allreduce = inputs.shm_allreduce;
  return cost;
}

namespace {

// [ps] hot_rows: each sampled sparse table of fixed rows on the PS gets its
// hot rows (core/plan/hot_rows.h), the choice and its figures in its reason.
void ChooseHotRowsOf(const JobConfig& job, const std::vector<Sparsity>& sparsity,
                     const std::optional<MeasuredPresence>& presence, JobPlan* plan) {
  if (job.ps.hot_rows == 0 || plan->consistency != Consistency::kSync) return;
  const bool shares_call =
      std::any_of(plan->variables.begin(), plan->variables.end(),
                  [](const PlannedVariable& v) { return v.path == VariablePath::kAllReduce; });
  for (size_t i = 0; i < plan->variables.size(); ++i) {
    PlannedVariable& v = plan->variables[i];
    if (!v.sparse) continue;
    if (v.path != VariablePath::kPs) {
      v.reason += std::string("; hot rows: none (on ") + VariablePathName(v.path) +
                  " every rank holds the whole table)";
      continue;
    }
    if (v.dynamic) {
      // Not silently: the job asked for hot rows.
      v.reason += "; hot rows: none (a dynamic table's rows stay on its shards: hot rows are for "
                  "tables of fixed rows)";
      continue;
    }
    // Counts measured while an earlier attempt trained, where there are
    // some: each of its steps stands for a sampled batch.
    const TablePresence* measured = nullptr;
    if (presence) {
      auto it = presence->tables.find(v.name);
      // A count of hot rows beyond the rows the counts kept is chosen from
      // the samples, as before.
      if (it != presence->tables.end() && it->second.steps >= 2 &&
          (job.ps.hot_rows <= 0 || static_cast<int64_t>(it->second.row_steps.size()) >= job.ps.hot_rows)) {
        measured = &it->second;
      }
    }
    if (sparsity[i].batches == 0 && measured == nullptr) {
      v.reason += "; hot rows: none (not sampled: SampleIds finds them)";
      continue;
    }
    Sparsity rows = sparsity[i];
    if (measured != nullptr) {
      rows.batches = static_cast<int>(std::min<int64_t>(measured->steps, 1 << 30));
      rows.row_batches.clear();
      for (const auto& [id, c] : measured->row_steps)
        if (id >= 0 && id < v.rows) rows.row_batches[id] = static_cast<int>(std::min<int64_t>(c, rows.batches));
    }
    const HotRowsChoice hot = ChooseHotRows(CostInputs(v), rows, job.ps.hot_rows, plan->cluster,
                                            plan->cost, plan->local_aggregation, shares_call);
    v.hot_rows = hot.rows;
    v.hot_share = hot.share;
    v.reason += "; " + hot.reason;
    if (measured != nullptr) {
      v.reason += " (re-measured over steps " + std::to_string(presence->first_step) + "-" +
                  std::to_string(presence->step - 1) + " of attempt " +
                  std::to_string(presence->attempt) + ")";
    }
  }
}

}  // namespace

StatusOr<JobPlan> BuildPlan(const JobConfig& job, const PlanInputs& inputs) {
  const ClusterShape& cluster = inputs.cluster;
  if (job.job.arch == Arch::kPs && cluster.shards <= 0) {
    return FailedPrecondition(
        "arch \"ps\" needs PS shards, but the job has none (PARALLAX_NUM_SHARDS is 0)");
  }
  PX_RETURN_IF_ERROR(CheckOverridesNameVariables(job, inputs));
  JobPlan plan;
  plan.arch = job.job.arch;
  plan.consistency = job.job.consistency;
  plan.cluster = cluster;
  plan.cost = CostOptionsFor(job, inputs, &plan.figures);
  plan.cost.local_aggregation = LocalAggregationApplies(job, cluster);
  plan.ps = PsPlanOf(job, cluster);
  std::vector<Sparsity> sparsity(inputs.variables.size());
  std::vector<bool> fixed;
  for (size_t i = 0; i < inputs.variables.size(); ++i) {
    const VariableInput& in = inputs.variables[i];
    PlannedVariable v = in.var;
    v.path = VariablePath::kAllReduce;
    if (v.sparse && !v.dynamic && !in.sampled_batches.empty()) {
      sparsity[i] = MeasureSparsity(in.sampled_batches, v.rows, cluster.workers_per_host());
      v.density = sparsity[i].alpha;
      v.density_host = sparsity[i].alpha_host;
    }
    if (v.dynamic && !in.sampled_batches.empty()) {
      double distinct = 0;
      for (const std::vector<int64_t>& batch : in.sampled_batches) {
        distinct += static_cast<double>(std::set<int64_t>(batch.begin(), batch.end()).size());
      }
      v.ids_per_step = distinct / static_cast<double>(in.sampled_batches.size());
    }
    const VariableOverride* over = OverrideOf(job, v.name);
    v.partitions = PartitionsOf(job, over, v, cluster.shards);
    ChooseFor(job, cluster, plan.cost, v.partitions, &v);
    PX_RETURN_IF_ERROR(CheckDynamicPath(
        v, cluster,
        cluster.shards <= 0 ? std::string("the job has no PS shards")
                            : "arch = \"" + std::string(ArchName(job.job.arch)) + "\" puts it on " +
                                  VariablePathName(v.path)));
    if (over) {
      PX_RETURN_IF_ERROR(ApplyOverride(*over, cluster, &v));
      PX_RETURN_IF_ERROR(CheckDynamicPath(
          v, cluster, "[[variable]] in the job file asks for path \"" +
                          std::string(VariablePathName(v.path)) + "\""));
    }
    if (v.dynamic) v.reason += DynamicBudgetNote(v, cluster.shards);
    fixed.push_back(job.job.arch != Arch::kHybrid || (over && over->path) ||
                    (v.sparse && v.density < 0) || v.dynamic);
    plan.variables.push_back(std::move(v));
  }
  if (job.job.arch == Arch::kHybrid) {
    ChooseCheapestPlan(job, inputs, fixed, plan.cost, &plan.variables);
  }
  for (size_t i = 0; i < plan.variables.size(); ++i) {
    PlannedVariable& v = plan.variables[i];
    if (v.path != VariablePath::kPs) continue;
    plan.ps.variables.push_back(
        PsSpecOf(v, v.partitions, plan.ps.num_shards, sparsity[i], &v.reason));
  }
  // Local aggregation covers every PS variable or none (a shard expects one
  // kind of contributor), so a dense variable on the PS path, which needs its
  // pulled values on every rank, turns it off.
  const bool dense_on_ps = std::any_of(plan.variables.begin(), plan.variables.end(),
                                       [](const PlannedVariable& v) {
                                         return !v.sparse && v.path == VariablePath::kPs;
                                       });
  if (plan.cost.local_aggregation && plan.has_ps() && !dense_on_ps) {
    plan.local_aggregation = true;
    plan.ps.num_contributors = static_cast<uint32_t>(cluster.hosts);
  }
  ChooseHotRowsOf(job, sparsity, inputs.presence, &plan);
  plan.predicted_comm_s = BuildPlanReport(plan).totals.hybrid.seconds;
  return plan;
}

}  // namespace parallax::plan
