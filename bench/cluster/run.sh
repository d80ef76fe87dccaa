#!/usr/bin/env bash
# W3 on the emulated cluster (docs/PERFORMANCE.md, "Emulated cluster"): Parallax variants side
# by side with PyTorch DDP, N workers on H network-namespace hosts with tbf-shaped links, bytes
# counted at each host's veth (bench/cluster/matrix.py). One JSON line per run and statistic,
# the load average at start and end; with --plot DIR the two PNGs (bench/cluster/plot.py).
#
#   bench/cluster/run.sh [--plot DIR] [--out FILE] [-- matrix.py options]
#
# Default (short, a few minutes): 8 workers on 8 hosts at 1 Gbit/s, Parallax hybrid vs DDP
# sparse, one round. The whole matrix (N = 2, 4, 8 and 2 hosts x 4; hybrid, PS, all-gather,
# all-reduce, DDP's model through parallax.torch, DDP sparse; 1 and 10 Gbit/s; 3 rounds):
# `-- --full`. Run it under `flock /work/bench.lock` on a shared machine. Needs root,
# scripts/build (BUILD_DIR; its python/ holds parallax.torch), scripts/fetch-data (DATA_DIR
# overrides data/), scripts/install-deps --bench (PyTorch, gnuplot).
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
plot=""
out=""
extra=()
while [[ $# -gt 0 ]]; do
  case "$1" in
    --plot) plot="$2"; shift 2 ;;
    --out) out="$2"; shift 2 ;;
    --) shift; extra=("$@"); break ;;
    *) sed -n '2,14p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2 ;;
  esac
done
source "$root/bench/lib.sh"
px_build_dir
px_require_bins run.sh parallax parallax-coordinator parallax-agent parallax-trainer parallax-ps \
  parallax-data px-net-hosts
data="${DATA_DIR:-$root/data}"
[[ -f "$data/brown/train.tok" ]] || {
  echo "run.sh: $data/brown/train.tok missing; run scripts/fetch-data or set DATA_DIR" >&2; exit 1; }
[[ $(id -u) -eq 0 ]] || { echo "run.sh: network namespaces need root" >&2; exit 1; }
/usr/bin/python3 -c 'import torch' 2>/dev/null || {
  echo "run.sh: /usr/bin/python3 cannot import torch; run scripts/install-deps --bench" >&2; exit 1; }
[[ -n "$out" ]] || out="$(mktemp -d /tmp/px-cluster-XXXXXX)/results.jsonl"
px_event cluster start | tee "$out"
/usr/bin/python3 "$root/bench/cluster/matrix.py" --bin "$build_dir/bin" --data "$data" \
  "${extra[@]}" | tee -a "$out"
px_event cluster end | tee -a "$out"
if [[ -n "$plot" ]]; then
  /usr/bin/python3 "$root/bench/cluster/plot.py" "$out" --out "$plot"
fi
echo "run.sh: results in $out" >&2
