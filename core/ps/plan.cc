#include "core/ps/plan.h"

#include <algorithm>
#include <fstream>
#include <set>
#include <sstream>

#include <nlohmann/json.hpp>

namespace parallax::ps {
namespace {

using nlohmann::json;

template <typename T>
Status Get(const json& obj, const char* key, T* out, const std::string& where) {
  auto it = obj.find(key);
  if (it == obj.end()) return Status::Ok();
  try {
    *out = it->get<T>();
  } catch (const json::exception& e) {
    return InvalidArgument("plan: " + where + "\"" + key + "\" has the wrong type: " + e.what());
  }
  return Status::Ok();
}

// A string key naming one of include/parallax/settings.h's enums: `parse`
// turns the name into it; absent keys keep *out.
template <typename E>
Status GetSetting(const json& obj, const char* key, std::optional<E> (*parse)(std::string_view),
                  E* out, const std::string& where) {
  std::string name;
  if (obj.find(key) == obj.end()) return Status::Ok();
  PX_RETURN_IF_ERROR(Get(obj, key, &name, where));
  const std::optional<E> v = parse(name);
  if (!v) return InvalidArgument("plan: " + where + "\"" + key + "\" is \"" + name + "\", not a known name");
  *out = *v;
  return Status::Ok();
}

Status ParseOptimizer(const json& j, OptimizerSettings* o, const std::string& where) {
  PX_RETURN_IF_ERROR(GetSetting(j, "type", &ParseOptimizerType, &o->type, where + "optimizer "));
  PX_RETURN_IF_ERROR(Get(j, "lr", &o->lr, where));
  PX_RETURN_IF_ERROR(Get(j, "momentum", &o->momentum, where));
  PX_RETURN_IF_ERROR(Get(j, "beta1", &o->beta1, where));
  PX_RETURN_IF_ERROR(Get(j, "beta2", &o->beta2, where));
  PX_RETURN_IF_ERROR(Get(j, "epsilon", &o->epsilon, where));
  PX_RETURN_IF_ERROR(Get(j, "initial_accumulator", &o->initial_accumulator, where));
  return Status::Ok();
}

Status ParseInit(const json& j, Initializer* s, const std::string& where) {
  PX_RETURN_IF_ERROR(GetSetting(j, "type", &ParseInitializerType, &s->type, where + "init "));
  PX_RETURN_IF_ERROR(Get(j, "seed", &s->seed, where));
  PX_RETURN_IF_ERROR(Get(j, "scale", &s->scale, where));
  return Status::Ok();
}

}  // namespace

const VariableSpec* PsPlan::FindVariable(uint32_t id) const {
  // Plans hold a handful of variables; ids are usually their index.
  if (id < variables.size() && variables[id].id == id) return &variables[id];
  for (const auto& v : variables) {
    if (v.id == id) return &v;
  }
  return nullptr;
}

StatusOr<PsPlan> ParsePsPlan(std::string_view text) {
  json doc = json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded()) return InvalidArgument("plan: not valid JSON");
  if (doc.is_object() && doc.contains("ps") && doc["ps"].is_object()) doc = doc["ps"];
  if (!doc.is_object()) return InvalidArgument("plan: expected a JSON object");
  PsPlan plan;
  std::string reduce = "mean", nonfinite = "reject";
  PX_RETURN_IF_ERROR(GetSetting(doc, "consistency", &ParseConsistency, &plan.consistency, ""));
  PX_RETURN_IF_ERROR(Get(doc, "staleness", &plan.staleness, ""));
  PX_RETURN_IF_ERROR(Get(doc, "sync_warmup_steps", &plan.sync_warmup_steps, ""));
  PX_RETURN_IF_ERROR(Get(doc, "num_workers", &plan.num_workers, ""));
  PX_RETURN_IF_ERROR(Get(doc, "num_contributors", &plan.num_contributors, ""));
  PX_RETURN_IF_ERROR(Get(doc, "num_shards", &plan.num_shards, ""));
  PX_RETURN_IF_ERROR(Get(doc, "sync_reduce", &reduce, ""));
  PX_RETURN_IF_ERROR(
      GetSetting(doc, "value_encoding", &ParseValueEncoding, &plan.value_encoding, ""));
  PX_RETURN_IF_ERROR(Get(doc, "staleness_lr", &plan.staleness_lr, ""));
  PX_RETURN_IF_ERROR(Get(doc, "nonfinite", &nonfinite, ""));
  if (reduce != "mean" && reduce != "sum")
    return InvalidArgument("plan: \"sync_reduce\" must be mean or sum");
  plan.sync_mean = reduce == "mean";
  if (nonfinite != "reject" && nonfinite != "count")
    return InvalidArgument("plan: \"nonfinite\" must be reject or count");
  plan.reject_nonfinite = nonfinite == "reject";
  if (plan.num_workers == 0) return InvalidArgument("plan: \"num_workers\" must be > 0");
  if (plan.num_shards == 0) return InvalidArgument("plan: \"num_shards\" must be > 0");
  if (plan.staleness < 0) return InvalidArgument("plan: \"staleness\" must be >= 0");
  if (plan.sync_warmup_steps < 0)
    return InvalidArgument("plan: \"sync_warmup_steps\" must be >= 0");

