#include "core/plan/job_plan.h"

#include <algorithm>
#include <nlohmann/json.hpp>
#include <optional>
#include <stdexcept>

namespace parallax::plan {
namespace {

using json = nlohmann::json;

json OptimizerToJson(const OptimizerSettings& s) {
  return json{{"type", OptimizerTypeName(s.type)},
              {"lr", s.lr},
              {"momentum", s.momentum},
              {"beta1", s.beta1},
              {"beta2", s.beta2},
              {"epsilon", s.epsilon},
              {"initial_accumulator", s.initial_accumulator}};
}

json CostToJson(const CostOptions& c) {
  return json{{"link_bytes_per_s", c.bandwidth_bytes_per_s},
              {"collective_latency_s", c.collective_latency_s},
              {"ps_rtt_s", c.ps_rtt_s},
              {"loopback_bytes_per_s", c.loopback_bytes_per_s},
              {"fusion_bucket_bytes", c.fusion_bucket_bytes},
              {"value_bytes", c.value_bytes},
              {"local_aggregation", c.local_aggregation},
              {"ps_shared_memory", c.ps_shared_memory},
              {"shm_allreduce", c.shm_allreduce},
              {"shm_call_s", c.shm_call_s},
              {"shm_bytes_per_s", c.shm_bytes_per_s},
              {"worker_memory_bytes", c.worker_memory_bytes},
              {"optimizer_state_copies", c.optimizer_state_copies},
              {"collective_time_scale", c.collective_time_scale},
              {"ps_time_scale", c.ps_time_scale},
              {"sync_straggler_s", c.sync_straggler_s}};
}

// A name of one of include/parallax/settings.h's enums; `what` names the key.
template <typename E>
E ParseName(const json& j, std::optional<E> (*parse)(std::string_view), const std::string& what) {
  const std::string name = j.get<std::string>();
  const std::optional<E> v = parse(name);
  if (!v) throw std::invalid_argument(what + " \"" + name + "\" is not a known name");
  return *v;
}

OptimizerSettings OptimizerFromJson(const json& o) {
  OptimizerSettings s;
  s.type = ParseName(o.at("type"), &ParseOptimizerType, "optimizer type");
  s.lr = o.at("lr").get<float>();
  s.momentum = o.at("momentum").get<float>();
  s.beta1 = o.at("beta1").get<float>();
  s.beta2 = o.at("beta2").get<float>();
  s.epsilon = o.at("epsilon").get<float>();
  s.initial_accumulator = o.at("initial_accumulator").get<float>();
  return s;
}

CostOptions CostFromJson(const json& c) {
  CostOptions o;
  o.bandwidth_bytes_per_s = c.value("link_bytes_per_s", o.bandwidth_bytes_per_s);
  o.collective_latency_s = c.value("collective_latency_s", o.collective_latency_s);
  o.ps_rtt_s = c.value("ps_rtt_s", o.ps_rtt_s);
  o.loopback_bytes_per_s = c.value("loopback_bytes_per_s", o.loopback_bytes_per_s);
  o.fusion_bucket_bytes = c.value("fusion_bucket_bytes", o.fusion_bucket_bytes);
  o.value_bytes = c.value("value_bytes", o.value_bytes);
  o.local_aggregation = c.value("local_aggregation", o.local_aggregation);
  o.ps_shared_memory = c.value("ps_shared_memory", o.ps_shared_memory);
  o.shm_allreduce = c.value("shm_allreduce", o.shm_allreduce);
  o.shm_call_s = c.value("shm_call_s", o.shm_call_s);
  o.shm_bytes_per_s = c.value("shm_bytes_per_s", o.shm_bytes_per_s);
  o.collective_time_scale = c.value("collective_time_scale", o.collective_time_scale);
  o.ps_time_scale = c.value("ps_time_scale", o.ps_time_scale);
  o.sync_straggler_s = c.value("sync_straggler_s", o.sync_straggler_s);
  o.worker_memory_bytes = c.value("worker_memory_bytes", o.worker_memory_bytes);
  o.optimizer_state_copies = c.value("optimizer_state_copies", o.optimizer_state_copies);
  return o;
}

// Hot rows belong to a fixed sparse table on the PS: distinct ids of its
// rows, ascending.
Status CheckHotRows(const PlannedVariable& v, const std::string& where) {
  if (v.hot_rows.empty()) return Status::Ok();
  if (!v.sparse || v.dynamic || v.path != VariablePath::kPs) {
    return InvalidArgument(where + "\"hot_rows\" only for a sparse table of fixed rows on the PS");
  }
  if (!(v.hot_share >= 0 && v.hot_share <= 1)) {
    return InvalidArgument(where + "\"hot_rows_share\" = " + std::to_string(v.hot_share) +
                           ": a share of the rows a step touches, in [0, 1]");
  }
  for (size_t i = 0; i < v.hot_rows.size(); ++i) {
    const int64_t id = v.hot_rows[i];
    if (id < 0 || id >= v.rows || (i > 0 && id <= v.hot_rows[i - 1])) {
      return InvalidArgument(where + "\"hot_rows\"[" + std::to_string(i) + "] = " +
                             std::to_string(id) + ": hot rows must be distinct rows of [0, " +
                             std::to_string(v.rows) + ") in ascending order");
    }
  }
  return Status::Ok();
}

PlannedVariable VariableFromJson(const json& jv) {
  PlannedVariable v;
  v.id = jv.at("id").get<uint32_t>();
  v.name = jv.at("name").get<std::string>();
  v.sparse = jv.at("kind").get<std::string>() == "sparse";
  v.rows = jv.at("rows").get<int64_t>();
  v.dim = jv.at("dim").get<uint32_t>();
  v.size = v.sparse ? 0 : jv.at("size").get<size_t>();
  v.path = ParseName(jv.at("path"), &ParseVariablePath, "path");
  v.density = jv.value("density", -1.0);
  v.density_host = jv.value("density_host", -1.0);
  v.ids_per_step = jv.value("ids_per_step", -1.0);
  v.partitions = jv.value("partitions", 1u);
  v.reason = jv.value("reason", std::string());
  if (jv.contains("hot_rows")) v.hot_rows = jv["hot_rows"].get<std::vector<int64_t>>();
  v.hot_share = jv.value("hot_rows_share", 0.0);
  v.optimizer = OptimizerFromJson(jv.at("optimizer"));
  const json& in = jv.at("init");
  v.init.type = ParseName(in.at("type"), &ParseInitializerType, "init type");
  v.init.seed = in.at("seed").get<uint64_t>();
  v.init.scale = in.at("scale").get<float>();
  if (jv.contains("dynamic")) {
    const json& d = jv["dynamic"];
    DynamicTableSettings s;
    s.admit_after = d.value("admit_after", s.admit_after);
    s.ttl_steps = d.value("ttl_steps", s.ttl_steps);
    s.max_rows = d.value("max_rows", s.max_rows);
    if (d.contains("eviction")) s.eviction = ParseName(d["eviction"], &ParseEvictionPolicy, "eviction");
    if (d.contains("never_admit")) s.never_admit = d["never_admit"].get<std::vector<int64_t>>();
    v.dynamic = s;
  }
  return v;
}

// The PS part: what only workers and shards need beyond the variables
// (name, shape, partitions, optimizer, init and consistency are the plan's,
// written once above).
json PsToJson(const ps::PsPlan& p) {
  json vars = json::array();
  for (const ps::VariableSpec& v : p.variables) {
    vars.push_back({{"id", v.id},
                    {"scheme", v.scheme == ps::PartitionScheme::kHash ? "hash" : "range"},
                    {"partition_shards", v.partition_shards}});
  }
  return json{{"staleness", p.staleness},
              {"sync_warmup_steps", p.sync_warmup_steps},
              {"num_workers", p.num_workers},
              {"num_contributors", p.num_contributors},
              {"sync_reduce", p.sync_mean ? "mean" : "sum"},
              {"num_shards", p.num_shards},
              {"value_encoding", ValueEncodingName(p.value_encoding)},
              {"staleness_lr", p.staleness_lr},
              {"nonfinite", p.reject_nonfinite ? "reject" : "count"},
              {"variables", std::move(vars)}};
}

// A one-of-two choice; `what` names the key.
bool ParseEither(const json& j, const char* yes, const char* no, const std::string& what) {
  const std::string name = j.get<std::string>();
  if (name != yes && name != no) {
    throw std::invalid_argument(what + " must be " + yes + " or " + no + ", not \"" + name + "\"");
  }
  return name == yes;
}

// The PS part of `plan` from its "ps" object: each PS variable takes its
// name, shape, partitions, optimizer and initializer from plan.variables
// (plans stored before version 3 repeat them here; they are not read).
ps::PsPlan PsFromJson(const json& j, const JobPlan& plan) {
  ps::PsPlan p;
  p.consistency = plan.consistency;
  p.staleness = j.value("staleness", p.staleness);
  p.sync_warmup_steps = j.value("sync_warmup_steps", p.sync_warmup_steps);
  p.num_workers = j.value("num_workers", p.num_workers);
  p.num_contributors = j.value("num_contributors", p.num_contributors);
  p.num_shards = j.value("num_shards", p.num_shards);
  if (j.contains("sync_reduce")) p.sync_mean = ParseEither(j["sync_reduce"], "mean", "sum", "ps.sync_reduce");
  if (j.contains("value_encoding")) {
    p.value_encoding = ParseName(j["value_encoding"], &ParseValueEncoding, "ps.value_encoding");
  }
  p.staleness_lr = j.value("staleness_lr", p.staleness_lr);
  if (j.contains("nonfinite")) {
    p.reject_nonfinite = ParseEither(j["nonfinite"], "reject", "count", "ps.nonfinite");
  }
  const json& vars = j.at("variables");
  for (size_t i = 0; i < vars.size(); ++i) {
    const json& jv = vars[i];
    const std::string where = "ps.variables[" + std::to_string(i) + "]: ";
    const uint32_t id = jv.at("id").get<uint32_t>();
    if (id >= plan.variables.size() || plan.variables[id].path != VariablePath::kPs) {
      throw std::invalid_argument(where + "variable " + std::to_string(id) +
                                  " is not a variable on the PS path");
    }
    const PlannedVariable& planned = plan.variables[id];
    ps::VariableSpec v;
    v.id = id;
    v.name = planned.name;
    v.rows = planned.rows;
    v.dim = planned.dim;
    v.partitions = planned.partitions;
    v.optimizer = planned.optimizer;
    v.init = planned.init;
    v.dynamic = planned.dynamic;
    v.scheme = ParseEither(jv.value("scheme", json("hash")), "hash", "range", where + "scheme")
                   ? ps::PartitionScheme::kHash
                   : ps::PartitionScheme::kRange;
    v.partition_shards = jv.value("partition_shards", std::vector<uint32_t>{});
    p.variables.push_back(std::move(v));
  }
  return p;
}

}  // namespace

uint32_t JobPlan::PartitionsOf(uint32_t var) const {
  const ps::VariableSpec* spec = ps.FindVariable(var);
  return spec == nullptr ? 0 : spec->partitions;
}

VariableStats CostInputs(const PlannedVariable& v, uint32_t partitions) {
  VariableStats stats;
  stats.name = v.name;
  stats.sparse = v.sparse;
  stats.rows = v.sparse ? v.rows : 1;
  stats.dim = v.sparse ? v.dim : static_cast<int64_t>(v.size);
  stats.alpha = v.density >= 0 ? v.density : 1.0;
  stats.alpha_host = v.density_host;
  stats.partitions = static_cast<int>(std::max<uint32_t>(1, partitions));
  stats.dynamic = v.dynamic.has_value();
  return stats;
}

json DynamicSettingsToJson(const DynamicTableSettings& d) {
  json j = {{"admit_after", d.admit_after},
            {"ttl_steps", d.ttl_steps},
            {"max_rows", d.max_rows},
            {"eviction", EvictionPolicyName(d.eviction)}};
  if (!d.never_admit.empty()) j["never_admit"] = d.never_admit;
  return j;
}

std::string JobPlanToJson(const JobPlan& plan) {
  json doc;
  doc["version"] = 3;
  doc["arch"] = ArchName(plan.arch);
  doc["consistency"] = ConsistencyName(plan.consistency);
  doc["cluster"] = {{"workers", plan.cluster.workers},
                    {"hosts", plan.cluster.hosts},
                    {"shards", plan.cluster.shards}};
  // Written only for shards on PS hosts ([ps] hosts = "ps"), so that other
  // plans read as they did.
  if (plan.cluster.ps_hosts > 0) doc["cluster"]["ps_hosts"] = plan.cluster.ps_hosts;
  doc["cost"] = CostToJson(plan.cost);
  doc["figure_sources"] = {{"link", plan.figures.link},
                           {"loopback", plan.figures.loopback},
                           {"shm", plan.figures.shm},
                           {"collective", plan.figures.collective},
                           {"ps_rtt", plan.figures.ps_rtt},
                           {"straggler", plan.figures.straggler}};
  doc["local_aggregation"] = plan.local_aggregation;
  doc["predicted_comm_s"] = plan.predicted_comm_s;
  doc["variables"] = json::array();
  for (const PlannedVariable& v : plan.variables) {
    json jv{{"id", v.id},
            {"name", v.name},
            {"kind", v.sparse ? "sparse" : "dense"},
            {"rows", v.rows},
            {"dim", v.dim},
            {"path", VariablePathName(v.path)},
            {"density", v.density},
            {"density_host", v.density_host},
            {"partitions", v.partitions},
            {"reason", v.reason},
            {"optimizer", OptimizerToJson(v.optimizer)},
            {"init",
             {{"type", InitializerTypeName(v.init.type)},
              {"seed", v.init.seed},
              {"scale", v.init.scale}}}};
    if (!v.sparse) jv["size"] = v.size;
    if (v.ids_per_step >= 0) jv["ids_per_step"] = v.ids_per_step;
    if (!v.hot_rows.empty()) {
      jv["hot_rows"] = v.hot_rows;
      jv["hot_rows_share"] = v.hot_share;
    }
    if (v.dynamic) {
      jv["dynamic"] = DynamicSettingsToJson(*v.dynamic);
    }
    doc["variables"].push_back(std::move(jv));
  }
  doc["ps"] = PsToJson(plan.ps);
  return doc.dump();
}

JobPlan JobPlanOfPs(const ps::PsPlan& ps) {
  JobPlan plan;
  plan.arch = Arch::kPs;
  plan.consistency = ps.consistency;
  plan.cluster.workers = static_cast<int>(ps.num_workers);
  plan.cluster.shards = static_cast<int>(ps.num_shards);
  plan.local_aggregation = ps.contributors() != ps.num_workers;
  for (const ps::VariableSpec& v : ps.variables) {
    PlannedVariable planned;
    planned.id = v.id;
    planned.name = v.name;
    planned.sparse = true;
    planned.rows = v.rows;
    planned.dim = v.dim;
    planned.path = VariablePath::kPs;
    planned.partitions = v.partitions;
    planned.reason = "a plan of PS variables only";
    planned.optimizer = v.optimizer;
    planned.init = v.init;
    planned.dynamic = v.dynamic;
    plan.variables.push_back(std::move(planned));
  }
  plan.ps = ps;
  return plan;
}

StatusOr<JobPlan> ParseJobPlan(std::string_view text) {
  json doc = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded() || !doc.is_object()) return InvalidArgument("plan: not a JSON object");
  JobPlan plan;
  try {
    plan.arch = ParseName(doc.value("arch", json("hybrid")), &ParseArch, "arch");
    plan.consistency =
        ParseName(doc.value("consistency", json("sync")), &ParseConsistency, "consistency");
    plan.cluster.workers = doc.value("world_size", 1);
    if (doc.contains("cluster")) {
      const json& c = doc["cluster"];
      plan.cluster.workers = c.value("workers", plan.cluster.workers);
      plan.cluster.hosts = c.value("hosts", 1);
      plan.cluster.shards = c.value("shards", 0);
      plan.cluster.ps_hosts = c.value("ps_hosts", 0);
    }
    if (doc.contains("cost")) plan.cost = CostFromJson(doc["cost"]);
    if (doc.contains("figure_sources")) {
      const json& f = doc["figure_sources"];
      plan.figures.link = f.value("link", plan.figures.link);
      plan.figures.loopback = f.value("loopback", plan.figures.loopback);
      plan.figures.shm = f.value("shm", plan.figures.shm);
      plan.figures.collective = f.value("collective", plan.figures.collective);
      plan.figures.ps_rtt = f.value("ps_rtt", plan.figures.ps_rtt);
      plan.figures.straggler = f.value("straggler", plan.figures.straggler);
    }
    plan.local_aggregation = doc.value("local_aggregation", false);
    plan.predicted_comm_s = doc.value("predicted_comm_s", 0.0);
    const json& vars = doc.at("variables");
    for (size_t i = 0; i < vars.size(); ++i) {
      const std::string where = "plan: variables[" + std::to_string(i) + "]: ";
      try {
        plan.variables.push_back(VariableFromJson(vars[i]));
      } catch (const std::exception& e) {
        return InvalidArgument(where + e.what());
      }
      if (plan.variables.back().id != i) return InvalidArgument(where + "\"id\" must equal its index");
      PX_RETURN_IF_ERROR(CheckHotRows(plan.variables.back(), where));
    }
  } catch (const std::exception& e) {
    return InvalidArgument(std::string("plan: ") + e.what());
  }
  if (doc.contains("ps")) {
    try {
      plan.ps = PsFromJson(doc["ps"], plan);
    } catch (const std::exception& e) {
      return InvalidArgument(std::string("plan: ") + e.what());
    }
    PX_RETURN_IF_ERROR(ps::ValidatePsPlan(&plan.ps));
  }
  return plan;
}

