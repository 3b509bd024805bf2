#!/usr/bin/env python3
"""Who ran on the forward's cores while served, from `perf sched record` (ops/bench/served-preemptions.sh).

    served_preemptions.py SWITCHES THREADS BENCH.json

SWITCHES: `perf script -F cpu,time,event,trace` lines of sched:sched_switch events; THREADS: one
line per thread of the stack, "tid kind name" (kinds: ops/bench/proc_cpu.py's); BENCH.json:
llmbus-bench serve's --json result of the run the recording fell in (its output tok/s turns
the recording's seconds into output tokens, assuming the rate held through it). Prints on-CPU
microseconds per output token by thread (the stack's by kind, the worker's each, others as
other:<comm>), and for the worker's forward caller (its busiest thread that is not a pool
thread) and its pool thread llb-pool-1: switched out while runnable (preempted) per token, by
whom, and switched out blocked (slept) per token.
"""
import collections
import json
import re
import sys

SWITCH = re.compile(r"\[(\d+)\]\s+([\d.]+):.*prev_comm=(.*?) prev_pid=(\d+) prev_prio=\d+ prev_state=(\S+) "
                    r"==> next_comm=(.*?) next_pid=(\d+)")


def main():
    if len(sys.argv) != 4:
        sys.exit(__doc__)
    threads = {}
    with open(sys.argv[2]) as f:
        for line in f:
            tid, kind, name = line.rstrip("\n").split(" ", 2)
            threads[int(tid)] = (kind, name)
    with open(sys.argv[3]) as f:
        rate = json.load(f)["output_throughput"]

    def who(tid, comm):
        tid = int(tid)
        if tid == 0:
            return "idle"
        if tid not in threads:
            return "other:" + comm
        kind, name = threads[tid]
        return f"gpu_worker {name} {tid}" if kind == "gpu_worker" else kind

    with open(sys.argv[1]) as f:
        events = [m.groups() for m in map(SWITCH.search, f) if m]
    if len(events) < 2:
        sys.exit("no sched_switch events")
    seconds = float(events[-1][1]) - float(events[0][1])
    tokens = rate * seconds
    on_cpu, running = collections.Counter(), {}
    for cpu, ts, _, _, _, next_comm, next_pid in events:
        if cpu in running:
            on_cpu[running[cpu][0]] += float(ts) - running[cpu][1]
        running[cpu] = (who(next_pid, next_comm), float(ts))
    print(f"{seconds:.2f} s recorded, ~{tokens:.0f} output tokens at {rate:.1f} tok/s")
    print("on-CPU microseconds per output token:")
    for k, v in on_cpu.most_common(16):
        print(f"  {k:40s} {v * 1e6 / tokens:8.1f}")
    worker = [k for k in on_cpu if k.startswith("gpu_worker ")]
    callers = [k for k in worker if " llb-pool-" not in k]
    pools = [k for k in worker if " llb-pool-1 " in k]
    for th in ([max(callers, key=on_cpu.get)] if callers else []) + pools[:1]:
        by, slept = collections.Counter(), 0
        for _, _, prev_comm, prev_pid, state, next_comm, next_pid in events:
            if who(prev_pid, prev_comm) != th:
                continue
            if state.startswith("R"):
                by[who(next_pid, next_comm)] += 1
            else:
                slept += 1
        print(f"{th}: preempted {sum(by.values()) / tokens:.2f} / token, slept {slept / tokens:.2f} / token; "
              "preempted by (per token):")
        for k, v in by.most_common(10):
            print(f"  {k:40s} {v / tokens:6.2f}")


if __name__ == "__main__":
    main()
