#!/usr/bin/env bash
# Runs shmccl's collective benchmarks and the MPI peer benchmark back to back, for each rank
# count, and prints one markdown table per op and rank count (see docs/performance.md).
#   bench/run_comparison.sh [BUILD_DIR] [RANKS...]      e.g. bench/run_comparison.sh build 2 4 8
set -euo pipefail
build=${1:-build}
shift || true
ranks=("$@")
[ ${#ranks[@]} -gt 0 ] || ranks=(2 4 8)
out=$(mktemp -d /tmp/shmccl-compare.XXXXXX)
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
# Open MPI's best shared-memory path here: ob1 + vader with CMA single copy.
export OMPI_MCA_pml=ob1 OMPI_MCA_btl=self,vader
filter=${SHMCCL_BENCH_FILTER:-/npu/}
shmccl_files=() peer_files=()
for n in "${ranks[@]}"; do
  SHMCCL_BENCH_RANKS=$n "$build/bench/shmccl_collectives_bench" --benchmark_filter="$filter" \
    --benchmark_out="$out/shmccl-$n.json" --benchmark_out_format=json >/dev/null
  shmccl_files+=("$out/shmccl-$n.json")
  if [ -x "$build/bench/shmccl_peer_mpi_bench" ]; then
    mpirun --oversubscribe -np "$n" "$build/bench/shmccl_peer_mpi_bench" > "$out/openmpi-$n.csv"
    peer_files+=("$out/openmpi-$n.csv")
  fi
done
python3 "$(dirname "$0")/compare.py" --shmccl "${shmccl_files[@]}" --peer "${peer_files[@]}"
echo
echo "raw results: $out"
