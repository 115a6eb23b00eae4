#!/usr/bin/env python3
"""Turns the Google Benchmark JSON of shmccl_collectives_bench and of the MPI peer benchmarks
(shmccl_peer_<mpi>_bench) into one markdown report and, optionally, PNG plots.

usage: compare.py [--placement npu] [--mode sync] [--plots DIR] RESULT.json [RESULT.json ...]

Every file names its library and rank count in its context (bench_method.h). Per op variant
(op, dtype, out/in place), rank count and size, the report shows shmccl's median time, busbw and
limit (busbw / memcpy), each peer's time and busbw, and shmccl's ratio to each peer
(shmccl busbw / peer busbw = peer time / shmccl time; > 1: shmccl is faster). shmccl's rows are
its --placement/--mode variant; the peers run host buffers with blocking calls. The plots (one
PNG per op variant, one panel per rank count) draw busbw against size, one line per library,
plus shmccl's other placement and the memcpy rate; they need python3-matplotlib.
Exits 1 when any benchmark reported a wrong result.
"""
import argparse
import json
import math
import re
import sys
from collections import defaultdict

OPS = {"AllGatherUneven": "all_gather_uneven", "ReduceScatterUneven": "reduce_scatter_uneven",
       "AllReduce": "all_reduce", "Broadcast": "broadcast"}
OP_ORDER = list(OPS.values())
NAME = re.compile(r"^BM_(?P<op>\w+?)(?:/(?P<dtype>float32|bfloat16))?/(?P<placement>npu|host)/"
                  r"(?P<mode>sync|async)/(?P<place>out|in)/(?P<bytes>\d+)(?:/.*)?$")
PLACE = {"out": "out of place", "in": "in place"}
COLORS = {"openmpi": "tab:red", "mpich": "tab:green", "gloo": "tab:purple"}


def human(size):
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if size >= scale and size % scale == 0:
            return f"{size // scale} {unit}"
    return f"{size} B"


def fmt_time(us):
    return f"{us:,.0f}" if us >= 1000 else f"{us:.1f}" if us >= 10 else f"{us:.2f}"


def fmt_bw(gbps):
    return f"{gbps:.3f}" if gbps < 0.1 else f"{gbps:.2f}"


class Result:
    def __init__(self, run):
        counters = run
        self.error = run.get("error_message") if run.get("error_occurred") else None
        self.time_us = counters.get("time_us", 0.0)
        self.busbw = counters.get("busbw", 0.0)
        self.limit = counters.get("limit", 0.0)
        self.memcpy = counters.get("memcpy", 0.0)
        self.bytes = counters.get("bytes", 0.0)


def read_json(path):
    """A Google Benchmark JSON file; one cut short (a run killed by its time limit) is closed
    after its last complete benchmark."""
    with open(path) as handle:
        text = handle.read()
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        end = text.rfind("\n    }")
        if end < 0:
            return {"context": {}, "benchmarks": []}
        print(f"{path}: cut short; using the benchmarks before the cut", file=sys.stderr)
        return json.loads(text[:end + 6] + "\n  ]\n}")


def load(paths):
    """-> (results[library][(op, dtype, placement, mode, place, ranks, size)], contexts)."""
    results = defaultdict(dict)
    contexts = defaultdict(dict)
    for path in paths:
        data = read_json(path)
        context = data.get("context", {})
        library = context.get("library", "shmccl")
        ranks = int(context.get("ranks", 0))
        contexts[library][ranks] = context
        runs = data.get("benchmarks", [])
        medians = {run["run_name"] for run in runs if run.get("aggregate_name") == "median"}
        for run in runs:
            name = run.get("run_name", run["name"])
            if run.get("run_type") == "aggregate" and run.get("aggregate_name") != "median":
                continue
            if run.get("run_type") != "aggregate" and name in medians:
                continue  # repetitions: the median aggregate stands for them
            match = NAME.match(name)
            if not match:
                continue
            key = (OPS.get(match["op"], match["op"]), match["dtype"] or "float32",
                   match["placement"], match["mode"], match["place"],
                   int(run.get("ranks", ranks) or ranks), int(match["bytes"]))
            results[library][key] = Result(run)
    return results, contexts