  auto vars = doc.find("variables");
  if (vars == doc.end() || !vars->is_array())
    return InvalidArgument("plan: \"variables\" (an array) is missing");
  std::set<uint32_t> ids;
  for (size_t i = 0; i < vars->size(); ++i) {
    const json& jv = (*vars)[i];
    std::string where = "variables[" + std::to_string(i) + "]: ";
    if (!jv.is_object()) return InvalidArgument("plan: " + where + "expected an object");
    VariableSpec v;
    v.id = static_cast<uint32_t>(i);
    std::string scheme = "hash";
    PX_RETURN_IF_ERROR(Get(jv, "id", &v.id, where));
    PX_RETURN_IF_ERROR(Get(jv, "name", &v.name, where));
    PX_RETURN_IF_ERROR(Get(jv, "rows", &v.rows, where));
    PX_RETURN_IF_ERROR(Get(jv, "dim", &v.dim, where));
    PX_RETURN_IF_ERROR(Get(jv, "partitions", &v.partitions, where));
    PX_RETURN_IF_ERROR(Get(jv, "scheme", &scheme, where));
    PX_RETURN_IF_ERROR(Get(jv, "partition_shards", &v.partition_shards, where));
    if (scheme == "hash") v.scheme = PartitionScheme::kHash;
    else if (scheme == "range") v.scheme = PartitionScheme::kRange;
    else return InvalidArgument("plan: " + where + "\"scheme\" must be hash or range");
    if (v.rows <= 0) return InvalidArgument("plan: " + where + "\"rows\" must be > 0");
    if (v.dim == 0 || v.dim > (1u << 20))
      return InvalidArgument("plan: " + where + "\"dim\" must be in 1..1048576");
    if (v.partitions == 0 || v.partitions > v.rows || v.partitions > 65536)
      return InvalidArgument("plan: " + where + "\"partitions\" must be in 1..min(rows, 65536)");
    if (!ids.insert(v.id).second)
      return InvalidArgument("plan: " + where + "\"id\" " + std::to_string(v.id) + " is repeated");
    if (v.partition_shards.empty()) {
      for (uint32_t p = 0; p < v.partitions; ++p) v.partition_shards.push_back(p % plan.num_shards);
    }
    if (v.partition_shards.size() != v.partitions)
      return InvalidArgument("plan: " + where + "\"partition_shards\" must have one entry per partition");
    for (uint32_t s : v.partition_shards) {
      if (s >= plan.num_shards)
        return InvalidArgument("plan: " + where + "\"partition_shards\" names shard " +
                               std::to_string(s) + " but \"num_shards\" is " +
                               std::to_string(plan.num_shards));
    }
    if (auto it = jv.find("optimizer"); it != jv.end()) {
      PX_RETURN_IF_ERROR(ParseOptimizer(*it, &v.optimizer, where));
    }
    if (auto it = jv.find("init"); it != jv.end()) PX_RETURN_IF_ERROR(ParseInit(*it, &v.init, where));
    plan.variables.push_back(std::move(v));
  }
  return plan;
}

