#include "schemas/kv_keys.h"

#include <charconv>

namespace parallax::kv_keys {
namespace {

constexpr std::string_view kJob = kJobScope;
constexpr std::string_view kHost = "host/";
constexpr std::string_view kCluster = "cluster/";

// "<base>/<generation>" from generation 2 on.
std::string OfGeneration(std::string base, uint32_t generation) {
  return generation <= 1 ? base : base + "/" + std::to_string(generation);
}

std::string Attempt(int64_t job_id, int attempt, std::string_view leaf) {
  std::string key = AttemptPrefix(job_id, attempt);
  key += leaf;
  return key;
}

// A decimal number of at most 17 digits (an id or attempt), or -1.
int64_t Number(std::string_view s) {
  if (s.empty() || s.size() > 17) return -1;
  int64_t v = 0;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || end != s.data() + s.size() || v < 0) return -1;
  return v;
}

}  // namespace

std::string JobPrefix(int64_t job_id) { return std::string(kJob) + std::to_string(job_id) + "/"; }
std::string JobPrefixEnd(int64_t job_id) {
  return std::string(kJob) + std::to_string(job_id) + "0";
}
std::string SearchState(int64_t job_id) { return JobPrefix(job_id) + "search"; }
std::string Consistency(int64_t job_id) { return JobPrefix(job_id) + "consistency"; }
std::string PlanCorrection(int64_t job_id) { return JobPrefix(job_id) + "replan"; }
std::string HotRowPresence(int64_t job_id) { return JobPrefix(job_id) + "hot_rows"; }

std::string AttemptPrefix(int64_t job_id, int attempt) {
  return JobPrefix(job_id) + std::to_string(attempt) + "/";
}
std::string TrialSpec(int64_t job_id, int attempt) { return Attempt(job_id, attempt, "search"); }
std::string TrialStepSeconds(int64_t job_id, int attempt) {
  return Attempt(job_id, attempt, "trial/step_seconds");
}
std::string ShardEndpoint(int64_t job_id, int attempt, uint32_t shard, uint32_t generation) {
  return OfGeneration(Attempt(job_id, attempt, "ps/" + std::to_string(shard)), generation);
}
std::string ShardLostUpdates(int64_t job_id, int attempt, uint32_t shard, int64_t generation) {
  return Attempt(job_id, attempt,
                 "ps/" + std::to_string(shard) + "/" + std::to_string(generation) + "/lost_updates");
}
std::string ShardCurveKey(int64_t job_id, int attempt, uint32_t shard, uint32_t generation) {
  return OfGeneration(Attempt(job_id, attempt, "ps-keys/" + std::to_string(shard)), generation);
}
std::string ClientCurveKey(int64_t job_id, int attempt, std::string_view public_key_hex) {
  return Attempt(job_id, attempt, "ps-clients/" + std::string(public_key_hex));
}
std::string CommPrefix(int64_t job_id, int attempt) { return Attempt(job_id, attempt, "comm"); }
std::string RankRegistrations(int64_t job_id, int attempt, int rank) {
  return Attempt(job_id, attempt, "trainer/" + std::to_string(rank) + "/registrations");
}
std::string CheckpointRankPart(int64_t job_id, int attempt, int64_t step, int rank) {
  return Attempt(job_id, attempt,
                 "ckpt/" + std::to_string(step) + "/rank/" + std::to_string(rank));
}
std::string ResumeStep(int64_t job_id, int attempt) { return Attempt(job_id, attempt, "resume"); }

std::string HostFigures(std::string_view hostname) {
  return std::string(kHost) + std::string(hostname) + "/figures";
}
std::string MeasuredCalls(std::string_view address, std::string_view kind) {
  return std::string(kHost) + std::string(address) + "/calls/" + std::string(kind);
}
std::string Straggler(int workers) {
  return std::string(kCluster) + "straggler/" + std::to_string(workers);
}

ParsedKey ParseKey(std::string_view key) {
  ParsedKey parsed;
  if (key.starts_with(kHost) || key.starts_with(kCluster)) {
    parsed.scope = ParsedKey::Scope::kCluster;
    parsed.leaf = std::string(key.substr(key.find('/') + 1));
    return parsed;
  }
  if (!key.starts_with(kJob)) return parsed;
  std::string_view rest = key.substr(kJob.size());
  const size_t a = rest.find('/');
  if (a == std::string_view::npos) return parsed;
  const int64_t job = Number(rest.substr(0, a));
  if (job < 0) return parsed;
  parsed.scope = ParsedKey::Scope::kJob;
  parsed.job_id = job;
  rest = rest.substr(a + 1);
  const size_t b = rest.find('/');
  const int64_t attempt = b == std::string_view::npos ? -1 : Number(rest.substr(0, b));
  if (attempt >= 0 && attempt <= INT32_MAX) {
    parsed.scope = ParsedKey::Scope::kAttempt;
    parsed.attempt = static_cast<int>(attempt);
    rest = rest.substr(b + 1);
  }
  parsed.leaf = std::string(rest);
  return parsed;
}

bool IsCoordinatorOnly(const ParsedKey& key) {
  return (key.scope == ParsedKey::Scope::kJob || key.scope == ParsedKey::Scope::kAttempt) &&
         key.leaf == "search";
}

}  // namespace parallax::kv_keys