def cell(result, digits_time=True):
    if result is None:
        return "-"
    if result.error:
        if "wrong" in result.error:
            return "WRONG"
        return "skipped" if result.error.startswith("skipped") else "n/a"
    return fmt_time(result.time_us) if digits_time else fmt_bw(result.busbw)


def ratio(ours, peer):
    if ours is None or peer is None or ours.error or peer.error or not peer.busbw:
        return None
    return ours.busbw / peer.busbw


def report(results, contexts, placement, mode, out):
    peers = sorted(library for library in results if library != "shmccl")
    ours = results.get("shmccl", {})
    variants = sorted({(k[0], k[1], k[4]) for k in ours if k[2] == placement and k[3] == mode},
                      key=lambda v: (OP_ORDER.index(v[0]) if v[0] in OP_ORDER else 99, v[1],
                                     v[2] == "in"))
    print("## Run\n", file=out)
    for library in ["shmccl"] + peers:
        for ranks, context in sorted(contexts.get(library, {}).items()):
            print(f"- {library} {context.get('library_version', '')}, {ranks} ranks, "
                  f"{context.get('date', '')}, host {context.get('host_name', '')} "
                  f"({context.get('num_cpus', '?')} CPUs)"
                  + (f"; settings: `{context['settings']}`" if "settings" in context else ""),
                  file=out)
    first = next((c for lib in contexts.values() for c in lib.values()), {})
    print(f"- method: {first.get('method', '?')}", file=out)
    print(f"- shmccl rows: {placement} tensors, {mode} calls; peers: host buffers, blocking "
          f"calls. ratio = shmccl busbw / peer busbw (> 1: shmccl faster). limit = busbw / "
          f"memcpy rate at the size.", file=out)

    summary = []
    for op, dtype, place in variants:
        title = f"{op}" + (f" {dtype}" if op == "reduce_scatter_uneven" else "")
        print(f"\n### {title}, {PLACE[place]}\n", file=out)
        header = "| ranks | size | shmccl us | shmccl busbw | limit |"
        rule = "|---|---|---|---|---|"
        for peer in peers:
            header += f" {peer} us | {peer} busbw | vs {peer} |"
            rule += "---|---|---|"
        print(header, file=out)
        print(rule, file=out)
        rank_counts = sorted({k[5] for k in ours if k[:5] == (op, dtype, placement, mode, place)})
        for ranks in rank_counts:
            sizes = sorted(k[6] for k in ours if k[:6] == (op, dtype, placement, mode, place, ranks))
            ratios = defaultdict(list)
            for size in sizes:
                mine = ours.get((op, dtype, placement, mode, place, ranks, size))
                limit = f"{mine.limit:.0%}" if mine and not mine.error and mine.limit else "-"
                line = (f"| {ranks} | {human(size)} | {cell(mine)} | {cell(mine, False)} "
                        f"| {limit} |")
                for peer in peers:
                    theirs = results[peer].get((op, dtype, "host", "sync", place, ranks, size))
                    value = ratio(mine, theirs)
                    if value is not None:
                        ratios[peer].append((value, size))
                    shown = f"**{value:.2f}x**" if value is not None else "-"
                    line += f" {cell(theirs)} | {cell(theirs, False)} | {shown} |"
                print(line, file=out)
            for peer in peers:
                if ratios[peer]:
                    values = [v for v, _ in ratios[peer]]
                    geomean = math.exp(sum(math.log(v) for v in values) / len(values))
                    low = min(ratios[peer])
                    summary.append((title, PLACE[place], ranks, peer, geomean, low[0], low[1],
                                    max(values), len(values)))
    notes = sorted({(library, r.error) for library, rows in results.items()
                    for r in rows.values() if r.error})
    if notes:
        print("\n### Notes\n", file=out)
        for library, error in notes:
            print(f"- {library}: {error}", file=out)
    if summary:
        print("\n### Summary: shmccl busbw / peer busbw over the sizes both ran\n", file=out)
        print("| op | form | ranks | peer | geomean | min (at size) | max | sizes |", file=out)
        print("|---|---|---|---|---|---|---|---|", file=out)
        for title, place, ranks, peer, geomean, low, at, high, count in summary:
            print(f"| {title} | {place} | {ranks} | {peer} | {geomean:.2f}x | {low:.2f}x "
                  f"({human(at)}) | {high:.2f}x | {count} |", file=out)


