#!/usr/bin/env python3
"""Turns shmccl_collectives_bench JSON and shmccl_peer_mpi_bench CSV into one markdown table.

usage: compare.py --shmccl a.json [b.json ...] --peer openmpi.csv [mpich.csv ...]
Per op, rank count and size: shmccl's time and busbw (NPU tensors), each peer's, the ratio of
the peer's time to shmccl's (> 1: shmccl is faster), and shmccl's busbw / memcpy rate.
"""
import argparse
import csv
import json
import re
from collections import defaultdict

OPS = {"AllGatherUneven": "all_gather_uneven", "ReduceScatterUneven": "reduce_scatter_uneven",
       "AllReduce": "all_reduce", "Broadcast": "broadcast"}


def human(size):
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if size >= scale:
            return f"{size // scale} {unit}"
    return f"{size} B"


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--shmccl", nargs="+", required=True)
    parser.add_argument("--peer", nargs="*", default=[])
    parser.add_argument("--placement", default="npu")
    args = parser.parse_args()

    ours = {}  # (op, ranks, bytes) -> (time_us, busbw, memcpy)
    for path in args.shmccl:
        with open(path) as handle:
            data = json.load(handle)
        for run in data["benchmarks"]:
            match = re.match(r"BM_(\w+)/(\w+)/ranks:(\d+)/bytes:(\d+)", run["name"])
            if not match or match.group(2) != args.placement:
                continue
            op, ranks, size = OPS[match.group(1)], int(match.group(3)), int(match.group(4))
            time_us = run["real_time"] if run["time_unit"] == "us" else run["real_time"] / 1e3
            ours[(op, ranks, size)] = (time_us, run["busbw_GBps"], run.get("memcpy_GBps", 0))

    peers = defaultdict(dict)  # library -> key -> (time_us, busbw)
    for path in args.peer:
        with open(path) as handle:
            for row in csv.DictReader(handle):
                key = (row["op"], int(row["ranks"]), int(row["bytes"]))
                peers[row["library"]][key] = (float(row["time_us"]), float(row["busbw_GBps"]))

    libraries = sorted(peers)
    for op in OPS.values():
        for ranks in sorted({k[1] for k in ours if k[0] == op}):
            print(f"\n#### {op}, {ranks} ranks ({args.placement} tensors)\n")
            header = "| size | shmccl us | shmccl busbw GB/s | busbw / memcpy |"
            rule = "|---|---|---|---|"
            for library in libraries:
                header += f" {library} us | {library} busbw | speedup vs {library} |"
                rule += "---|---|---|"
            print(header)
            print(rule)
            for size in sorted(k[2] for k in ours if k[0] == op and k[1] == ranks):
                time_us, busbw, memcpy = ours[(op, ranks, size)]
                limit = f"{busbw / memcpy:.0%}" if memcpy else "-"
                line = f"| {human(size)} | {time_us:.2f} | {busbw:.2f} | {limit} |"
                for library in libraries:
                    peer = peers[library].get((op, ranks, size))
                    if peer:
                        line += f" {peer[0]:.2f} | {peer[1]:.2f} | **{peer[0] / time_us:.2f}x** |"
                    else:
                        line += " - | - | - |"
                print(line)


if __name__ == "__main__":
    main()
