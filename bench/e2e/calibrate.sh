#!/usr/bin/env bash
# The planner's machine figures (docs/PERFORMANCE.md, "Choosing by predicted time"): link
# bandwidth (iperf3 on loopback) and the per-operation costs of a collective call and of a PS
# round trip, measured in short real W3 runs (bench/e2e/calibrate.py). Prints a [plan] table
# to put in a job file (schemas/job.md).
#
#   bench/e2e/calibrate.sh [--rounds 3] [--steps 60] [--warmup 10] [--workers 2]
#
# Needs scripts/build (BUILD_DIR, default build/) and scripts/fetch-data.
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
case "${1:-}" in -h|--help) sed -n '2,9p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;; esac
source "$root/bench/lib.sh"
px_build_dir
px_require_bins calibrate.sh parallax parallax-coordinator parallax-agent parallax-trainer parallax-ps
[[ -f "$root/data/brown/train.tok" ]] || { echo "calibrate.sh: data/brown/train.tok missing; run scripts/fetch-data" >&2; exit 1; }
px_event calibrate start
/usr/bin/python3 "$root/bench/e2e/calibrate.py" --bin "$build_dir/bin" "$@"