def plot(results, mode, directory):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print(f"plots skipped: {sys.executable} has no matplotlib (Debian: apt-get install -y "
              "python3-matplotlib, then use /usr/bin/python3)", file=sys.stderr)
        return []
    import os
    os.makedirs(directory, exist_ok=True)
    ours = results.get("shmccl", {})
    peers = sorted(library for library in results if library != "shmccl")
    variants = sorted({(k[0], k[1], k[4]) for k in ours})
    written = []
    for op, dtype, place in variants:
        rank_counts = sorted({k[5] for k in ours if (k[0], k[1], k[4]) == (op, dtype, place)})
        figure, axes = plt.subplots(1, len(rank_counts), figsize=(5.5 * len(rank_counts), 4.2),
                                    squeeze=False)
        for axis, ranks in zip(axes[0], rank_counts):
            lines = [("shmccl npu", ours, "npu", mode, "-", "o", "tab:blue"),
                     ("shmccl host", ours, "host", mode, "--", "s", "tab:cyan")]
            lines += [(peer, results[peer], "host", "sync", "-", "^v<>"[i % 4],
                       COLORS.get(peer, f"C{i + 3}")) for i, peer in enumerate(peers)]
            memcpy = {}
            for label, source, placement, line_mode, style, marker, color in lines:
                points = sorted((k[6], r.busbw) for k, r in source.items()
                                if k[:6] == (op, dtype, placement, line_mode, place, ranks)
                                and not r.error and r.busbw > 0)
                for k, r in source.items():
                    if k[5] == ranks and r.memcpy > 0:
                        memcpy[k[6]] = r.memcpy
                if points:
                    axis.plot([p[0] for p in points], [p[1] for p in points], style,
                              marker=marker, markersize=3, label=label, color=color)
            if memcpy:
                axis.plot(sorted(memcpy), [memcpy[s] for s in sorted(memcpy)], ":", color="grey",
                          label="memcpy (1 thread)")
            axis.set_xscale("log", base=2)
            ticks = [s for s in sorted({k[6] for k in ours if k[5] == ranks})
                     if s in (8, 128, 2048) or (s >= 1 << 15 and (s.bit_length() - 16) % 4 == 0)]
            axis.set_xticks(ticks, [human(t).replace(" ", "") for t in ticks])
            axis.set_yscale("log")
            axis.set_title(f"{ranks} ranks")
            axis.set_xlabel("size (bytes)")
            axis.set_ylabel("busbw (GB/s)")
            axis.grid(True, which="major", alpha=0.3)
            axis.legend(fontsize=7)
        title = f"{op}" + (f" {dtype}" if op == "reduce_scatter_uneven" else "") + \
            f", {PLACE[place]}"
        figure.suptitle(title)
        figure.tight_layout()
        name = f"{op}" + (f"_{dtype}" if op == "reduce_scatter_uneven" else "") + f"_{place}.png"
        path = os.path.join(directory, name)
        figure.savefig(path, dpi=90)
        plt.close(figure)
        written.append(path)
    return written


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("results", nargs="+", help="Google Benchmark JSON files")
    parser.add_argument("--placement", default="npu", choices=["npu", "host"],
                        help="shmccl's tensors in the table (default npu)")
    parser.add_argument("--mode", default="sync", choices=["sync", "async"])
    parser.add_argument("--plots", metavar="DIR", help="write PNG plots there")
    args = parser.parse_args()

    results, contexts = load(args.results)
    if "shmccl" not in results:
        sys.exit("no shmccl results among the files")
    report(results, contexts, args.placement, args.mode, sys.stdout)
    wrong = [(library, key) for library, rows in results.items() for key, r in rows.items()
             if r.error and "wrong" in r.error]
    if args.plots:
        for path in plot(results, args.mode, args.plots):
            print(f"plot: {path}", file=sys.stderr)
    if wrong:
        print(f"\n**{len(wrong)} benchmarks reported WRONG results:**", file=sys.stdout)
        for library, key in wrong:
            print(f"- {library} {key}")
        sys.exit(1)


if __name__ == "__main__":
    main()
