#include "trainer/job_plan.h"

#include <algorithm>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "core/plan/cost_model.h"
#include "core/plan/placement.h"

namespace parallax::trainer {

using json = nlohmann::json;

namespace {

const char* InitName(Initializer::Type t) {
  switch (t) {
    case Initializer::Type::kZeros:
      return "zeros";
    case Initializer::Type::kUniform:
      return "uniform";
    case Initializer::Type::kNormal:
      return "normal";
  }
  return "uniform";
}

json OptimizerToJson(const optim::OptimizerSpec& s) {
  return json{{"type", std::string(optim::OptimizerTypeName(s.type))},
              {"lr", s.lr},
              {"momentum", s.momentum},
              {"beta1", s.beta1},
              {"beta2", s.beta2},
              {"epsilon", s.epsilon},
              {"initial_accumulator", s.initial_accumulator}};
}

}  // namespace

VariablePath ParsePath(std::string_view name, bool* ok) {
  *ok = true;
  if (name == "allreduce") return VariablePath::kAllReduce;
  if (name == "allgather") return VariablePath::kAllGather;
  if (name == "ps") return VariablePath::kPs;
  *ok = false;
  return VariablePath::kAllReduce;
}

StatusOr<optim::OptimizerSpec> ToOptimizerSpec(const OptimizerConfig& c) {
  optim::OptimizerSpec s;
  PX_ASSIGN_OR_RETURN(s.type, optim::ParseOptimizerType(c.type));
  s.lr = static_cast<float>(c.lr);
  s.momentum = static_cast<float>(c.momentum);
  s.beta1 = static_cast<float>(c.beta1);
  s.beta2 = static_cast<float>(c.beta2);
  s.epsilon = static_cast<float>(c.epsilon);
  s.initial_accumulator = static_cast<float>(c.initial_accumulator);
  PX_RETURN_IF_ERROR(optim::ValidateOptimizerSpec(s));
  return s;
}

ps::InitSpec ToPsInit(const Initializer& init) {
  ps::InitSpec s;
  switch (init.type) {
    case Initializer::Type::kZeros:
      s.type = ps::InitType::kZeros;
      break;
    case Initializer::Type::kUniform:
      s.type = ps::InitType::kUniform;
      break;
    case Initializer::Type::kNormal:
      s.type = ps::InitType::kNormal;
      break;
  }
  s.seed = init.seed;
  s.scale = init.scale;
  return s;
}

namespace {

plan::VariableStats CostStats(const PlannedVariable& v, int partitions) {
  plan::VariableStats stats;
  stats.name = v.name;
  stats.sparse = v.sparse;
  stats.rows = v.sparse ? v.rows : 1;
  stats.dim = v.sparse ? v.dim : static_cast<int64_t>(v.size);
  stats.alpha = v.density >= 0 ? v.density : 1.0;
  stats.partitions = std::max(1, partitions);
  return stats;
}

VariablePath FromPlanPath(plan::Path path) {
  switch (path) {
    case plan::Path::kAllReduce: return VariablePath::kAllReduce;
    case plan::Path::kAllGather: return VariablePath::kAllGather;
    case plan::Path::kPs: return VariablePath::kPs;
  }
  return VariablePath::kAllReduce;
}

}  // namespace

namespace {
// The partitions of `p` on `shards` shards: round robin, or, when there are
// more partitions than shards and SampleIds saw rows, balanced by expected
// load (core/plan/placement.h: each sampled row's count on the partition the
// PS maps it to), with the imbalance added to `reason`.
void PlaceOnShards(const Registration& r, uint32_t shards, ps::VariableSpec* p,
                   std::string* reason) {
  p->partition_shards.clear();
  for (uint32_t i = 0; i < p->partitions; ++i) p->partition_shards.push_back(i % shards);
  if (p->partitions <= shards || r.row_samples.empty()) return;
  std::vector<double> load(p->partitions, 0.0);
  for (const auto& [id, count] : r.row_samples) load[ps::PartitionOf(*p, id)] += count;
  const plan::Placement placed = plan::PlacePartitions(load, shards);
  p->partition_shards = placed.partition_shard;
  char buf[120];
  std::snprintf(buf, sizeof(buf), "%s%u partitions on %u shards by sampled load, imbalance %.1f%%",
                reason->empty() ? "" : "; ", p->partitions, shards, 100.0 * placed.imbalance());
  *reason += buf;
}

// Local aggregation pays only where a host's link carries PS traffic: with
// several hosts, and more ranks than hosts. Sync mode only: under async and
// ssp every rank keeps its own clock and staleness.
bool LocalAggregationApplies(const SessionOptions& options) {
  return options.ps_local_aggregation && options.consistency == "sync" && options.num_hosts > 1 &&
         options.world_size > options.num_hosts;
}
}  // namespace

StatusOr<JobPlan> BuildRulePlan(const SessionOptions& options,
                                const std::vector<Registration>& registrations) {
  const std::string& arch = options.arch;
  if (arch != "hybrid" && arch != "allreduce" && arch != "allgather" && arch != "ps") {
    return InvalidArgument("arch \"" + arch + "\" is not one of hybrid, allreduce, allgather, ps");
  }
  const bool shards = options.num_shards > 0;
  if (arch == "ps" && !shards) {
    return FailedPrecondition(
        "arch \"ps\" needs PS shards, but the job has none (PARALLAX_NUM_SHARDS is 0)");
  }
  JobPlan plan;
  plan.arch = arch;
  plan.consistency = options.consistency;
  plan.world_size = options.world_size;
  if (options.consistency == "sync") {
    plan.ps.consistency = ps::Consistency::kSync;
  } else if (options.consistency == "async") {
    plan.ps.consistency = ps::Consistency::kAsync;
  } else if (options.consistency == "ssp") {
    plan.ps.consistency = ps::Consistency::kSsp;
  } else {
    return InvalidArgument("consistency \"" + options.consistency +
                           "\" is not one of sync, async, ssp");
  }
  plan.ps.staleness = options.staleness;
  plan.ps.staleness_lr = options.ps_staleness_lr && options.consistency != "sync";
  plan.ps.num_workers = static_cast<uint32_t>(options.world_size);
  plan.ps.num_shards = static_cast<uint32_t>(std::max(1, options.num_shards));
  plan.ps.fp16_values = options.ps_fp16_values;
  const plan::ClusterShape cluster{.workers = options.world_size,
                                   .hosts = std::max(1, options.num_hosts),
                                   .shards = options.num_shards};
  plan::CostOptions cost_options;
  cost_options.local_aggregation = LocalAggregationApplies(options);
  cost_options.value_bytes = options.ps_fp16_values ? 2 : 4;
  cost_options.ps_shared_memory = options.ps_shared_memory;
  cost_options.fusion_bucket_bytes = options.fusion_bucket_bytes;
  if (options.job) {
    // The machine's measured figures ([plan] in the job file), else the
    // cost model's defaults.
    const JobConfig::Plan& figures = options.job->plan;
    if (figures.link_bytes_per_s) cost_options.bandwidth_bytes_per_s = *figures.link_bytes_per_s;
    if (figures.collective_latency_us)
      cost_options.collective_latency_s = *figures.collective_latency_us * 1e-6;
    if (figures.ps_rtt_us) cost_options.ps_rtt_s = *figures.ps_rtt_us * 1e-6;
  }
  std::vector<VariableOverride> overrides;
  if (options.job) overrides = options.job->variables;
  for (const VariableOverride& o : overrides) {
    bool known = false;
    for (const Registration& r : registrations) known = known || r.var.name == o.name;
    if (!known) {
      return InvalidArgument("[[variable]] \"" + o.name +
                             "\" in the job file names no variable the trainer registered");
    }
  }
  for (const Registration& r : registrations) {
    PlannedVariable v = r.var;
    const VariableOverride* over = nullptr;
    for (const VariableOverride& o : overrides) {
      if (o.name == v.name) over = &o;
    }
    if (arch == "ps") {
      v.path = VariablePath::kPs;
    } else if (arch == "allreduce" || !v.sparse) {
      v.path = VariablePath::kAllReduce;
    } else if (arch == "allgather") {
      v.path = VariablePath::kAllGather;
    } else if (v.density >= 0) {
      // hybrid with measured sparsity: the cost model decides.
      plan::Choice choice = plan::ChoosePath(
          CostStats(v, options.ps_partitions > 0 ? options.ps_partitions : options.num_shards),
          cluster, cost_options);
      v.path = FromPlanPath(choice.path);
      v.reason = choice.reason;
    } else {
      v.path = shards ? VariablePath::kPs : VariablePath::kAllGather;
      v.reason = "sparsity not measured (no SampleIds): " +
                 std::string(shards ? "PS, the job has shards" : "all-gather, the job has no shards");
    }
    // A [[variable]] table wins over the rule (a dense variable has no
    // all-gather form: its gradients are all-reduced).
    if (over && over->path) {
      bool ok = false;
      v.path = ParsePath(*over->path, &ok);
      if (!ok) return InvalidArgument("[[variable]] \"" + v.name + "\": unknown path");
      v.reason = "[[variable]] in the job file";
      if (!v.sparse && v.path == VariablePath::kAllGather) v.path = VariablePath::kAllReduce;
      if (v.path == VariablePath::kPs && !shards) {
        return FailedPrecondition("[[variable]] \"" + v.name +
                                  "\" asks for path \"ps\", but the job has no PS shards");
      }
    }
    if (over && over->optimizer) {
      auto spec = ToOptimizerSpec(*over->optimizer);
      if (!spec.ok()) return spec.status().WithContext("[[variable]] \"" + v.name + "\"");
      v.optimizer = *spec;
    }
    if (v.path == VariablePath::kPs) {
      if (r.explicit_values) {
        return FailedPrecondition("dense variable \"" + v.name +
                                  "\" has explicit initial values, which the PS path cannot "
                                  "hold; register it with an Initializer or choose another arch");
      }
      ps::VariableSpec p;
      p.id = v.id;
      p.name = v.name;
      p.rows = v.rows;
      p.dim = v.dim;
      const int64_t want = over && over->partitions    ? *over->partitions
                           : options.ps_partitions > 0 ? options.ps_partitions
                                                       : plan.ps.num_shards;
      p.partitions =
          static_cast<uint32_t>(std::clamp<int64_t>(want, 1, std::min<int64_t>(v.rows, 65536)));
      PlaceOnShards(r, plan.ps.num_shards, &p, &v.reason);
      p.optimizer = v.optimizer;  // ps::OptimizerSpec is optim::OptimizerSpec
      p.init = ToPsInit(v.init);
      plan.ps.variables.push_back(std::move(p));
    }
    plan.variables.push_back(std::move(v));
  }
  // Local aggregation covers every PS variable or none (a shard expects one
  // kind of contributor), so a dense variable on the PS path, which needs its
  // pulled values on every rank, turns it off.
  const bool dense_on_ps = std::any_of(plan.variables.begin(), plan.variables.end(),
                                       [](const PlannedVariable& v) {
                                         return !v.sparse && v.path == VariablePath::kPs;
                                       });
  if (LocalAggregationApplies(options) && plan.has_ps() && !dense_on_ps) {
    plan.local_aggregation = true;
    plan.ps.num_contributors = static_cast<uint32_t>(options.num_hosts);
  }
  return plan;
}

std::string JobPlanToJson(const JobPlan& plan) {
  json doc;
  doc["version"] = 1;
  doc["arch"] = plan.arch;
  doc["consistency"] = plan.consistency;
  doc["world_size"] = plan.world_size;
  doc["local_aggregation"] = plan.local_aggregation;
  doc["variables"] = json::array();
  for (const PlannedVariable& v : plan.variables) {
    json jv{{"id", v.id},
            {"name", v.name},
            {"kind", v.sparse ? "sparse" : "dense"},
            {"rows", v.rows},
            {"dim", v.dim},
            {"path", VariablePathName(v.path)},
            {"density", v.density},
            {"reason", v.reason},
            {"optimizer", OptimizerToJson(v.optimizer)},
            {"init",
             {{"type", InitName(v.init.type)}, {"seed", v.init.seed}, {"scale", v.init.scale}}}};
    if (!v.sparse) jv["size"] = v.size;
    doc["variables"].push_back(std::move(jv));
  }
  doc["ps"] = json::parse(ps::PsPlanToJson(plan.ps));
  return doc.dump();
}

StatusOr<JobPlan> ParseJobPlan(std::string_view text) {
  json doc = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded() || !doc.is_object()) return InvalidArgument("plan: not a JSON object");
  JobPlan plan;
  try {
    plan.arch = doc.value("arch", "hybrid");
    plan.consistency = doc.value("consistency", "sync");
    plan.world_size = doc.value("world_size", 1);
    plan.local_aggregation = doc.value("local_aggregation", false);
    const json& vars = doc.at("variables");
    for (size_t i = 0; i < vars.size(); ++i) {
      const json& jv = vars[i];
      const std::string where = "plan: variables[" + std::to_string(i) + "]: ";
      PlannedVariable v;
      v.id = jv.at("id").get<uint32_t>();
      if (v.id != i) return InvalidArgument(where + "\"id\" must equal its index");
      v.name = jv.at("name").get<std::string>();
      v.sparse = jv.at("kind").get<std::string>() == "sparse";
      v.rows = jv.at("rows").get<int64_t>();
      v.dim = jv.at("dim").get<uint32_t>();
      v.size = v.sparse ? 0 : jv.at("size").get<size_t>();
      bool ok = false;
      v.path = ParsePath(jv.at("path").get<std::string>(), &ok);
      if (!ok) return InvalidArgument(where + "unknown \"path\"");
      v.density = jv.value("density", -1.0);
      v.reason = jv.value("reason", std::string());
      const json& o = jv.at("optimizer");
      OptimizerConfig oc;
      oc.type = o.at("type").get<std::string>();
      oc.lr = o.at("lr").get<double>();
      oc.momentum = o.at("momentum").get<double>();
      oc.beta1 = o.at("beta1").get<double>();
      oc.beta2 = o.at("beta2").get<double>();
      oc.epsilon = o.at("epsilon").get<double>();
      oc.initial_accumulator = o.at("initial_accumulator").get<double>();
      auto spec = ToOptimizerSpec(oc);
      if (!spec.ok()) return spec.status().WithContext(where);
      v.optimizer = *spec;
      const json& in = jv.at("init");
      const std::string t = in.at("type").get<std::string>();
      v.init.type = t == "zeros"    ? Initializer::Type::kZeros
                    : t == "normal" ? Initializer::Type::kNormal
                                    : Initializer::Type::kUniform;
      v.init.seed = in.at("seed").get<uint64_t>();
      v.init.scale = in.at("scale").get<float>();
      plan.variables.push_back(std::move(v));
    }
  } catch (const json::exception& e) {
    return InvalidArgument(std::string("plan: ") + e.what());
  }
  if (doc.contains("ps")) {
    auto ps = ps::ParsePsPlan(doc["ps"].dump());
    if (!ps.ok()) return ps.status();
    plan.ps = std::move(ps).value();
  }
  for (const ps::VariableSpec& p : plan.ps.variables) {
    if (p.id >= plan.variables.size() || plan.variables[p.id].path != VariablePath::kPs) {
      return InvalidArgument("plan: PS variable " + std::to_string(p.id) + " (\"" + p.name +
                             "\") is not a variable on the PS path");
    }
  }
  return plan;
}

