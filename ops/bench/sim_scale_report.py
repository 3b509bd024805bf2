#!/usr/bin/env python3
"""The table and plots of ops/bench/sim-scale.sh (and the netns cluster's runs).

    sim_scale_report.py --results FILE.jsonl [--results MORE.jsonl] --out DIR [--title TEXT]

Each line of a results file is one run (engines N, output tok/s, TTFT, TPOT, CPU seconds by
process kind, nats-server msgs and bytes in and out, load). Per label (a series: one machine,
the netns cluster, a cost model) and N, the median over its repeats. Prints a markdown table
(output tok/s, its ratio to N x the per-engine figure of the run with the fewest engines: one
engine on one host, three on the netns hosts; mean TTFT, median TPOT, CPU ms per 1,000
output tokens by process kind, nats-server msgs/s, the machine's busy cores and load average)
and, when matplotlib imports, draws DIR/sim-scale-throughput.png (output tok/s against N, with
that ideal) and DIR/sim-scale-ttft.png (mean TTFT against N).
"""
import argparse
import json
import os
import statistics
from collections import defaultdict

KINDS = ["nats-server", "api_server", "input_processor", "output_processor", "scheduler", "kv_manager",
         "gpu_worker", "encoder_cache", "supervisor", "client"]
SHORT = {"nats-server": "nats", "api_server": "api", "input_processor": "input", "output_processor": "output",
         "scheduler": "sched", "kv_manager": "kv", "gpu_worker": "worker", "encoder_cache": "enc",
         "supervisor": "sup", "client": "client"}


def med(xs):
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else float("nan")


def load(paths):
    runs = []
    for p in paths:
        with open(p) as f:
            runs += [json.loads(line) for line in f if line.strip()]
    return runs


def summarize(runs):
    series = defaultdict(lambda: defaultdict(list))
    for r in runs:
        series[r.get("label") or "this machine"][r["engines"]].append(r)
    out = {}
    for label, by_n in series.items():
        rows = []
        for n in sorted(by_n):
            rs = by_n[n]
            tok = med([r["output_tokens"] for r in rs])
            cpu = {k: med([r["cpu_s"].get(k, 0.0) for r in rs]) for k in KINDS}
            rows.append(dict(engines=n, runs=len(rs), failed=sum(r["failed"] for r in rs),
                             tput=med([r["output_throughput"] for r in rs]),
                             ttft=med([r["mean_ttft_ms"] for r in rs]), tpot=med([r["median_tpot_ms"] for r in rs]),
                             cpu_per_k={k: 1000.0 * cpu[k] / tok * 1000.0 if tok else float("nan") for k in KINDS},
                             cpu_total_per_k=1000.0 * sum(cpu.values()) / tok * 1000.0 if tok else float("nan"),
                             cpu_cores={k: cpu[k] / med([r["duration_s"] for r in rs]) for k in KINDS},
                             nats_msgs=med([r["nats_in_msgs_s"] + r["nats_out_msgs_s"] for r in rs]),
                             nats_bytes=med([r["nats_in_bytes_s"] + r["nats_out_bytes_s"] for r in rs]),
                             busy=med([r["machine_busy_cores"] for r in rs]),
                             load=med([r["load_start"] for r in rs])))
        # the ideal: N x the per-engine rate of the run with the fewest engines (one engine on
        # one host; 3 on the three netns hosts, which start one engine a host)
        base = rows[0]["tput"] / rows[0]["engines"] if rows and rows[0]["engines"] > 0 else 0.0
        for r in rows:
            r["ideal"] = base * r["engines"] if base > 0 else float("nan")
            r["ratio"] = r["tput"] / r["ideal"] if base > 0 else float("nan")
        out[label] = rows
    return out


def print_table(label, rows):
    print(f"\n### {label}\n")
    kinds = [k for k in KINDS if any(r["cpu_per_k"][k] > 0.5 for r in rows)]
    head = " | ".join(f"{SHORT[k]}" for k in kinds)
    fewest = "one engine" if rows and rows[0]["engines"] == 1 else f"{rows[0]['engines'] if rows else 0} engines"
    print(f"| engines | output tok/s | x {fewest} | of ideal | mean TTFT ms | median TPOT ms | "
          f"CPU ms / 1k tokens: {head} | total | NATS msgs/s | busy cores | load |")
    print("|" + "---:|" * (10 + len(kinds)))
    for r in rows:
        cells = " | ".join(f"{r['cpu_per_k'][k]:.0f}" for k in kinds)
        print(f"| {r['engines']} | {r['tput']:.0f} | {r['tput'] / rows[0]['tput'] if rows[0]['tput'] else 0:.2f} | "
              f"{r['ratio']:.2f} | {r['ttft']:.0f} | {r['tpot']:.1f} | {cells} | {r['cpu_total_per_k']:.0f} | "
              f"{r['nats_msgs']:.0f} | {r['busy']:.2f} | {r['load']:.1f} |")


