#!/usr/bin/env bash
# All-reduce with 2 ranks on one host, Parallax (shared memory; Gloo over TCP) side by side with
# Open MPI 4.1 (shared memory; TCP), alternating rounds (bench/allreduce_compare.py says what
# it prints). Arguments go to allreduce_compare.py:
#
#   bench/allreduce_compare.sh [--rounds 5] [--runs 5] [--sizes-mib 1,16,100] [--latency-kib 64]
#
# Needs scripts/build (BUILD_DIR, default build/) and scripts/install-deps --bench (Open MPI,
# which is what makes the build include allreduce_bench_mpi).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
case "${1:-}" in -h|--help) sed -n '2,9p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;; esac
source "$root/bench/lib.sh"
px_build_dir
px_require_bins allreduce_compare.sh allreduce_bench allreduce_bench_mpi
command -v mpirun >/dev/null || {
  echo "allreduce_compare.sh: mpirun not found; run scripts/install-deps --bench" >&2; exit 1; }
px_event allreduce_compare start
/usr/bin/python3 "$root/bench/allreduce_compare.py" --bin "$build_dir/bin" "$@"
px_event allreduce_compare end
