#!/usr/bin/env python3
"""Pictures of llmbus-bench results: throughput against concurrency, and the distributions of
time to first token and inter-token latency.

    ops/bench/plot.py RESULT.json [RESULT.json ...] [-o DIR] [--title TEXT]

Each RESULT.json is what `llmbus-bench serve --result-file` (or --save-result) wrote: vLLM's
result fields (label, max_concurrency, output_throughput, ...) and the per-request samples
ttfts / itls (seconds). Results are grouped into series by their label's first part ("llmbus"
of "llmbus/conc16/1"; the base_url when there is no label); repeats of the same series and
concurrency are summarized by their median. Runs of one output token (a prefill measurement)
have no inter-token latency and are left out of both pictures.

Writes DIR/throughput.png (output tokens/s against max concurrency, one line per series) and
DIR/latency.png (empirical CDFs of TTFT and ITL per series, from the runs at the highest
concurrency of each series), and prints what it drew. The 1-minute load average the results
recorded goes under each title. Needs matplotlib (ops/requirements-test.txt).
"""
import argparse
import json
import os
import statistics
import sys
import textwrap
from collections import defaultdict


def load(paths):
    """[(series, concurrency, result dict)] of the result files that hold a serving run."""
    runs = []
    for path in paths:
        with open(path) as f:
            r = json.load(f)
        if "output_throughput" not in r:
            raise SystemExit(f"plot: {path} is not an llmbus-bench serve result")
        if r.get("completed", 0) and r.get("total_output_tokens", 0) / r["completed"] < 2:
            continue  # prefill runs: one token each, no decode to speak of
        series = (r.get("label") or r.get("base_url") or os.path.basename(path)).split("/")[0]
        runs.append((series, int(r.get("max_concurrency") or 1), r))
    if not runs:
        raise SystemExit("plot: no serving run with more than one output token per request")
    return runs


def throughput_points(runs):
    """{series: [(concurrency, median output tok/s, number of repeats)]}, sorted by concurrency."""
    by = defaultdict(list)
    for series, conc, r in runs:
        by[(series, conc)].append(r["output_throughput"])
    points = defaultdict(list)
    for (series, conc), vals in sorted(by.items()):
        points[series].append((conc, statistics.median(vals), len(vals)))
    return points


def latency_samples(runs):
    """{series: (concurrency, ttfts in ms, itls in ms)} at each series' highest concurrency."""
    top = {}
    for series, conc, _ in runs:
        top[series] = max(conc, top.get(series, 0))
    out = {}
    for series, conc, r in runs:
        if conc != top[series]:
            continue
        _, ttfts, itls = out.get(series, (conc, [], []))
        ttfts += [t * 1e3 for t in r.get("ttfts", [])]
        itls += [g * 1e3 for req in r.get("itls", []) for g in req]
        out[series] = (conc, ttfts, itls)
    return out


def ecdf(values):
    xs = sorted(values)
    n = len(xs)
    return xs, [(i + 1) / n for i in range(n)]


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("results", nargs="+")
    ap.add_argument("-o", "--out", default=".", help="output folder (default: .)")
    ap.add_argument("--title", default="", help="a line under each picture's title (conditions)")
    a = ap.parse_args(argv)
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    runs = load(a.results)
    os.makedirs(a.out, exist_ok=True)
    loads = [r[k] for _, _, r in runs for k in ("loadavg_1m_start", "loadavg_1m_end") if k in r]
    if loads:  # the machine's load during the runs belongs under every picture of them
        a.title = (a.title + ", " if a.title else "") + f"load average {min(loads):.1f}-{max(loads):.1f}"
    a.title = "\n".join(textwrap.wrap(a.title, 80))
    points = throughput_points(runs)
    fig, ax = plt.subplots(figsize=(6.4, 4.0), dpi=100)
    for series, pts in sorted(points.items()):
        ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=series)
        for conc, tps, n in pts:
            print(f"throughput {series} concurrency {conc}: {tps:.1f} output tok/s (median of {n})")
    ax.set_xscale("log", base=2)
    ax.set_xlabel("concurrent requests (max concurrency)")
    ax.set_ylabel("output tokens / s")
    ax.set_ylim(bottom=0)
    ax.grid(True, alpha=0.3)
    ax.legend()
    ax.set_title("Throughput against concurrency" + (f"\n{a.title}" if a.title else ""), fontsize=10)
    fig.tight_layout()
    fig.savefig(os.path.join(a.out, "throughput.png"))
    plt.close(fig)

    samples = latency_samples(runs)
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(9.6, 3.8), dpi=100)
    for series, (conc, ttfts, itls) in sorted(samples.items()):
        if ttfts:
            ax1.plot(*ecdf(ttfts), label=f"{series} ({conc} concurrent)")
            print(f"ttft {series} at {conc}: median {statistics.median(ttfts):.1f} ms over {len(ttfts)} requests")
        if itls:
            ax2.plot(*ecdf(itls), label=f"{series} ({conc} concurrent)")
            print(f"itl {series} at {conc}: median {statistics.median(itls):.2f} ms over {len(itls)} gaps")
    for ax, what in ((ax1, "time to first token (ms)"), (ax2, "inter-token latency (ms)")):
        ax.set_xlabel(what)
        ax.set_ylabel("fraction of samples ≤ x")
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=8)
    fig.suptitle("Latency distributions" + (f"\n{a.title}" if a.title else ""), fontsize=10)
    fig.tight_layout()
    fig.savefig(os.path.join(a.out, "latency.png"))
    plt.close(fig)
    print(f"wrote {os.path.join(a.out, 'throughput.png')} and {os.path.join(a.out, 'latency.png')}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
