#!/usr/bin/env bash
# Scaling of communication (docs/PERFORMANCE.md, "Scaling of communication"): compute-light W3
# at 2, 4 and 8 workers for Parallax hybrid / all-reduce / all-gather / PS and PyTorch DDP
# sparse; bytes per worker per step (the trainers' counters and ss) next to the planner's
# prediction, and communication time per step. One JSON line per result; with --plot DIR,
# the two PNGs are drawn from them (bench/scaling/plot.py, gnuplot).
#
#   bench/scaling/run.sh [--plot docs] [-- scaling.py options, e.g. --workers 2,4 --steps 30]
#
# Needs scripts/build (BUILD_DIR, default build/), scripts/fetch-data, and for PyTorch and the
# plots scripts/install-deps --bench. DATA_DIR overrides data/.
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
plot=""
extra=()
while [[ $# -gt 0 ]]; do
  case "$1" in
    --plot) plot="$2"; shift 2 ;;
    --) shift; extra=("$@"); break ;;
    *) sed -n '2,12p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2 ;;
  esac
done
build_dir="${BUILD_DIR:-build}"
[[ "$build_dir" = /* ]] || build_dir="$root/$build_dir"
data="${DATA_DIR:-$root/data}"
for b in parallax parallax-coordinator parallax-agent parallax-trainer parallax-ps parallax-data; do
  [[ -x "$build_dir/bin/$b" ]] || { echo "run.sh: $build_dir/bin/$b not found; build (scripts/build) or set BUILD_DIR" >&2; exit 1; }
done
[[ -f "$data/brown/train.tok" ]] || { echo "run.sh: $data/brown/train.tok missing; run scripts/fetch-data or set DATA_DIR" >&2; exit 1; }
out="$(mktemp -d /tmp/px-scaling-XXXXXX)/results.jsonl"
echo "{\"bench\":\"scaling\",\"event\":\"start\",\"date\":\"$(date -u +%FT%TZ)\",\"loadavg\":\"$(cut -d' ' -f1-3 /proc/loadavg)\",\"nproc\":$(nproc)}"
/usr/bin/python3 "$root/bench/scaling/scaling.py" --bin "$build_dir/bin" --data "$data" "${extra[@]}" | tee "$out"
echo "{\"bench\":\"scaling\",\"event\":\"end\",\"date\":\"$(date -u +%FT%TZ)\",\"loadavg\":\"$(cut -d' ' -f1-3 /proc/loadavg)\"}"
if [[ -n "$plot" ]]; then
  /usr/bin/python3 "$root/bench/scaling/plot.py" "$out" --out "$plot"
  echo "run.sh: plots in $plot/scaling-bytes.png and $plot/scaling-comm-time.png (results: $out)" >&2
fi
