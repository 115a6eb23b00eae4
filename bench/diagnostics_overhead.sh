#!/bin/sh
# Cost of the always-on diagnostics (flight recorder, mismatch check) on 8 B collectives at 2
# ranks: runs shmccl_recorder_overhead_bench RUNS times (each run alternates blocks with the
# diagnostic active and suspended in the same processes) and prints, per benchmark, the median
# over runs of the overhead and of the time without it, with the spread of the overheads. The
# "/phased" rows (random idle time before each call, see the benchmark) also print the median
# cost in ns; their overhead is that cost over the plain call's time.
#   bench/diagnostics_overhead.sh BUILD_DIR [RUNS]
set -eu
build=${1:?usage: diagnostics_overhead.sh BUILD_DIR [RUNS]}
runs=${2:-9}
bench="$build/bench/shmccl_recorder_overhead_bench"
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
i=0
while [ "$i" -lt "$runs" ]; do
  SHMCCL_BENCH_RANKS=2 "$bench" --benchmark_format=json >"$out/$i.json" 2>/dev/null
  i=$((i + 1))
done
python3 - "$out" <<'PY'
import glob, json, statistics, sys
rows = {}
for path in sorted(glob.glob(sys.argv[1] + "/*.json")):
    for b in json.load(open(path))["benchmarks"]:
        name = b["name"].split("/npu/")[0].replace("BM_", "")
        if "/phased" in b["name"]:
            name += "/phased"
        rows.setdefault(name, []).append(
            (b["overhead_pct"], b.get("call_us", b["off_us"]), b.get("cost_ns")))
print(f"{'benchmark':52} {'overhead median':>16} {'min..max':>16} {'call median us':>15} "
      f"{'cost ns':>8}  runs")
for name, values in rows.items():
    overheads = [v[0] for v in values]
    calls = [v[1] for v in values]
    costs = [v[2] for v in values if v[2] is not None]
    cost = f"{statistics.median(costs):+8.2f}" if costs else f"{'':8}"
    print(f"{name:52} {statistics.median(overheads):+15.2f}% "
          f"{min(overheads):+7.2f}..{max(overheads):+6.2f}% {statistics.median(calls):15.3f} "
          f"{cost}  {len(values)}")
PY
