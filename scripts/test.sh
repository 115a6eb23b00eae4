#!/usr/bin/env bash
# Builds shmccl and runs the whole test suite with ctest.
#   scripts/test.sh                 # release build in build/
#   scripts/test.sh address         # ASan+UBSan build in build-asan/
#   scripts/test.sh thread          # TSan build in build-tsan/
set -euo pipefail
cd "$(dirname "$0")/.."

sanitize="${1:-}"
case "$sanitize" in
  "") build_dir=build ;;
  address) build_dir=build-asan ;;
  thread) build_dir=build-tsan ;;
  *) echo "usage: $0 [address|thread]" >&2; exit 2 ;;
esac

scripts/install-deps.sh
jobs=$(nproc)
# The sanitizer builds are for the tests; benchmarks are measured in the plain build.
benchmarks=ON
if [ -n "$sanitize" ]; then benchmarks=OFF; fi
cmake -S . -B "$build_dir" -DSHMCCL_SANITIZE="$sanitize" -DSHMCCL_BUILD_TESTS=ON \
  -DSHMCCL_BUILD_BENCHMARKS="$benchmarks" >/dev/null
cmake --build "$build_dir" -j "$jobs"

export ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1}"
export UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}"
export TSAN_OPTIONS="${TSAN_OPTIONS:-halt_on_error=1:second_deadlock_stack=1:suppressions=$PWD/scripts/tsan.supp}"
# The library promises to leave nothing in /dev/shm: what is there after the suite and was not
# before is a failure (another shmccl job running beside the suite would count too).
shm_before=$(ls /dev/shm | grep -E '^shmccl' | sort || true)
# --no-tests=error: a build without its tests must fail here, not pass with nothing run.
ctest --test-dir "$build_dir" --output-on-failure --no-tests=error -j "$jobs"
shm_added=$(comm -13 <(echo "$shm_before") <(ls /dev/shm | grep -E '^shmccl' | sort || true))
if [ -n "$shm_added" ]; then
  echo "the tests left these in /dev/shm:" >&2
  echo "$shm_added" >&2
  exit 1
fi