def print_routing(label, runs):
    """Requests per engine (sim-scale.sh --routing-detail): the most any engine got over the mean."""
    rows = defaultdict(list)
    for r in runs:
        if (r.get("label") or "this machine") == label and r.get("routing"):
            rows[r["engines"]].append(r["routing"])
    if not rows:
        return
    print(f"\nrequests per engine, {label} (each run: fewest-most; max / mean)\n")
    print("| engines | requests per engine | max / mean |")
    print("|---:|---|---:|")
    for n in sorted(rows):
        spans = ", ".join(f"{min(x['requests_per_engine'].values())}-{max(x['requests_per_engine'].values())}"
                          for x in rows[n])
        print(f"| {n} | {spans} | {med([x['max_over_mean'] for x in rows[n]]):.2f} |")


def print_idle(label, runs):
    rows = defaultdict(list)
    for r in runs:
        if (r.get("label") or "this machine") == label and r.get("idle"):
            rows[r["engines"]].append(r["idle"])
    if not rows:
        return
    print(f"\nidle (no request), {label}: NATS msgs/s in + out, and CPU cores by process kind\n")
    print("| engines | NATS msgs/s | msgs/s per engine | msgs/s / engines^2 | CPU cores: all | nats | sched | kv | worker |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for n in sorted(rows):
        m = med([i["nats_in_msgs_s"] + i["nats_out_msgs_s"] for i in rows[n]])
        cores = lambda k: med([i["cpu_cores"].get(k, 0.0) for i in rows[n]])
        total = med([sum(i["cpu_cores"].values()) for i in rows[n]])
        print(f"| {n} | {m:.0f} | {m / n:.1f} | {m / n / n:.2f} | {total:.3f} | {cores('nats-server'):.3f} | "
              f"{cores('scheduler'):.3f} | {cores('kv_manager'):.3f} | {cores('gpu_worker'):.3f} |")


def figure(plt, summary, title, ylabel, draw, path):
    """One plot of every series against the engine count (log 2), drawn by draw(ax, label, rows)."""
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for label, rows in summary.items():
        draw(ax, label, rows)
    ax.set_xscale("log", base=2)
    ax.set_xlabel("sim engines")
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def plot(summary, out, title):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("\n(matplotlib not importable: no plots; PY=<a python with matplotlib>)")
        return

    def throughput(ax, label, rows):
        ns = [r["engines"] for r in rows]
        line, = ax.plot(ns, [r["tput"] for r in rows], "o-", label=f"{label}: measured")
        ax.plot(ns, [r["ideal"] for r in rows], "--", color=line.get_color(), alpha=0.6,
                label=f"{label}: ideal (N x the fewest engines' rate an engine)")
        ax.plot(ns, [0.9 * r["ideal"] for r in rows], ":", color=line.get_color(), alpha=0.4,
                label=f"{label}: 0.9 x ideal")
        ax.set_yscale("log", base=2)

    def ttft(ax, label, rows):
        ax.plot([r["engines"] for r in rows], [r["ttft"] for r in rows], "o-", label=label)

    figure(plt, summary, title + " (simulated forward)", "output tokens/s", throughput,
           f"{out}/sim-scale-throughput.png")
    figure(plt, summary, title + ": time to first token (simulated forward)", "mean TTFT (ms)", ttft,
           f"{out}/sim-scale-ttft.png")
    print(f"\nplots: {out}/sim-scale-throughput.png, {out}/sim-scale-ttft.png")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--results", action="append", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--title", default="sim engines behind one subject")
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    runs = load(a.results)
    summary = summarize(runs)
    for label, rows in summary.items():
        print_table(label, rows)
        print_routing(label, runs)
        print_idle(label, runs)
    with open(f"{a.out}/sim-scale-summary.json", "w") as f:
        json.dump(summary, f, indent=1)
    plot(summary, a.out, a.title)


if __name__ == "__main__":
    main()
