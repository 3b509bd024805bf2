#!/usr/bin/env python3
"""The table and plot of ops/bench/pd-sim.sh: aggregated, disaggregated and conditional serving.

    pd_sim_report.py --results FILE.jsonl [--results MORE.jsonl] [--out DIR]

Each line of a results file is one run: {"config", "rate", "prompts", "repeat", "handed_off",
"bench": llmbus-bench serve --json's object}. Per (rate, config), the median over the repeats.
Prints a markdown table (output tok/s, TTFT and TPOT median / p99, ITL p99, requests handed from a
prefill to a decode engine, failed) and, with --out and when matplotlib imports, draws
DIR/pd-sim-latency.png: TTFT and TPOT p50 and p99 per config, one group per request rate (drawn
as ops/bench/sim_scale_report.py draws the scale plots).
"""
import argparse
import json
import os
import sys
from collections import defaultdict

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from sim_scale_report import med  # noqa: E402  (the same medians as the scale report)

ORDER = ["agg", "pd", "pd-rc", "cond", "cond-q"]
KEYS = ["output_throughput", "median_ttft_ms", "p99_ttft_ms", "median_tpot_ms", "p99_tpot_ms", "p99_itl_ms", "failed"]


def summarize(runs):
    groups = defaultdict(list)
    for r in runs:
        groups[(r["rate"], r["config"])].append(r)
    rows = []
    for (rate, config), rs in groups.items():
        row = {k: med([r["bench"].get(k) for r in rs]) for k in KEYS}
        row.update(rate=rate, config=config, runs=len(rs), prompts=rs[0]["prompts"],
                   handed_off=med([r.get("handed_off") for r in rs]))
        rows.append(row)
    rank = {c: i for i, c in enumerate(ORDER)}
    rows.sort(key=lambda r: (r["rate"], rank.get(r["config"], len(ORDER)), r["config"]))
    return rows


def print_table(rows):
    print("| load | config | runs | output tok/s | TTFT median / p99 ms | TPOT median / p99 ms | ITL p99 ms | "
          "handed off | failed |")
    print("|---|---|---:|---:|---|---|---:|---:|---:|")
    for r in rows:
        print(f"| {r['prompts']} prompts at {r['rate']:g}/s | {r['config']} | {r['runs']} | "
              f"{r['output_throughput']:.1f} | {r['median_ttft_ms']:.0f} / {r['p99_ttft_ms']:.0f} | "
              f"{r['median_tpot_ms']:.1f} / {r['p99_tpot_ms']:.1f} | {r['p99_itl_ms']:.0f} | "
              f"{r['handed_off']:.0f} | {r['failed']:.0f} |")


def plot(rows, out):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("\n(matplotlib not importable: no plot; PY=<a python with matplotlib>)")
        return
    rates = sorted({r["rate"] for r in rows})
    configs = [c for c in ORDER if any(r["config"] == c for r in rows)]
    configs += sorted({r["config"] for r in rows} - set(configs))
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.5))
    width = 0.8 / max(1, len(configs))
    for ax, metric, label in ((axes[0], "ttft", "TTFT (ms)"), (axes[1], "tpot", "TPOT (ms)")):
        for i, c in enumerate(configs):
            by_rate = {r["rate"]: r for r in rows if r["config"] == c}
            xs = [k + (i - (len(configs) - 1) / 2) * width for k in range(len(rates))]
            p99 = [by_rate[x][f"p99_{metric}_ms"] if x in by_rate else float("nan") for x in rates]
            p50 = [by_rate[x][f"median_{metric}_ms"] if x in by_rate else float("nan") for x in rates]
            bars = ax.bar(xs, p99, width, alpha=0.45, label=f"{c}: p99")
            ax.bar(xs, p50, width * 0.6, color=bars.patches[0].get_facecolor(), alpha=1.0, label=f"{c}: median")
        ax.set_xticks(range(len(rates)))
        ax.set_xticklabels([f"{x:g} req/s" for x in rates])
        ax.set_yscale("log")
        ax.set_ylabel(label)
        ax.grid(True, which="both", axis="y", alpha=0.3)
    axes[0].set_title("time to first token (simulated H100 forward)")
    axes[1].set_title("time per output token")
    axes[1].legend(fontsize=7, ncol=2)
    fig.tight_layout()
    path = f"{out}/pd-sim-latency.png"
    fig.savefig(path, dpi=110)
    print(f"\nplot: {path}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--results", action="append", required=True)
    ap.add_argument("--out")
    a = ap.parse_args()
    runs = []
    for p in a.results:
        with open(p) as f:
            runs += [json.loads(line) for line in f if line.strip()]
    rows = summarize(runs)
    print_table(rows)
    if a.out:
        os.makedirs(a.out, exist_ok=True)
        plot(rows, a.out)


if __name__ == "__main__":
    main()
