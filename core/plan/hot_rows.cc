#include "core/plan/hot_rows.h"

#include <algorithm>
#include <cstdio>
#include <utility>
#include <vector>

namespace parallax::plan {

namespace {

// The PS part's predicted time with hot rows that take `share` of the
// table's rows a step touches.
double PsSeconds(const VariableStats& var, double share, const ClusterShape& cluster,
                 const CostOptions& options, bool local_aggregation) {
  return PsCost(WithoutHotRows(var, share), cluster, options, local_aggregation).seconds *
         options.ps_time_scale;
}

// The all-reduce of h hot rows' block (gradients and touched counts).
double BlockSeconds(int64_t h, int64_t dim, const ClusterShape& cluster, const CostOptions& options,
                    bool shares_call) {
  if (h == 0) return 0;
  const double full = AllReduceCost(HotRowsBlock("", h, dim), cluster, options).seconds;
  // Joining other variables' buckets adds bytes, not a call.
  VariableStats one;
  one.rows = 1;
  one.dim = 1;
  const double added = shares_call ? full - AllReduceCost(one, cluster, options).seconds : full;
  return std::max(0.0, added) * options.collective_time_scale;
}

// The share of the batches to come that hold a row c of the B sampled
// batches hold, by c (index 0..B). The rows are picked from the same
// samples, so the in-sample share c/B would count every row seen once (most
// of a long tail) as if it recurred at 1/B. Leave-one-out, (c − 1)/(B − 1),
// is the share of the other sampled batches that hold it: low, 0 for a row
// seen once, though as a class such rows do recur. Good–Turing's estimate
// for binomial counts corrects it where rows are rare (c ≤ 4): a row of
// count c is expected at (c + 1)·N(c+1) / ((B − c)·N(c)), N(c) the rows of
// count c (the rows seen c + 1 times tell how often the rows seen c times
// come back), kept within [leave-one-out, c/B] so that the order by c holds.
// With one sampled batch, the in-sample share: there is no other.
std::vector<double> ExpectedPresence(const Sparsity& sparsity) {
  const int b = sparsity.batches;
  std::vector<double> out(static_cast<size_t>(std::max(b, 0)) + 1, 0.0);
  if (b == 1) out[1] = 1;
  if (b <= 1) return out;
  std::vector<double> n(out.size() + 1, 0.0);  // n[c]: rows of count c
  for (const auto& [row, c] : sparsity.row_batches) n[static_cast<size_t>(c)] += 1;
  for (int c = 1; c <= b; ++c) {
    const double loo = static_cast<double>(c - 1) / (b - 1);
    const double in_sample = static_cast<double>(c) / b;
    out[static_cast<size_t>(c)] = loo;
    if (c <= 4 && c < b && n[static_cast<size_t>(c)] > 0) {
      const double gt = (c + 1) * n[static_cast<size_t>(c) + 1] /
                        ((b - c) * n[static_cast<size_t>(c)]);
      out[static_cast<size_t>(c)] = std::clamp(gt, loo, in_sample);
    }
  }
  return out;
}

std::string Ms(double s) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.4g ms", s * 1e3);
  return buf;
}

}  // namespace

VariableStats WithoutHotRows(VariableStats var, double share) {
  // A host's batches hold the hot rows about as a worker's do: its rows
  // shrink by the same share.
  var.alpha *= 1 - share;
  if (var.alpha_host >= 0) var.alpha_host *= 1 - share;
  return var;
}

VariableStats HotRowsBlock(std::string name, int64_t h, int64_t dim) {
  VariableStats block;
  block.name = std::move(name);
  block.sparse = false;
  block.rows = 1;
  block.dim = h * (dim + 1);
  return block;
}

HotRowsChoice ChooseHotRows(const VariableStats& var, const Sparsity& sparsity, int64_t requested,
                            const ClusterShape& cluster, const CostOptions& options,
                            bool local_aggregation, bool shares_call) {
  HotRowsChoice out;
  // (presence, row), most present first: the presence a hot row is expected
  // to have in the steps to come (ExpectedPresence).
  const std::vector<double> expected = ExpectedPresence(sparsity);
  std::vector<std::pair<double, int64_t>> by_presence;
  by_presence.reserve(sparsity.row_batches.size());
  for (const auto& [row, c] : sparsity.row_batches) {
    by_presence.emplace_back(expected[static_cast<size_t>(c)], row);
  }
  std::sort(by_presence.begin(), by_presence.end(),
            [](const auto& a, const auto& b) { return a.first != b.first ? a.first > b.first : a.second < b.second; });
  const double k = var.alpha * static_cast<double>(std::max<int64_t>(1, var.rows));
  auto predicted = [&](size_t h, double taken) {
    const double share = k > 0 ? std::min(1.0, taken / k) : 0;
    return PsSeconds(var, share, cluster, options, local_aggregation) +
           BlockSeconds(static_cast<int64_t>(h), var.dim, cluster, options, shares_call);
  };
  out.seconds_without = predicted(0, 0);
  out.seconds = out.seconds_without;
  if (by_presence.empty()) {
    out.reason = "hot rows: none (no rows sampled)";
    return out;
  }
  // Candidates: 1, 2, 4, ..., and every row down to each presence level the
  // samples show (all rows in every batch, ...); or the N requested.
  std::vector<size_t> candidates;
  if (requested > 0) {
    candidates.push_back(std::min<size_t>(static_cast<size_t>(requested), by_presence.size()));
  } else {
    for (size_t h = 1; h < by_presence.size(); h *= 2) candidates.push_back(h);
    for (size_t h = 1; h < by_presence.size(); ++h) {
      if (by_presence[h].first != by_presence[h - 1].first) candidates.push_back(h);
    }
    candidates.push_back(by_presence.size());
    std::sort(candidates.begin(), candidates.end());
    candidates.erase(std::unique(candidates.begin(), candidates.end()), candidates.end());
  }
  size_t best = 0, at = 0;
  double taken = 0, best_taken = 0, best_seconds = out.seconds_without;
  double best_candidate_seconds = -1;
  size_t best_candidate = 0;
  for (size_t h : candidates) {
    for (; at < h; ++at) taken += by_presence[at].first;
    const double s = predicted(h, taken);
    if (best_candidate_seconds < 0 || s < best_candidate_seconds) {
      best_candidate_seconds = s;
      best_candidate = h;
    }
    if (requested > 0 || s < best_seconds) {
      best = h;
      best_taken = taken;
      best_seconds = s;
    }
  }
  char buf[256];
  if (best == 0) {
    std::snprintf(buf, sizeof buf,
                  "hot rows: none pay (the best, %zu, predicts %s a step against %s without)",
                  best_candidate, Ms(best_candidate_seconds).c_str(), Ms(out.seconds_without).c_str());
    out.reason = buf;
    return out;
  }
  out.rows.reserve(best);
  for (size_t i = 0; i < best; ++i) out.rows.push_back(by_presence[i].second);
  std::sort(out.rows.begin(), out.rows.end());
  out.share = k > 0 ? std::min(1.0, best_taken / k) : 0;
  out.seconds = best_seconds;
  std::snprintf(buf, sizeof buf,
                "hot rows: %zu of %lld (%s; %.0f%% of a batch's distinct rows), all-reduced: "
                "predicted %s a step against %s with none",
                best, static_cast<long long>(var.rows),
                requested > 0 ? "[ps] hot_rows, the most frequent sampled"
                              : "the cost model's choice of the most frequent sampled",
                100.0 * out.share, Ms(out.seconds).c_str(), Ms(out.seconds_without).c_str());
  out.reason = buf;
  return out;
}

}  // namespace parallax::plan
