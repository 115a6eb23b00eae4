#!/usr/bin/env bash
# Instructions per small synchronous call, counted with callgrind: each op's --loop of
# shmccl_call_overhead_bench (one rank, 8-byte NPU tensors) at two call counts, the difference
# divided by the difference of the counts (start-up and shut-down cancel out). Unlike times,
# these counts do not move with the VM's modes, so an A/B of two builds needs one run each.
#   bench/call_instructions.sh [BUILD_DIR]     (default build; needs valgrind)
set -euo pipefail
build=${1:-build}
binary=$build/bench/shmccl_call_overhead_bench
[[ -x $binary ]] || { echo "no $binary (configure with -DSHMCCL_BUILD_BENCHMARKS=ON)" >&2; exit 1; }
command -v valgrind > /dev/null || { echo "valgrind is not installed" >&2; exit 1; }
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
instructions() {  # op calls
  # A small arena: valgrind's own bookkeeping grows with the mapping.
  SHMCCL_NPU_MEMORY=256M valgrind --tool=callgrind --callgrind-out-file="$out/cg" \
    "$binary" "--loop=$1:$2" 2>&1 | sed -n 's/.*refs: *//p' | tr -d ,
}
few=1000
many=3000
for op in broadcast all_reduce all_gather reduce_scatter barrier; do
  a=$(instructions "$op" $few)
  b=$(instructions "$op" $many)
  printf '%-15s %5d instructions per call\n' "$op" $(((b - a) / (many - few)))
done
