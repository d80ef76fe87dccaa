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
source "$root/bench/lib.sh"
px_build_dir
data="${DATA_DIR:-$root/data}"
px_require_bins run.sh parallax parallax-coordinator parallax-agent parallax-trainer parallax-ps parallax-data
[[ -f "$data/brown/train.tok" ]] || { echo "run.sh: $data/brown/train.tok missing; run scripts/fetch-data or set DATA_DIR" >&2; exit 1; }
out="$(mktemp -d /tmp/px-scaling-XXXXXX)/results.jsonl"
px_event scaling start
/usr/bin/python3 "$root/bench/scaling/scaling.py" --bin "$build_dir/bin" --data "$data" "${extra[@]}" | tee "$out"
px_event scaling end
if [[ -n "$plot" ]]; then
  /usr/bin/python3 "$root/bench/scaling/plot.py" "$out" --out "$plot"
  echo "run.sh: plots in $plot/scaling-bytes.png and $plot/scaling-comm-time.png (results: $out)" >&2
fi
