#!/usr/bin/env bash
# Runs shmccl's collective benchmarks and the MPI peer benchmarks back to back, for each rank
# count, and prints one report (bench/compare.py): per op, ranks and size, each library's median
# latency and busbw and shmccl's ratio to each peer, then writes busbw-against-size plots.
# See docs/performance.md ("How to run the comparison").
#
#   bench/run_comparison.sh [options] [BUILD_DIR [RANKS...]]
#     --quick           sizes up to 1 MiB and 0.01 s per benchmark: a few minutes in all
#     --build DIR       the build directory (default: build)
#     --ranks "2 4 8"   the rank counts (default: 2 4 8)
#     --out DIR         raw JSON, logs and report.md (default: /tmp/shmccl-compare-<time>)
#     --plots DIR       the PNGs (default: docs/plots for a full run, OUT/plots for --quick)
#     --no-plots        no PNGs
#     --filter REGEX    which shmccl benchmarks to run (default: all of them)
#     --peer-filter REGEX   which MPI benchmarks to run (theirs are named BM_<Op>/host/sync/...)
#     --no-peers        shmccl only
#     --no-bind         do not bind ranks to cores (by default every library's ranks are bound
#                       to one core each when they fit, and left unbound when they outnumber cores)
#     --bind-all        bind every library's ranks to one core each even when they outnumber
#                       the cores (round robin: Open MPI's core:overload-allowed, MPICH's and
#                       shmrun's core binding)
#     --max-bytes N, --budget S, --cutoff S, --max-repetitions R   the method's settings
#     --calls-per-sample K   time K back-to-back calls per sample (nccl-tests' way; default 1)
#     --interleave      one run of each library per size, the libraries taking turns at each
#                       size: a machine whose speed drifts over minutes (a VM whose vCPUs move)
#                       then meets every library in about the same state at each size
#     --timeout S       limit per binary run (default: 900 s; a run cut short keeps its rows)
#     --busy N          N CPU-bound processes (busy loops) run beside every library's ranks, as
#                       on a host whose data loaders or other jobs keep the cores busy
# Needs the benchmarks built (cmake -DSHMCCL_BUILD_BENCHMARKS=ON); the peers run when
# build/bench/shmccl_peer_{openmpi,mpich}_bench exist. Plots need matplotlib for python3
# (Debian: apt-get install -y python3-matplotlib); without it they are skipped with a message.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(dirname "$here")

original=("$@")
build=build ranks=() positional=() out="" plots="" no_plots=0 quick=0 filter="" peer_filter=""
peers=1 bind=fit interleave=0 max_bytes=256M busy=0
timeout_s=900
method=()
while [ $# -gt 0 ]; do
  case "$1" in
    --quick) quick=1 ;;
    --build) build=$2; shift ;;
    --ranks) read -r -a ranks <<< "$2"; shift ;;
    --out) out=$2; shift ;;
    --plots) plots=$2; shift ;;
    --no-plots) no_plots=1 ;;
    --filter) filter=$2; shift ;;
    --peer-filter) peer_filter=$2; shift ;;
    --no-peers) peers=0 ;;
    --no-bind) bind=none ;;
    --bind-all) bind=all ;;
    --max-bytes) method+=("--bench_max_bytes=$2"); max_bytes=$2; shift ;;
    --budget) method+=("--bench_budget=$2"); shift ;;
    --cutoff) method+=("--bench_cutoff=$2"); shift ;;
    --max-repetitions) method+=("--bench_max_repetitions=$2"); shift ;;
    --calls-per-sample) method+=("--bench_calls_per_sample=$2"); shift ;;
    --interleave) interleave=1 ;;
    --timeout) timeout_s=$2; shift ;;
    --busy) busy=$2; shift
            [[ "$busy" =~ ^[0-9]+$ ]] || { echo "--busy takes a count of processes" >&2; exit 2; } ;;
    -h|--help) sed -n '2,32p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    -*) echo "unknown option $1 (see --help)" >&2; exit 2 ;;
    *) positional+=("$1") ;;
  esac
  shift
