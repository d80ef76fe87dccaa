// Every key of the coordinator's key-value store: the one place that builds
// and parses them (schemas/kv_keys.md is the page). The store is shared by
// processes that never include each other (coordinator, trainer ranks, PS
// shards, agents), so a key spelled in two files is a contract with two
// owners; a string literal of a key anywhere else fails the schema_names test
// (tests/layering/schema_names_test.py).
//
// Three scopes:
//   job/<id>/<leaf>            a job's, kept until the job ends
//   job/<id>/<attempt>/<leaf>  an attempt's, dropped when a newer attempt
//                              starts; the coordinator refuses writes from an
//                              older attempt (fencing)
//   host/..., cluster/...      the cluster's, kept across jobs
// Ids and attempts are decimal without leading zeros.
#ifndef PARALLAX_SCHEMAS_KV_KEYS_H_
#define PARALLAX_SCHEMAS_KV_KEYS_H_

#include <cstdint>
#include <string>
#include <string_view>

namespace parallax::kv_keys {

// The prefix of every job's keys ("job/"), for counting them all.
inline constexpr char kJobScope[] = "job/";

// A job's keys.
std::string JobPrefix(int64_t job_id);  // "job/<id>/": every key of the job
// "job/<id>0": the first key after every key of the job in byte order ('0'
// follows '/'), so [JobPrefix, JobPrefixEnd) is a range scan of the job.
std::string JobPrefixEnd(int64_t job_id);
std::string SearchState(int64_t job_id);     // "job/<id>/search": the partition search
std::string Consistency(int64_t job_id);     // "job/<id>/consistency": `parallax set`
std::string PlanCorrection(int64_t job_id);  // "job/<id>/replan": measured/predicted ratios
std::string HotRowPresence(int64_t job_id);  // "job/<id>/hot_rows": re-measured hot rows

// An attempt's keys.
std::string AttemptPrefix(int64_t job_id, int attempt);  // "job/<id>/<attempt>/"
// ".../search": the partitions a trial attempt runs with (coordinator only).
std::string TrialSpec(int64_t job_id, int attempt);
// ".../trial/step_seconds": what a trial attempt measured.
std::string TrialStepSeconds(int64_t job_id, int attempt);
// ".../ps/<shard>": a PS shard's endpoint; ".../ps/<shard>/<generation>"
// for a generation from 2 on (a shard started again alone).
std::string ShardEndpoint(int64_t job_id, int attempt, uint32_t shard, uint32_t generation = 1);
// ".../ps/<shard>/<generation>/lost_updates": a restarted shard's lost
// updates, recorded once.
std::string ShardLostUpdates(int64_t job_id, int attempt, uint32_t shard, int64_t generation);
// ".../ps-keys/<shard>[/<generation>]": a shard's CURVE public key.
std::string ShardCurveKey(int64_t job_id, int attempt, uint32_t shard, uint32_t generation = 1);
// ".../ps-clients/<hex>": a PS client's CURVE public key (64 hex digits),
// published by the client, checked by the shard's ZAP handler.
std::string ClientCurveKey(int64_t job_id, int attempt, std::string_view public_key_hex);
// ".../comm": the prefix under which Gloo and NCCL rendezvous.
std::string CommPrefix(int64_t job_id, int attempt);
// ".../trainer/<rank>/registrations": whether a rank's variables match the plan.
std::string RankRegistrations(int64_t job_id, int attempt, int rank);
// ".../ckpt/<step>/rank/<rank>": the digest of a rank's part of a checkpoint.
std::string CheckpointRankPart(int64_t job_id, int attempt, int64_t step, int rank);
// ".../resume": the step every rank resumes from.
std::string ResumeStep(int64_t job_id, int attempt);

// The cluster's keys.
std::string HostFigures(std::string_view hostname);  // "host/<hostname>/figures"
// "host/<address>/calls/<kind>": per-call costs measured from `address`;
// kind is "collective", "ps" or "link".
std::string MeasuredCalls(std::string_view address, std::string_view kind);
std::string Straggler(int workers);  // "cluster/straggler/<workers>"

// What a key is, by its scope. Never fails: a key outside the three scopes
// is kOther (clients may store their own keys).
struct ParsedKey {
  enum class Scope { kJob, kAttempt, kCluster, kOther };
  Scope scope = Scope::kOther;
  int64_t job_id = 0;  // kJob, kAttempt
  int attempt = 0;     // kAttempt
  // What follows the scope's prefix ("search", "ps/0", "figures" of
  // "host/a/figures" is "a/figures").
  std::string leaf;
};
ParsedKey ParseKey(std::string_view key);

// Whether only the coordinator may write `key` (the partition search's).
bool IsCoordinatorOnly(const ParsedKey& key);

}  // namespace parallax::kv_keys

#endif  // PARALLAX_SCHEMAS_KV_KEYS_H_
