#!/usr/bin/env bash
# W3 end to end (docs/PERFORMANCE.md, "W3 end to end: Parallax vs PyTorch DDP"): Parallax with
# arch = hybrid, allreduce, allgather, ps (and hybrid with the embeddings on the PS) side by side
# with PyTorch DDP dense and sparse, alternating, N runs each, on 2 workers. One JSON line per
# run and per median/min/max (bench/e2e/e2e.py), with the load average before and after.
#
#   bench/e2e/run.sh [--runs N] [--steps S] [--warmup W] [--variants a,b,...] [--workdir DIR]
#                    [--plan FILE]   (a [plan] table from bench/e2e/calibrate.sh for every job)
#                    [--seed-per-run] (round r: seed r + 1 on both sides, data order too)
#
# Needs scripts/build (BUILD_DIR, default build/), scripts/fetch-data, and
# scripts/install-deps --test (python3-torch). Writes data/brown/w3-batches-1.bin when missing.
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
case "${1:-}" in -h|--help) sed -n '2,12p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;; esac
source "$root/bench/lib.sh"
px_build_dir
px_require_bins run.sh parallax parallax-coordinator parallax-agent parallax-trainer parallax-ps parallax-data
brown="$root/data/brown"
[[ -f "$brown/train.tok" ]] || { echo "run.sh: $brown/train.tok missing; run scripts/fetch-data" >&2; exit 1; }
/usr/bin/python3 -c 'import torch' 2>/dev/null || {
  echo "run.sh: /usr/bin/python3 cannot import torch; run scripts/install-deps --test" >&2; exit 1; }
batches="$brown/w3-batches-1.bin"
[[ -f "$batches" ]] || "$build_dir/bin/parallax-data" batches "$brown/train.tok" --context 4 \
  --batch 256 --workers 2 --steps 310 --seed 1 --out "$batches" >/dev/null
px_event e2e start
/usr/bin/python3 "$root/bench/e2e/e2e.py" --bin "$build_dir/bin" --batches "$batches" "$@"
px_event e2e end
