#!/usr/bin/env python3
# Copyright 2026 The shmccl Authors. Licensed under the Apache License, Version 2.0.
"""A/B comparison of two builds of shmccl_collectives_bench on a noisy machine.

Runs each named benchmark with binary A, then binary B, alternately, `--rounds` times (one size
per run, ranks forked by the binary itself: SHMCCL_BENCH_RANKS), and prints the median and the
minimum of each binary's time_us and the ratio A / B (> 1: B is faster). Alternating run by run
keeps a load that changes by the second from favouring either binary. The load average is
printed at the start and the end.

  bench/ab_compare.py --a /tmp/bench_main --b build/bench/shmccl_collectives_bench --ranks 2 \\
      --rounds 5 BM_AllGatherUneven/host/sync/out/67108864 BM_AllReduce/host/sync/in/65536
"""
import argparse
import os
import re
import statistics
import subprocess


def run(binary, ranks, name):
    size = name.rsplit('/', 1)[1]
    env = dict(os.environ, SHMCCL_BENCH_RANKS=str(ranks))
    out = subprocess.run([binary, f'--benchmark_filter={re.escape(name)}/',
                          f'--bench_min_bytes={size}', f'--bench_max_bytes={size}'],
                         env=env, capture_output=True, text=True, timeout=600).stdout
    for line in out.splitlines():
        match = re.search(r'time_us=([0-9.]+)(k?)', line) if line.startswith('BM_') else None
        if match:
            return float(match.group(1)) * (1000 if match.group(2) else 1)
    return float('nan')


def load():
    with open('/proc/loadavg') as f:
        return ' '.join(f.read().split()[:3])


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument('--a', required=True, help='benchmark binary A (before)')
    parser.add_argument('--b', required=True, help='benchmark binary B (after)')
    parser.add_argument('--ranks', type=int, default=2)
    parser.add_argument('--rounds', type=int, default=3)
    parser.add_argument('names', nargs='+', help='full benchmark names ending in /<bytes>')
    args = parser.parse_args()
    print(f'ranks {args.ranks}, {args.rounds} rounds, load at start {load()}')
    for name in args.names:
        a, b = [], []
        for _ in range(args.rounds):
            a.append(run(args.a, args.ranks, name))
            b.append(run(args.b, args.ranks, name))
        ma, mb = statistics.median(a), statistics.median(b)
        print(f'{name:55s} A {ma:10.1f} us  B {mb:10.1f} us  A/B {ma / mb:5.2f}   '
              f'min: A/B {min(a) / min(b):5.2f}', flush=True)
    print(f'load at end {load()}')


if __name__ == '__main__':
    main()
