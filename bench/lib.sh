# Shared by the bench/ shell drivers: `source "$root/bench/lib.sh"` once
# `root` (the repository) is set.

# Sets build_dir (BUILD_DIR, default build/, relative to the repository).
px_build_dir() {
  build_dir="${BUILD_DIR:-build}"
  [[ "$build_dir" = /* ]] || build_dir="$root/$build_dir"
}

# px_require_bins WHO BINARY...: exits 1, saying what to do, when one of the
# binaries is not in $build_dir/bin.
px_require_bins() {
  local who="$1" b
  shift
  for b in "$@"; do
    [[ -x "$build_dir/bin/$b" ]] || {
      echo "$who: $build_dir/bin/$b not found; build (scripts/build) or set BUILD_DIR" >&2
      exit 1
    }
  done
}

# px_event BENCH EVENT: the JSON line that opens or closes a run (date, load
# average; nproc on start).
px_event() {
  local extra=""
  [[ "$2" == start ]] && extra=",\"nproc\":$(nproc)"
  echo "{\"bench\":\"$1\",\"event\":\"$2\",\"date\":\"$(date -u +%FT%TZ)\",\"loadavg\":\"$(cut -d' ' -f1-3 /proc/loadavg)\"$extra}"
}
