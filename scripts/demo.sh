#!/usr/bin/env bash
# Builds shmccl and runs the demo: shmrun launching the seed examples (uneven all-gather and
# reduce-scatter with split sizes [2, 3] on 2 ranks, oneflow's concat/stack all-gather) and a
# tour of every collective on 4 ranks, and MindSpeed's fused grouped matmul + all-reduce on 2.
# Each example checks its own result.
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/install-deps.sh
# The options stay as they are: build/ is test.sh's too, and it must not find its tests turned off.
echo "== building shmrun and the examples (a few minutes the first time)"
cmake -S . -B build >/dev/null
# Only what was linked: the compiler commands say nothing to someone watching a demo.
build_log=build/demo-build.log
set +e
cmake --build build -j "$(nproc)" --target shmrun all_gather_uneven reduce_scatter_uneven \
  all_gather_concat_stack collectives_tour grouped_matmul_all_reduce 2>&1 | tee "$build_log" |
  { grep --line-buffered -E '^\[ *[0-9]+%\] Linking'; true; }
build_status=${PIPESTATUS[0]}
set -e
if [ "$build_status" -ne 0 ]; then
  tail -n 40 "$build_log" >&2
  echo "demo: the build failed (the whole log: $build_log)" >&2
  exit "$build_status"
fi

shmrun=build/src/launcher/shmrun
examples=build/examples
for example in all_gather_uneven reduce_scatter_uneven all_gather_concat_stack; do
  echo "== shmrun --nproc-per-node 2 $example"
  "$shmrun" --nproc-per-node 2 "$examples/$example"
done
echo "== shmrun --nproc-per-node 4 collectives_tour"
"$shmrun" --nproc-per-node 4 "$examples/collectives_tour"
echo "== shmrun --nproc-per-node 2 grouped_matmul_all_reduce"
"$shmrun" --nproc-per-node 2 "$examples/grouped_matmul_all_reduce"
echo "demo: every example gave the expected result"
