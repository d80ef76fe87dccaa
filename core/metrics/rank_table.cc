#include "core/metrics/rank_table.h"

#include <cstdio>

#include "core/base/format_bytes.h"
#include "schemas/metric_names.h"

namespace parallax {
namespace {

namespace names = metric_names;

std::string Fixed(double x, int digits) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", digits, x);
  return buf;
}

const char* PathColumn(names::Path path) {
  switch (path) {
    case names::Path::kAllReduce: return "all-reduce S/R";
    case names::Path::kAllGather: return "all-gather S/R";
    case names::Path::kPsPush: return "PS push S/R";
    case names::Path::kPsPull: return "PS pull S/R";
    case names::Path::kLocalAgg: return "local agg S/R";
  }
  return "?";
}

}  // namespace

RankTable BuildRankTable(const std::vector<RankPoint>& points, RankTableStyle style) {
  const bool page = style == RankTableStyle::kPage;
  RankTable table;
  table.columns = {"rank", "step", "loss", "samples/s", "compute", "dense wait", "sparse wait"};
  for (names::Path path : names::kPaths) table.columns.push_back(PathColumn(path));
  // A job with row caches: the share of a step's distinct rows they served.
  bool cached = false;
  for (const RankPoint& p : points) {
    cached = cached || (p.values != nullptr && p.values->count(names::kRowCacheHits) > 0);
  }
  if (cached) table.columns.push_back("cache hits");
  const std::map<std::string, double> none;
  for (const RankPoint& p : points) {
    const std::map<std::string, double>& v = p.values != nullptr ? *p.values : none;
    auto ms = [&](const char* name) {
      return Fixed(names::ValueOf(v, name), 2) + (page ? " ms" : "ms");
    };
    std::vector<std::string> row = {std::to_string(p.rank),  std::to_string(p.step),
                                    Fixed(p.loss, 4),        Fixed(p.throughput, 1),
                                    ms(names::kComputeMs),   ms(names::kDenseWaitMs),
                                    ms(names::kSparseWaitMs)};
    for (names::Path path : names::kPaths) {
      const char* sep = page ? " " : "";
      row.push_back(FormatBytes(names::ValueOf(v, names::SentBytes(path)), sep) +
                    (page ? " / " : "/") +
                    FormatBytes(names::ValueOf(v, names::RecvBytes(path)), sep));
    }
    if (cached) {
      const double hits = names::ValueOf(v, names::kRowCacheHits);
      const double rows = hits + names::ValueOf(v, names::kRowCacheMisses) +
                          names::ValueOf(v, names::kRowCacheStaleRefreshes);
      row.push_back(rows > 0 ? Fixed(100.0 * hits / rows, 1) + (page ? " %" : "%") : "-");
    }
    table.rows.push_back(std::move(row));
  }
  return table;
}

}  // namespace parallax
