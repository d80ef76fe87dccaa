// The typed vocabulary of a job: its architecture and consistency mode, the
// path the plan gives a variable, how PS values travel, and a variable's
// optimizer and initializer. Job files name these as strings; the loader
// (and the plan's JSON reader) parse each once into these enums, and code
// downstream compares enums, never strings.
#ifndef PARALLAX_INCLUDE_PARALLAX_SETTINGS_H_
#define PARALLAX_INCLUDE_PARALLAX_SETTINGS_H_

#include <cstdint>
#include <optional>
#include <string_view>
#include <vector>

namespace parallax {

// [job] arch: how variables are kept in sync. kHybrid lets the plan choose
// per variable; the others force one path for every variable (a dense
// variable has no all-gather form and stays on all-reduce under kAllGather).
enum class Arch { kHybrid, kAllReduce, kAllGather, kPs };

// [job] consistency, of PS variables (collectives are synchronous):
//   kSync   every rank's step-t gradients are applied once, in rank order;
//   kAsync  a shard applies each push when it arrives;
//   kSsp    pushes apply on arrival, a pull at clock c waits until the
//           slowest rank reached c − staleness.
enum class Consistency { kSync, kAsync, kSsp };

// Where the plan puts a variable: dense gradients averaged by all-reduce;
// the (ids, rows) of every rank all-gathered and applied to a replica on
// each rank; or partitioned over PS shards, rows pulled and pushed per batch.
enum class VariablePath { kAllReduce, kAllGather, kPs };

// [ps] value_encoding: how row values travel on the PS wire.
enum class ValueEncoding { kFp32, kFp16 };

// [ps] hosts: where a job's PS shards run. kWorkers: on the agents that run
// its trainer ranks (a worker's rows in its own host's shard never cross the
// link); kPs: on agents started to host PS shards only (`parallax-agent
// --role ps`), so every worker's PS traffic crosses its link and a worker
// host's bytes do not grow with the number of workers.
enum class PsHosts { kWorkers, kPs };

enum class OptimizerType { kSgd, kMomentum, kAdagrad, kAdam };

// Names as job files and plans spell them ("hybrid", "allreduce", "sync",
// "ps", "fp16", "adagrad", ...), and back: nullopt for any other string.
const char* ArchName(Arch arch);
std::optional<Arch> ParseArch(std::string_view name);
const char* ConsistencyName(Consistency consistency);
std::optional<Consistency> ParseConsistency(std::string_view name);
const char* VariablePathName(VariablePath path);
std::optional<VariablePath> ParseVariablePath(std::string_view name);
const char* ValueEncodingName(ValueEncoding encoding);
std::optional<ValueEncoding> ParseValueEncoding(std::string_view name);
const char* PsHostsName(PsHosts hosts);
std::optional<PsHosts> ParsePsHosts(std::string_view name);
const char* OptimizerTypeName(OptimizerType type);
std::optional<OptimizerType> ParseOptimizerType(std::string_view name);

// A variable's optimizer, the same math on workers and PS shards (g the
// gradient, w the weights; state starts at 0, Adagrad's accumulator at
// initial_accumulator):
//   sgd:      w -= lr·g
//   momentum: m = μ·m + g;  w -= lr·m
//   adagrad:  a += g²;      w -= lr·g / (√a + ε)
//   adam:     m, v moments with bias correction; w -= lr·m̂ / (√v̂ + ε)
// A variable keeps its optimizer whichever path the plan gives it. Sparse
// (lazy) momentum and Adam update only touched rows and so differ from their
// dense forms; SGD and Adagrad are identical either way.
struct OptimizerSettings {
  OptimizerType type = OptimizerType::kSgd;
  float lr = 0.01f;                  // > 0
  float momentum = 0.9f;             // momentum: [0, 1)
  float beta1 = 0.9f;                // adam: [0, 1)
  float beta2 = 0.999f;              // adam: [0, 1)
  float epsilon = 1e-8f;             // adagrad, adam: > 0
  float initial_accumulator = 0.1f;  // adagrad: >= 0
};

// Initial values of a variable: a pure function of (seed, variable id, row),
// the same on workers and PS shards.
struct Initializer {
  enum class Type { kZeros, kUniform, kNormal };
  Type type = Type::kUniform;
  uint64_t seed = 1;
  float scale = 0.05f;  // uniform in [-scale, scale); normal with stddev scale
};
const char* InitializerTypeName(Initializer::Type type);
std::optional<Initializer::Type> ParseInitializerType(std::string_view name);

// A dynamic table (Session::RegisterDynamic): a sparse variable with no row
// count, whose ids are any 64-bit values, held only by PS shards. An id
// becomes a row once it was seen in `admit_after` contributions (one
// worker's push of one step to a partition; with local aggregation one
// host's); a row untouched for `ttl_steps` steps goes; at `max_rows` rows
// (the table's, split over its partitions) the coldest row by `eviction`
// makes room for a new one. 0 for ttl_steps or max_rows: none.
enum class EvictionPolicy {
  kLru,  // the row touched longest ago
  kLfu,  // of a few rows drawn at random, the one pushed to least often
};
const char* EvictionPolicyName(EvictionPolicy policy);
std::optional<EvictionPolicy> ParseEvictionPolicy(std::string_view name);

struct DynamicTableSettings {
  int64_t admit_after = 1;  // >= 1 (1: at once)
  int64_t ttl_steps = 0;    // >= 0
  int64_t max_rows = 0;     // >= 0
  EvictionPolicy eviction = EvictionPolicy::kLru;
  // Ids that are never rows (a padding id, a model's "missing value"): they
  // read as zeros and their gradients are dropped (counted).
  std::vector<int64_t> never_admit;
};

}  // namespace parallax

#endif  // PARALLAX_INCLUDE_PARALLAX_SETTINGS_H_
