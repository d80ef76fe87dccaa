// The named values of a metric point (rpc::MetricPoint.values in
// schemas/coordinator.thrift): what trainer ranks report every
// metrics_every steps and what `parallax status`, the web pages, /metrics
// and the re-plan monitor read. Built and read only through this file, so
// the writer and the readers cannot drift apart (a literal of one elsewhere
// fails tests/layering/schema_names_test.py); docs/ARCHITECTURE.md
// ("Metrics") says what each measures.
#ifndef PARALLAX_SCHEMAS_METRIC_NAMES_H_
#define PARALLAX_SCHEMAS_METRIC_NAMES_H_

#include <array>
#include <map>
#include <string>
#include <string_view>

namespace parallax::metric_names {

// The paths whose bytes a rank counts at the transport, per step.
enum class Path { kAllReduce, kAllGather, kPsPush, kPsPull, kLocalAgg };
inline constexpr std::array<Path, 5> kPaths = {Path::kAllReduce, Path::kAllGather, Path::kPsPush,
                                               Path::kPsPull, Path::kLocalAgg};
// "allreduce", "allgather", "ps_push", "ps_pull", "local_agg": the `path`
// label of /metrics.
const char* PathName(Path path);
std::string SentBytes(Path path);  // "<path>_sent_bytes"
std::string RecvBytes(Path path);  // "<path>_recv_bytes"

// Milliseconds per step computing, waiting for dense (all-reduce) and for
// sparse (PS, all-gather) communication; the steps a point covers; the mean
// loss of those steps.
inline constexpr char kComputeMs[] = "compute_ms";
inline constexpr char kDenseWaitMs[] = "dense_wait_ms";
inline constexpr char kSparseWaitMs[] = "sparse_wait_ms";
inline constexpr char kSteps[] = "steps";
inline constexpr char kLossMean[] = "loss_mean";
// Messages a rank sent to the PS shards per step (a batch, schemas/ps_wire.md
// "Batches", counts once).
inline constexpr char kPsRequests[] = "ps_requests";
// Per step, with row caches ([ps] cache_staleness; core/ps/row_cache.h):
// distinct rows a step served from the cache, pulled because not held, and
// pulled again because too old; the pull bytes the hits saved.
inline constexpr char kRowCacheHits[] = "row_cache_hits";
inline constexpr char kRowCacheMisses[] = "row_cache_misses";
inline constexpr char kRowCacheStaleRefreshes[] = "row_cache_stale_refreshes";
inline constexpr char kRowCacheBytesSaved[] = "row_cache_bytes_saved";
// Per step, with hot rows ([ps] hot_rows; core/plan/hot_rows.h): distinct
// rows of the step's gradients of tables with hot rows that were hot (kept
// on the ranks, no PS traffic) and that were not (pulled and pushed). Their
// share hits / (hits + misses) is what the plan's "hot_rows_share" predicts.
inline constexpr char kHotRowHits[] = "hot_row_hits";
inline constexpr char kHotRowMisses[] = "hot_row_misses";

// The value `name` of a point's values; 0 when the point has none (an older
// trainer, or a path the job does not use).
double ValueOf(const std::map<std::string, double>& values, std::string_view name);

}  // namespace parallax::metric_names

#endif  // PARALLAX_SCHEMAS_METRIC_NAMES_H_
