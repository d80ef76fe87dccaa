#!/usr/bin/env bash
# Predicted vs measured bytes per worker per step, by path (docs/PERFORMANCE.md, "Predicted vs
# measured bytes"): for lm (examples/w3.toml) and ctr (examples/ctr.toml) on 2 and 4 workers,
# `parallax plan --json --workers N` against the job's metric points, and `ss -tinp` counters of
# rank 0 as a cross-check. One JSON line per (model, workers, path) (bench/e2e/bytes_check.py).
#
#   bench/e2e/bytes_check.sh [--models lm,ctr] [--workers 2,4] [--arch hybrid] [--steps 60] [--plan FILE]
#
# Needs scripts/build (BUILD_DIR, default build/) and scripts/fetch-data (--synthetic-ctr too).
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
case "${1:-}" in -h|--help) sed -n '2,9p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;; esac
source "$root/bench/lib.sh"
px_build_dir
px_require_bins bytes_check.sh parallax parallax-coordinator parallax-agent parallax-trainer parallax-ps
for f in brown/train.tok ctr/train.tsv; do
  [[ -f "$root/data/$f" ]] || { echo "bytes_check.sh: data/$f missing; run scripts/fetch-data (and --synthetic-ctr)" >&2; exit 1; }
done
px_event bytes_check start
/usr/bin/python3 "$root/bench/e2e/bytes_check.py" --bin "$build_dir/bin" "$@"
px_event bytes_check end
