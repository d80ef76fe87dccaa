#!/bin/sh
# examples/custom_trainer end to end: install libparallax from this build
# tree, build the example against it with find_package(Parallax), run it with
# `parallax run` (embedded coordinator, local agent, a PS shard, 2 ranks).
#
#   custom_trainer_example_test.sh CMAKE SOURCE_DIR BUILD_DIR
set -eu
cmake=$1 src=$2 build=$3
work=$(mktemp -d "${TMPDIR:-/tmp}/parallax-example-XXXXXX")
trap 'rm -rf "$work"' EXIT
"$cmake" --install "$build" --prefix "$work/prefix" >"$work/install.log"
cp -r "$src/examples/custom_trainer" "$work/example"
rm -rf "$work/example/build"
"$cmake" -S "$work/example" -B "$work/example/build" -DCMAKE_PREFIX_PATH="$work/prefix" \
  -DCMAKE_CXX_FLAGS="-Wall -Wextra -Werror" >"$work/configure.log" 2>&1 \
  || { cat "$work/configure.log"; exit 1; }
"$cmake" --build "$work/example/build" >"$work/build.log" 2>&1 || { cat "$work/build.log"; exit 1; }
cd "$work/example"
if ! "$build/bin/parallax" run job.toml --state-dir "$work/state" >"$work/run.log" 2>&1; then
  cat "$work/run.log"
  for f in "$work"/state/agent/tasks/*/task.log; do echo "== $f"; tail -20 "$f"; done
  exit 1
fi
cat "$work/run.log"
grep -q "SUCCEEDED" "$work/run.log"
# The table is pinned to the PS; the weights go where the planner's figures
# make them cheapest (all-reduce or the PS).
grep -Eq '"embedding"=ps "weights"=(allreduce|ps)' "$work"/state/agent/tasks/*-trainer-0/task.log
