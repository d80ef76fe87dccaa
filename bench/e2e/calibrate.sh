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
build_dir="${BUILD_DIR:-build}"
[[ "$build_dir" = /* ]] || build_dir="$root/$build_dir"
for b in parallax parallax-coordinator parallax-agent parallax-trainer parallax-ps; do
  [[ -x "$build_dir/bin/$b" ]] || { echo "calibrate.sh: $build_dir/bin/$b not found; build (scripts/build) or set BUILD_DIR" >&2; exit 1; }
done
[[ -f "$root/data/brown/train.tok" ]] || { echo "calibrate.sh: data/brown/train.tok missing; run scripts/fetch-data" >&2; exit 1; }
echo "{\"bench\":\"calibrate\",\"event\":\"start\",\"date\":\"$(date -u +%FT%TZ)\",\"loadavg\":\"$(cut -d' ' -f1-3 /proc/loadavg)\",\"nproc\":$(nproc)}"
/usr/bin/python3 "$root/bench/e2e/calibrate.py" --bin "$build_dir/bin" "$@"
