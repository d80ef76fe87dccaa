// The names of include/parallax/settings.h's enums: one table per enum, read
// both ways.
#include "parallax/settings.h"

#include "core/base/setting_names.h"

#include <span>
#include <utility>

namespace parallax {
namespace {

template <typename E>
using Names = std::span<const std::pair<E, const char*>>;

template <typename E>
const char* NameOf(Names<E> names, E value) {
  for (const auto& [v, name] : names) {
    if (v == value) return name;
  }
  return "?";
}

template <typename E>
std::optional<E> Parse(Names<E> names, std::string_view name) {
  for (const auto& [v, n] : names) {
    if (name == n) return v;
  }
  return std::nullopt;
}

constexpr std::pair<Arch, const char*> kArchs[] = {{Arch::kHybrid, "hybrid"},
                                                   {Arch::kAllReduce, "allreduce"},
                                                   {Arch::kAllGather, "allgather"},
                                                   {Arch::kPs, "ps"}};
constexpr std::pair<Consistency, const char*> kConsistencies[] = {
    {Consistency::kSync, "sync"}, {Consistency::kAsync, "async"}, {Consistency::kSsp, "ssp"}};
constexpr std::pair<VariablePath, const char*> kPaths[] = {{VariablePath::kAllReduce, "allreduce"},
                                                           {VariablePath::kAllGather, "allgather"},
                                                           {VariablePath::kPs, "ps"}};
constexpr std::pair<ValueEncoding, const char*> kEncodings[] = {{ValueEncoding::kFp32, "fp32"},
                                                                {ValueEncoding::kFp16, "fp16"}};
constexpr std::pair<PsHosts, const char*> kPsHosts[] = {{PsHosts::kWorkers, "workers"},
                                                        {PsHosts::kPs, "ps"}};
constexpr std::pair<OptimizerType, const char*> kOptimizers[] = {
    {OptimizerType::kSgd, "sgd"},
    {OptimizerType::kMomentum, "momentum"},
    {OptimizerType::kAdagrad, "adagrad"},
    {OptimizerType::kAdam, "adam"}};
constexpr std::pair<Initializer::Type, const char*> kInitializers[] = {
    {Initializer::Type::kZeros, "zeros"},
    {Initializer::Type::kUniform, "uniform"},
    {Initializer::Type::kNormal, "normal"}};
constexpr std::pair<EvictionPolicy, const char*> kEvictions[] = {{EvictionPolicy::kLru, "lru"},
                                                                 {EvictionPolicy::kLfu, "lfu"}};

}  // namespace

const char* ArchName(Arch v) { return NameOf<Arch>(kArchs, v); }
std::optional<Arch> ParseArch(std::string_view n) { return Parse<Arch>(kArchs, n); }
const char* ConsistencyName(Consistency v) { return NameOf<Consistency>(kConsistencies, v); }
std::optional<Consistency> ParseConsistency(std::string_view n) {
  return Parse<Consistency>(kConsistencies, n);
}
const char* VariablePathName(VariablePath v) { return NameOf<VariablePath>(kPaths, v); }
std::optional<VariablePath> ParseVariablePath(std::string_view n) {
  return Parse<VariablePath>(kPaths, n);
}
const char* ValueEncodingName(ValueEncoding v) { return NameOf<ValueEncoding>(kEncodings, v); }
std::optional<ValueEncoding> ParseValueEncoding(std::string_view n) {
  return Parse<ValueEncoding>(kEncodings, n);
}
const char* PsHostsName(PsHosts v) { return NameOf<PsHosts>(kPsHosts, v); }
std::optional<PsHosts> ParsePsHosts(std::string_view n) { return Parse<PsHosts>(kPsHosts, n); }
const char* OptimizerTypeName(OptimizerType v) { return NameOf<OptimizerType>(kOptimizers, v); }
std::optional<OptimizerType> ParseOptimizerType(std::string_view n) {
  return Parse<OptimizerType>(kOptimizers, n);
}
const char* InitializerTypeName(Initializer::Type v) {
  return NameOf<Initializer::Type>(kInitializers, v);
}
std::optional<Initializer::Type> ParseInitializerType(std::string_view n) {
  return Parse<Initializer::Type>(kInitializers, n);
}
const char* EvictionPolicyName(EvictionPolicy v) { return NameOf<EvictionPolicy>(kEvictions, v); }
std::optional<EvictionPolicy> ParseEvictionPolicy(std::string_view n) {
  return Parse<EvictionPolicy>(kEvictions, n);
}

namespace {
template <typename E>
std::vector<std::string_view> All(Names<E> names) {
  std::vector<std::string_view> out;
  for (const auto& [v, n] : names) out.push_back(n);
  return out;
}
}  // namespace

template <>
std::vector<std::string_view> SettingNames<Arch>() { return All<Arch>(kArchs); }
template <>
std::vector<std::string_view> SettingNames<Consistency>() { return All<Consistency>(kConsistencies); }
template <>
std::vector<std::string_view> SettingNames<VariablePath>() { return All<VariablePath>(kPaths); }
template <>
std::vector<std::string_view> SettingNames<ValueEncoding>() { return All<ValueEncoding>(kEncodings); }
template <>
std::vector<std::string_view> SettingNames<PsHosts>() { return All<PsHosts>(kPsHosts); }
template <>
std::vector<std::string_view> SettingNames<OptimizerType>() { return All<OptimizerType>(kOptimizers); }
template <>
std::vector<std::string_view> SettingNames<Initializer::Type>() {
  return All<Initializer::Type>(kInitializers);
}

}  // namespace parallax
