#!/usr/bin/env python3
"""The table of ops/bench/sim-validate.sh: the sim worker against the real one per workload.

Reads WORK/<device>-<scenario>-<rep>.json (llmbus-bench serve --json), prints a markdown table
of output tokens/s, mean TTFT and median TPOT (medians over the repeats) for the real (cpu) and
the sim device, sim / real and whether it is within 10%, the median over the repeats of each
repeat's sim / real (the pairs of --fit-served), and the real engine's own spread over the
repeats (max / min: the machine's noise), then each run's figures with its load average; writes
WORK/sim-validate.json. Exit 0 (the table is the result, not a verdict).
"""
import argparse
import json
import os
import statistics

SCENARIOS = [
    ("decode", "batch-1 decode (16 + 128 tokens)"),
    ("prefill", "512-token prefill (1 output token)"),
    ("conc16", "16 concurrent (100 + 128 tokens)"),
    ("conc32", "32 concurrent (100 + 128 tokens)"),
    ("shared", "4 shared 384-token prefixes, 8 concurrent"),
]
METRICS = [("output_throughput", "output tok/s"), ("mean_ttft_ms", "mean TTFT (ms)"),
           ("median_tpot_ms", "median TPOT (ms)")]
TOLERANCE = 0.10


def load(work, dev, scen, rep):
    try:
        with open(os.path.join(work, f"{dev}-{scen}-{rep}.json")) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--work", required=True)
    ap.add_argument("--repeats", type=int, required=True)
    ap.add_argument("--threads", default="2")
    ap.add_argument("--commit", default="unknown")
    ap.add_argument("--sim-cost", default="built-in")
    ap.add_argument("--serve-args", default="")
    ap.add_argument("--autogroup-nice", default="unchanged", help="the runs' session autogroup nice")
    a = ap.parse_args()
    rows, within, total, runs = [], 0, 0, []
    for scen, title in SCENARIOS:
        for key, label in METRICS:
            if scen == "prefill" and key != "mean_ttft_ms":
                continue  # one output token: no TPOT, and its tok/s says nothing
            vals, per = {}, {}
            for dev in ("cpu", "sim"):
                per[dev] = {k: r[key] for k in range(1, a.repeats + 1)
                            for r in [load(a.work, dev, scen, k)] if r and r.get("completed") and r.get(key) is not None}
                xs = list(per[dev].values())
                vals[dev] = statistics.median(xs) if xs else float("nan")
            ratio = vals["sim"] / vals["cpu"] if vals["cpu"] else float("nan")
            # each repeat's sim against the real run of the same repeat (with --fit-served, the run
            # its model came from), and the real engine's own spread over the repeats
            pairs = [per["sim"][k] / per["cpu"][k] for k in per["cpu"] if k in per["sim"] and per["cpu"][k]]
            paired = statistics.median(pairs) if pairs else float("nan")
            reals = [x for x in per["cpu"].values() if x > 0]
            spread = max(reals) / min(reals) if reals else float("nan")
            ok = abs(ratio - 1.0) <= TOLERANCE
            within += ok
            total += 1
            rows.append(dict(scenario=scen, title=title, metric=key, label=label, real=vals["cpu"],
                             sim=vals["sim"], ratio=ratio, within=ok, paired_ratio=paired, real_spread=spread))
    for dev in ("cpu", "sim"):
        for rep in range(1, a.repeats + 1):
            for scen, _ in SCENARIOS:
                r = load(a.work, dev, scen, rep)
                if r:
                    runs.append(dict(device=dev, scenario=scen, repeat=rep, failed=r.get("failed", 0),
                                     output_throughput=r.get("output_throughput"),
                                     mean_ttft_ms=r.get("mean_ttft_ms"), median_tpot_ms=r.get("median_tpot_ms"),
                                     load_start=r.get("loadavg_1m_start"), load_end=r.get("loadavg_1m_end")))
    print(f"sim vs real, medians of {a.repeats} interleaved repeats; commit {a.commit}; {a.threads} threads; "
          f"sim cost model: {a.sim_cost}; serve {a.serve_args}; session autogroup nice {a.autogroup_nice}\n")
    print("| workload | metric | real (cpu) | sim | sim / real | within 10% | median of the repeats' sim / real "
          "| real's own spread (max / min over repeats) |")
    print("|---|---|---:|---:|---:|---|---:|---:|")
    for r in rows:
        print(f"| {r['title']} | {r['label']} | {r['real']:.1f} | {r['sim']:.1f} | {r['ratio']:.3f} | "
              f"{'yes' if r['within'] else 'no'} | {r['paired_ratio']:.3f} | {r['real_spread']:.2f} |")
    print(f"\n{within} of {total} figures within 10%.")
    loads = [x for r in runs for x in (r["load_start"], r["load_end"]) if x is not None]
    if loads:
        print(f"load average (1 min) during the runs: {min(loads):.1f} - {max(loads):.1f}")
    print("\nper run (device, workload, repeat: output tok/s, mean TTFT ms, median TPOT ms, load at start):")
    for r in runs:
        print(f"  {r['device']} {r['scenario']} {r['repeat']}: {r['output_throughput'] or 0:.1f}, "
              f"{r['mean_ttft_ms'] or 0:.1f}, {r['median_tpot_ms'] or 0:.2f}, load {r['load_start'] or 0:.1f}"
              + (f", {r['failed']} failed" if r["failed"] else ""))
    with open(os.path.join(a.work, "sim-validate.json"), "w") as f:
        json.dump(dict(commit=a.commit, repeats=a.repeats, sim_cost=a.sim_cost, autogroup_nice=a.autogroup_nice, rows=rows, runs=runs), f, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