Status CheckRegistrationsMatch(const JobPlan& plan, const std::vector<PlannedVariable>& registered,
                               int rank) {
  const std::string who = "rank " + std::to_string(rank);
  if (plan.variables.size() != registered.size()) {
    return FailedPrecondition(who + " registered " + std::to_string(registered.size()) +
                              " variables, but the plan (from rank 0) has " +
                              std::to_string(plan.variables.size()));
  }
  auto shape = [](const PlannedVariable& v) {
    return "\"" + v.name + "\" " +
           (v.dynamic  ? "dynamic, dim " + std::to_string(v.dim)
            : v.sparse ? "sparse " + std::to_string(v.rows) + "x" + std::to_string(v.dim)
                       : "dense " + std::to_string(v.size));
  };
  for (size_t i = 0; i < registered.size(); ++i) {
    const PlannedVariable& p = plan.variables[i];
    const PlannedVariable& r = registered[i];
    if (p.name != r.name || p.sparse != r.sparse || p.size != r.size || p.rows != r.rows ||
        p.dim != r.dim || p.dynamic.has_value() != r.dynamic.has_value()) {
      return FailedPrecondition("variable " + std::to_string(i) + " differs between ranks: " + who +
                                " registered " + shape(r) + ", rank 0 " + shape(p) +
                                "; every rank must register the same variables in the same "
                                "order (build the same model on every rank)");
    }
  }
  return Status::Ok();
}

}  // namespace parallax::plan