Status CheckRegistrationsMatch(const JobPlan& plan, const std::vector<Registration>& regs,
                               int rank) {
  const std::string who = "rank " + std::to_string(rank);
  if (plan.variables.size() != regs.size()) {
    return FailedPrecondition(who + " registered " + std::to_string(regs.size()) +
                              " variables, but the plan (from rank 0) has " +
                              std::to_string(plan.variables.size()));
  }
  for (size_t i = 0; i < regs.size(); ++i) {
    const PlannedVariable& p = plan.variables[i];
    const PlannedVariable& r = regs[i].var;
    if (p.name != r.name || p.sparse != r.sparse || p.size != r.size || p.rows != r.rows ||
        p.dim != r.dim) {
      auto shape = [](const PlannedVariable& v) {
        return "\"" + v.name + "\" " +
               (v.sparse ? "sparse " + std::to_string(v.rows) + "x" + std::to_string(v.dim)
                         : "dense " + std::to_string(v.size));
      };
      return FailedPrecondition("variable " + std::to_string(i) + " differs between ranks: " + who +
                                " registered " + shape(r) + ", rank 0 " + shape(p) +
                                "; every rank must register the same variables in the same "
                                "order (build the same model on every rank)");
    }
  }
  return Status::Ok();
}

}  // namespace parallax::trainer
