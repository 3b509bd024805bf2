#!/usr/bin/env python3
"""The records and the report of ops/bench/served-ab.sh.

    served_ab_report.py --record LABEL ROUND C RESULT < STEP-LOG-LINES    prints one JSON record
    served_ab_report.py RUNS.jsonl...                                     prints the medians

--record: RESULT is served_cpu.py --threads gpu_worker's output (three JSON lines: llmbus-bench's
result, CPU per token by process, per thread of the worker); stdin the worker's --step-log lines
written during that run (one JSON object a step, its `seconds` inside model_runner_execute).

The report: per concurrency, one row per label (medians over its rounds) with output tok/s,
TTFT and ITL in ms (mean, p99), "not in a step" (1 - the steps' seconds / the run's duration, %:
the worker waiting for its next SchedulerOutput, decoding it, sampling and replying), steps per
output token, and CPU microseconds per output token of the worker, nats-server, scheduler, api
server, output processor, client and all but the worker; then per label the worker's busiest
threads (its forward's caller is the execute subscription's delivery thread, named like the
process; the pool's threads are llb-pool-N): CPU / run-queue wait microseconds and voluntary /
involuntary switches per output token.
"""
import json
import statistics
import sys


def record(label, rnd, c, result):
    lines = result.splitlines()
    bench, cpu = json.loads(lines[0]), json.loads(lines[1])
    threads = json.loads(lines[2])["threads"] if len(lines) > 2 else []
    steps = [json.loads(line) for line in sys.stdin if line.strip()]
    with open("/proc/loadavg") as f:
        load = float(f.read().split()[0])
    return {"label": label, "round": int(rnd), "c": int(c), "load": load,
            "steps": {"n": len(steps), "seconds": sum(s["seconds"] for s in steps)},
            "bench": {k: v for k, v in bench.items() if not isinstance(v, (list, dict))},
            "cpu": cpu["per_token"], "threads": threads}


def fmt(v):
    return f"{v:.1f}" if abs(v) >= 10 else f"{v:.2f}"


COLUMNS = [
    ("tok/s", lambda r: r["bench"]["output_throughput"]),
    ("TTFT mean", lambda r: r["bench"]["mean_ttft_ms"]),
    ("TTFT p99", lambda r: r["bench"]["p99_ttft_ms"]),
    ("ITL mean", lambda r: r["bench"]["mean_itl_ms"]),
    ("ITL p99", lambda r: r["bench"]["p99_itl_ms"]),
    ("not in a step %", lambda r: 100 * (1 - r["steps"]["seconds"] / r["bench"]["duration"])),
    ("steps / token", lambda r: r["steps"]["n"] / max(r["bench"]["total_output_tokens"], 1)),
    ("worker", lambda r: r["cpu"].get("gpu_worker", {}).get("cpu_us", 0)),
    ("nats-server", lambda r: r["cpu"].get("nats-server", {}).get("cpu_us", 0)),
    ("scheduler", lambda r: r["cpu"].get("scheduler", {}).get("cpu_us", 0)),
    ("api server", lambda r: r["cpu"].get("api_server", {}).get("cpu_us", 0)),
    ("output processor", lambda r: r["cpu"].get("output_processor", {}).get("cpu_us", 0)),
    ("client", lambda r: r["cpu"].get("client", {}).get("cpu_us", 0)),
    ("all but the worker", lambda r: sum(v["cpu_us"] for k, v in r["cpu"].items() if k != "gpu_worker")),
]


def report(rows):
    labels = list(dict.fromkeys(r["label"] for r in rows))
    for c in sorted({r["c"] for r in rows}):
        loads = sorted(r["load"] for r in rows if r["c"] == c)
        print(f"\nconcurrency {c}: medians; load average {loads[0]:.1f}-{loads[-1]:.1f}; ms, CPU us per output token")
        print("| set-up | runs | " + " | ".join(name for name, _ in COLUMNS) + " |")
        print("|---|---:|" + "---:|" * len(COLUMNS))
        for lab in labels:
            rs = [r for r in rows if r["label"] == lab and r["c"] == c]
            if rs:
                cells = [fmt(statistics.median(f(r) for r in rs)) for _, f in COLUMNS]
                print(f"| {lab} | {len(rs)} | " + " | ".join(cells) + " |")
        print("the worker's threads (CPU us / run-queue wait us / voluntary / involuntary switches per token):")
        for lab in labels:
            by_rank = {}
            for r in (r for r in rows if r["label"] == lab and r["c"] == c):
                for i, t in enumerate(sorted(r["threads"], key=lambda t: -t["cpu_us"])[:3]):
                    by_rank.setdefault((i, t["name"]), []).append(t)
            cells = [f"{name} {statistics.median(t['cpu_us'] for t in ts):.0f} / "
                     f"{statistics.median(t['wait_us'] for t in ts):.0f} / "
                     f"{statistics.median(t['wakeups'] for t in ts):.2f} / "
                     f"{statistics.median(t['preempted'] for t in ts):.2f}"
                     for (_, name), ts in sorted(by_rank.items())]
            print(f"  {lab}: " + "; ".join(cells))


def main():
    if len(sys.argv) == 6 and sys.argv[1] == "--record":
        print(json.dumps(record(*sys.argv[2:6])))
    elif len(sys.argv) >= 2 and not sys.argv[1].startswith("-"):
        report([json.loads(line) for path in sys.argv[1:] for line in open(path) if line.strip()])
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main()