StatusOr<PsPlan> LoadPsPlanFile(const std::string& path) {
  std::ifstream in(path);
  if (!in) return IoError("cannot read plan file \"" + path + "\"");
  std::stringstream ss;
  ss << in.rdbuf();
  auto plan = ParsePsPlan(ss.str());
  if (!plan.ok()) return plan.status().WithContext(path);
  return plan;
}

std::string PsPlanToJson(const PsPlan& plan) {
  json doc;
  doc["consistency"] = ConsistencyName(plan.consistency);
  doc["staleness"] = plan.staleness;
  doc["sync_warmup_steps"] = plan.sync_warmup_steps;
  doc["num_workers"] = plan.num_workers;
  doc["num_contributors"] = plan.num_contributors;
  doc["sync_reduce"] = plan.sync_mean ? "mean" : "sum";
  doc["num_shards"] = plan.num_shards;
  doc["value_encoding"] = ValueEncodingName(plan.value_encoding);
  doc["staleness_lr"] = plan.staleness_lr;
  doc["nonfinite"] = plan.reject_nonfinite ? "reject" : "count";
  doc["variables"] = json::array();
  for (const auto& v : plan.variables) {
    json jv;
    jv["id"] = v.id;
    jv["name"] = v.name;
    jv["rows"] = v.rows;
    jv["dim"] = v.dim;
    jv["partitions"] = v.partitions;
    jv["scheme"] = v.scheme == PartitionScheme::kHash ? "hash" : "range";
    jv["partition_shards"] = v.partition_shards;
    const auto& o = v.optimizer;
    jv["optimizer"] = {{"type", OptimizerTypeName(o.type)}, {"lr", o.lr}, {"momentum", o.momentum},
                       {"beta1", o.beta1}, {"beta2", o.beta2}, {"epsilon", o.epsilon},
                       {"initial_accumulator", o.initial_accumulator}};
    jv["init"] = {{"type", InitializerTypeName(v.init.type)}, {"seed", v.init.seed}, {"scale", v.init.scale}};
    doc["variables"].push_back(std::move(jv));
  }
  return doc.dump(2);
}

uint64_t UnMix64(uint64_t x) {
  // Inverses of each step, in reverse order.
  x ^= (x >> 31) ^ (x >> 62);
  x *= 0x319642b2d24d8ec3ULL;
  x ^= (x >> 27) ^ (x >> 54);
  x *= 0x96de1b173f119089ULL;
  x ^= (x >> 30) ^ (x >> 60);
  return x;
}

Partitioner::Partitioner(const VariableSpec& var)
    : partitions_(var.partitions),
      hash_(var.scheme == PartitionScheme::kHash),
      block_(std::max<int64_t>(1, (var.rows + var.partitions - 1) / std::max<uint32_t>(1, var.partitions))),
      inv_block_(1.0 / static_cast<double>(block_)) {}

uint32_t PartitionOf(const VariableSpec& var, int64_t id) {
  if (var.partitions == 1) return 0;
  if (var.scheme == PartitionScheme::kHash) {
    return static_cast<uint32_t>(Mix64(static_cast<uint64_t>(id)) % var.partitions);
  }
  const int64_t block = (var.rows + var.partitions - 1) / var.partitions;
  return static_cast<uint32_t>(id / block);
}

}  // namespace parallax::ps
