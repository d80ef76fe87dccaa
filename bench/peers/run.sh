#!/usr/bin/env bash
# W3 in PyTorch DDP, dense and sparse embeddings, alternating, N runs each
# (docs/PERFORMANCE.md, "W3 reference: PyTorch DDP"). Prints the runs' and the
# median/min/max JSON lines of bench/peers/w3_torch.py, with the load average
# before and after (the machine is shared: record it with the figures). The
# peer draws exactly Parallax's initial values and negatives (w3_torch.py
# --help; `-- --torch-draws` for torch's RNG instead).
#
#   bench/peers/run.sh [--runs N] [--seed S] [-- w3_torch.py options]
#
# Needs scripts/install-deps --test, scripts/fetch-data, and parallax-data in
# ${BUILD_DIR:-build}/bin (it writes the batches file, data/brown/w3-batches-S.bin,
# when missing).
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
runs=5
seed=1
extra=()
while [[ $# -gt 0 ]]; do
  case "$1" in
    --runs) runs="$2"; shift 2 ;;
    --seed) seed="$2"; shift 2 ;;
    --) shift; extra=("$@"); break ;;
    *) sed -n '2,15p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2 ;;
  esac
done
source "$root/bench/lib.sh"
px_build_dir
brown="$root/data/brown"
batches="$brown/w3-batches-$seed.bin"
[[ -f "$brown/train.tok" ]] || { echo "run.sh: $brown/train.tok missing; run scripts/fetch-data" >&2; exit 1; }
if [[ ! -f "$batches" ]]; then
  px_require_bins run.sh parallax-data
  "$build_dir/bin/parallax-data" batches "$brown/train.tok" --context 4 --batch 256 \
    --workers 2 --steps 310 --seed "$seed" --out "$batches"
fi
[[ -x /usr/bin/python3 ]] && /usr/bin/python3 -c 'import torch' 2>/dev/null || {
  echo "run.sh: /usr/bin/python3 cannot import torch; run scripts/install-deps --test" >&2
  exit 1
}
px_event e2e start
/usr/bin/python3 "$root/bench/peers/w3_torch.py" --batches "$batches" --vocab "$brown/vocab.tsv" \
  --alternate --runs "$runs" --seed "$seed" "${extra[@]}"
px_event e2e end
