#!/usr/bin/env python3
"""Median of shmccl's per-run ratio to each peer over several runs of bench/run_comparison.sh.

Small collectives take a fraction of a microsecond, and this VM switches between a fast and a
slow mode (docs/performance.md): one comparison run, whose libraries run one after the other,
can catch shmccl in one mode and a peer in the other. Repeating the run and taking, per cell,
the median over runs of the ratio measured within each run (plus its spread) is robust to that.

  for i in 1 2 3 4 5 6 7 8 9; do
    bench/run_comparison.sh --ranks 2 --max-bytes 4K --no-plots --out /tmp/small.$i
  done
  bench/median_ratios.py /tmp/small.*
"""
import glob
import os
import statistics
import sys
from collections import defaultdict

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from compare import human, load, ratio  # noqa: E402


def main():
    directories = sys.argv[1:]
    if not directories:
        print(__doc__, file=sys.stderr)
        return 2
    ratios = defaultdict(list)  # (peer, key) -> ratios over runs
    times = defaultdict(list)   # (library, key) -> time_us over runs
    for directory in directories:
        results, _ = load(sorted(glob.glob(os.path.join(directory, "*.json"))))
        ours = results.get("shmccl", {})
        for key, result in ours.items():
            times[("shmccl", key)].append(result.time_us)
        for peer, rows in results.items():
            if peer == "shmccl":
                continue
            for key, result in rows.items():
                # The peers run host buffers: match shmccl's row by everything but placement.
                mine = next((r for k, r in ours.items()
                             if k[0:2] == key[0:2] and k[3:] == key[3:]), None)
                value = ratio(mine, result)
                if value is not None:
                    ratios[(peer, key)].append(value)
                    times[(peer, key)].append(result.time_us)
    peers = sorted({peer for peer, _ in ratios})
    print(f"{len(directories)} runs; per cell: median over runs of shmccl busbw / peer busbw "
          f"(> 1: shmccl faster) [min..max], and each library's median time in us\n")
    for peer in peers:
        print(f"### against {peer}\n")
        print("| op | dtype | form | ranks | size | shmccl us | peer us | ratio (median) | min..max | runs |")
        print("|---|---|---|---|---|---|---|---|---|---|")
        for (p, key) in sorted(k for k in ratios if k[0] == peer):
            op, dtype, _placement, mode, place, ranks, size = key
            values = ratios[(p, key)]
            mine = [t for (lib, k), ts in times.items() if lib == "shmccl"
                    and k[0:2] == key[0:2] and k[3:] == key[3:] for t in ts]
            print(f"| {op} | {dtype} | {place} | {ranks} | {human(size)} | "
                  f"{statistics.median(mine):.2f} | {statistics.median(times[(peer, key)]):.2f} | "
                  f"**{statistics.median(values):.2f}x** | {min(values):.2f}..{max(values):.2f} | "
                  f"{len(values)} |")
        print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
