#!/bin/sh
# Cost of the flight recorder on small collectives: runs shmccl_collectives_bench at 8 B on 2
# ranks with the recorder on (SHMCCL_TRACE_BUFFER_SIZE=2000, the default) and off (0), alternating
# ROUNDS times so that the machine's drift hits both alike, and prints the median time per op.
#   bench/trace_overhead.sh BUILD_DIR [ROUNDS] [REPETITIONS]
set -eu
build=${1:?usage: trace_overhead.sh BUILD_DIR [ROUNDS] [REPETITIONS]}
rounds=${2:-10}
repetitions=${3:-10}
bench="$build/bench/shmccl_collectives_bench"
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
filter='BM_(AllGatherUneven|AllReduce|ReduceScatterUneven/float32)/npu/sync/out/8/'
i=0
while [ "$i" -lt "$rounds" ]; do
  for size in 2000 0; do
    SHMCCL_BENCH_RANKS=2 SHMCCL_TRACE_BUFFER_SIZE=$size "$bench" --benchmark_filter="$filter" \
      --benchmark_repetitions="$repetitions" --benchmark_report_aggregates_only=false \
      --benchmark_format=json >"$out/$size.$i.json" 2>/dev/null
  done
  i=$((i + 1))
done
python3 - "$out" <<'PY'
import glob, json, statistics, sys
times = {}
for path in glob.glob(sys.argv[1] + "/*.json"):
    size = path.rsplit("/", 1)[1].split(".")[0]
    for b in json.load(open(path))["benchmarks"]:
        if b.get("run_type") != "iteration":
            continue
        op = b["name"].split("/")[0]
        times.setdefault((op, size), []).append(b["real_time"])
print("| op (8 B, 2 ranks, npu) | recorder off: median us | recorder on: median us | overhead | samples |")
print("|---|---|---|---|---|")
for op in sorted({k[0] for k in times}):
    off, on = times[(op, "0")], times[(op, "2000")]
    m_off, m_on = statistics.median(off), statistics.median(on)
    print(f"| {op} | {m_off:.3f} | {m_on:.3f} | {100 * (m_on / m_off - 1):+.1f}% | {len(off)} + {len(on)} |")
PY