done
if [ ${#positional[@]} -gt 0 ]; then  # the old form: BUILD_DIR [RANKS...]
  build=${positional[0]}
  ranks+=("${positional[@]:1}")
fi
[ ${#ranks[@]} -gt 0 ] || ranks=(2 4 8)
if [ $quick -eq 1 ]; then
  # Defaults first: explicit --max-bytes/--budget/... given above come later and win.
  method=(--bench_max_bytes=1M --bench_budget=0.01 --bench_max_repetitions=500
          --bench_cutoff=0.5 "${method[@]}")
  case " ${original[*]} " in *" --max-bytes "*) ;; *) max_bytes=1M ;; esac
fi
out=${out:-/tmp/shmccl-compare-$(date +%Y%m%d-%H%M%S)}
if [ -z "$plots" ]; then
  if [ $quick -eq 1 ]; then plots=$out/plots; else plots=$repo/docs/plots; fi
fi
mkdir -p "$out"

bench=$build/bench
shmrun=$build/src/launcher/shmrun
[ -x "$bench/shmccl_collectives_bench" ] || {
  echo "$bench/shmccl_collectives_bench not found: build with -DSHMCCL_BUILD_BENCHMARKS=ON" >&2
  exit 1
}

# Open MPI refuses to run as root unless told; more ranks than cores need --oversubscribe.
if [ "$(id -u)" -eq 0 ]; then
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
fi
# The peers' best shared-memory settings on this machine (docs/performance.md, "Peers"):
# Open MPI: ob1 + vader (shared memory) with CMA single copy (no xpmem/knem here); it yields
# by itself when oversubscribed. MPICH: Debian's ch4:ucx build with its defaults; no setting we
# tried changed it beyond noise.
openmpi_run=(mpirun.openmpi --oversubscribe --mca pml ob1 --mca btl self,vader
             --mca btl_vader_single_copy_mechanism cma)
mpich_run=(mpiexec.mpich)
# Binding, the same for every library: one core per rank when the ranks fit (what mpirun does
# by default; unbound ranks that spin can be put on one core by the scheduler when the machine
# is busy), none when they outnumber the cores.
cores=$(nproc)
# matplotlib may live in Debian's python3 while `python3` on PATH is another one.
python=python3
for candidate in python3 /usr/bin/python3; do
  if command -v "$candidate" >/dev/null && "$candidate" -c 'import matplotlib' 2>/dev/null; then
    python=$candidate
    break
  fi
done

{
  echo "date: $(date -Iseconds)"
  echo "host: $(uname -n), kernel $(uname -r), $(nproc) CPUs, $(lscpu 2>/dev/null |
        sed -n 's/^Model name: *//p' | head -1)"
  echo "load average at start: $(cut -d' ' -f1-3 /proc/loadavg)"
  echo "git: $(git -C "$repo" rev-parse --short HEAD 2>/dev/null || echo '?')"
  echo "command: $0 ${original[*]:-} (method: ${method[*]:-defaults}; bind: $bind; busy: $busy)"
} > "$out/machine.txt"
cat "$out/machine.txt"

# The competing processes of --busy: started once for the whole run, stopped on any exit.
busy_pids=()
stop_busy() { [ ${#busy_pids[@]} -eq 0 ] || kill "${busy_pids[@]}" 2>/dev/null || true; }
trap stop_busy EXIT
for ((i = 0; i < busy; i++)); do
  (trap - EXIT; while :; do :; done) &
  busy_pids+=($!)
done

results=() failures=() one_size=()
started=$(date +%s)
# run NAME COMMAND...: one benchmark binary, its console output in OUT/NAME.log.
run() {
  local name=$1
  shift
  local begin=$(date +%s) status=0
  printf '%-22s ' "$name" >&2
  timeout --kill-after=30 "$timeout_s" "$@" --benchmark_out="$out/$name.json" \
    --benchmark_out_format=json --benchmark_color=false "${method[@]}" "${one_size[@]}" \
    > "$out/$name.log" 2>&1 || status=$?
  printf '%5ds  exit %d\n' $(( $(date +%s) - begin )) "$status" >&2
  if [ -s "$out/$name.json" ]; then results+=("$out/$name.json"); fi
  if [ "$status" -ne 0 ]; then failures+=("$name (exit $status, see $out/$name.log)"); fi
}

# bytes 64K -> 65536 (K, M, G: powers of 1024, as the benchmarks read them)
bytes() {
  local number=${1%[kKmMgG]} scale=1
  case "$1" in
    *[kK]) scale=1024 ;;
    *[mM]) scale=$((1024 * 1024)) ;;
    *[gG]) scale=$((1024 * 1024 * 1024)) ;;
  esac
  echo $((number * scale))
}
# The benchmarks' sizes (bench_method.h): 8 * 4^k up to the largest, and the largest itself.
sizes=(all)
if [ $interleave -eq 1 ]; then
  largest=$(bytes "$max_bytes") sizes=()
  for ((size = 8; size <= largest; size *= 4)); do sizes+=("$size"); done
  if [ ${#sizes[@]} -eq 0 ] || [ "${sizes[-1]}" -ne "$largest" ]; then sizes+=("$largest"); fi
fi

for n in "${ranks[@]}"; do
  rm -f "$out/cut-shmccl-$n" "$out/cut-openmpi-$n" "$out/cut-mpich-$n"
  if [ $bind = fit ] && [ "$n" -le "$cores" ]; then
    shmccl_bind=(--numa-binding core) openmpi_bind=(--bind-to core) mpich_bind=(-bind-to core)
  elif [ $bind = all ]; then
    shmccl_bind=(--numa-binding core) openmpi_bind=(--bind-to core:overload-allowed)
    mpich_bind=(-bind-to core)
  else
    shmccl_bind=(--numa-binding none) openmpi_bind=(--bind-to none) mpich_bind=(-bind-to none)
  fi
  for size in "${sizes[@]}"; do
    # One size per run when interleaved (run() puts these flags last, so they win); the cutoff
    # files carry a variant's cut to the larger sizes.
    suffix="" one_size=()
    if [ "$size" != all ]; then
      suffix=-$size
      one_size=(--bench_min_bytes="$size" --bench_max_bytes="$size")
    fi
    args=(--bench_cutoff_file="$out/cut-shmccl-$n")
    [ -z "$filter" ] || args+=("--benchmark_filter=$filter")
    if [ -x "$shmrun" ]; then
      run "shmccl-$n$suffix" "$shmrun" --nproc-per-node "$n" --standalone --no-prefix \
        --local-ranks-filter 0 "${shmccl_bind[@]}" -- "$bench/shmccl_collectives_bench" "${args[@]}"
    else
      [ "${shmccl_bind[1]}" = none ] || export SHMCCL_BENCH_PIN=1
      SHMCCL_BENCH_RANKS=$n run "shmccl-$n$suffix" "$bench/shmccl_collectives_bench" "${args[@]}"
      unset SHMCCL_BENCH_PIN
    fi
    [ $peers -eq 1 ] || continue
    peer_args=()
    [ -z "$peer_filter" ] || peer_args+=("--benchmark_filter=$peer_filter")
    if [ -x "$bench/shmccl_peer_openmpi_bench" ] && command -v mpirun.openmpi >/dev/null; then
      run "openmpi-$n$suffix" "${openmpi_run[@]}" "${openmpi_bind[@]}" -np "$n" \
        "$bench/shmccl_peer_openmpi_bench" "${peer_args[@]}" --bench_cutoff_file="$out/cut-openmpi-$n"
    fi
    if [ -x "$bench/shmccl_peer_mpich_bench" ] && command -v mpiexec.mpich >/dev/null; then
      run "mpich-$n$suffix" "${mpich_run[@]}" "${mpich_bind[@]}" -n "$n" \
        "$bench/shmccl_peer_mpich_bench" "${peer_args[@]}" --bench_cutoff_file="$out/cut-mpich-$n"
    fi
  done
done
echo "benchmarks took $(( ($(date +%s) - started) / 60 )) min" >&2

plot_args=()
[ $no_plots -eq 1 ] || plot_args=(--plots "$plots")
set +e
{
  echo "# shmccl against its peers"
  echo
  sed 's/^/    /' "$out/machine.txt"
  echo
  "$python" "$here/compare.py" "${plot_args[@]}" "${results[@]}"
} | tee "$out/report.md"
status=${PIPESTATUS[0]}
set -e
for failure in "${failures[@]}"; do echo "run failed: $failure" >&2; done
echo >&2
echo "report: $out/report.md; raw results and logs: $out" >&2
[ ${#failures[@]} -eq 0 ] && [ "$status" -eq 0 ]
