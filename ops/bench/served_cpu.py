#!/usr/bin/env python3
"""CPU and wake-ups per output token of each process of a serving stack over one client run.

    served_cpu.py --tree PID [--threads KIND] -- llmbus-bench serve ... --json

Runs the client command (its stdout: llmbus-bench serve's --json result, passed through on the
first line), and prints a second JSON line: for each process kind of the tree PID (the actors,
nats-server, ...; ops/bench/proc_cpu.py's kinds) and for the client itself, the CPU microseconds
(user + system) and the voluntary context switches (a thread blocked and was woken: a wake-up)
per output token, from /proc before and after the run (CPU from each thread's schedstat, in
nanoseconds). The client's figures are its own over the run (llmbus-bench's client_cpu_s and
client_voluntary_ctxt_switches) when it reports them: its start-up before the run is not served
work (at 128 tokens ~170 of the ~210 us per token counted before 2026-11-30: ~22 ms of
tokenizer load and process start).

--threads KIND (e.g. gpu_worker, or several: scheduler,api_server) adds a third JSON line: per
thread of the processes of that kind, its name, CPU and run-queue wait microseconds (schedstat), and voluntary (it blocked) and
involuntary (it was preempted) context switches, per output token: the worker's pool threads
are named llb-pool-N; its forward runs on the execute subscription's delivery thread.
"""
import json
import os
import resource
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from proc_cpu import descendants, kind_of, processes  # noqa: E402


def by_kind(tree):
    """{kind: [CPU seconds, voluntary context switches]} summed over every thread of the
    processes under `tree` (CPU from /proc/<pid>/task/<tid>/schedstat: nanoseconds, where
    /proc/<pid>/stat counts 10 ms ticks)."""
    procs = processes()
    by = {}
    for p in descendants(procs, [tree]):
        cpu, n = 0.0, 0
        try:
            for t in os.listdir(f"/proc/{p}/task"):
                with open(f"/proc/{p}/task/{t}/schedstat") as f:
                    cpu += int(f.read().split()[0]) / 1e9
                with open(f"/proc/{p}/task/{t}/status") as f:
                    for line in f:
                        if line.startswith("voluntary_ctxt_switches:"):
                            n += int(line.split()[1])
        except (OSError, ValueError, IndexError):
            pass
        acc = by.setdefault(kind_of(procs[p][1]), [0.0, 0])
        acc[0] += cpu
        acc[1] += n
    return by


def thread_stats(tree, kind):
    """{(pid, tid): (name, [cpu ns, run-queue wait ns, voluntary, involuntary switches])} of
    every thread of the processes of `kind` (one kind, or several joined by commas) under
    `tree`."""
    kinds = set(kind.split(","))
    procs = processes()
    out = {}
    for p in descendants(procs, [tree]):
        if kind_of(procs[p][1]) not in kinds:
            continue
        try:
            tids = os.listdir(f"/proc/{p}/task")
        except OSError:
            continue
        for t in tids:
            try:
                with open(f"/proc/{p}/task/{t}/schedstat") as f:
                    cpu, wait = (int(x) for x in f.read().split()[:2])
                with open(f"/proc/{p}/task/{t}/comm") as f:
                    name = f.read().strip()
                sw = {}
                with open(f"/proc/{p}/task/{t}/status") as f:
                    for line in f:
                        k, _, v = line.partition(":")
                        if k in ("voluntary_ctxt_switches", "nonvoluntary_ctxt_switches"):
                            sw[k] = int(v)
                out[(p, int(t))] = (name, [cpu, wait, sw.get("voluntary_ctxt_switches", 0),
                                           sw.get("nonvoluntary_ctxt_switches", 0)])
            except (OSError, ValueError, IndexError):
                pass
    return out


def per_thread(t0, t1, tokens):
    """Per thread that ran over the client run: microseconds and switches per output token."""
    rows = []
    for key, (name, v1) in sorted(t1.items()):
        v0 = t0.get(key, (name, [0, 0, 0, 0]))[1]
        d = [b - a for a, b in zip(v0, v1)]
        if d[0] <= 0 and d[2] <= 0:
            continue
        rows.append({"pid": key[0], "tid": key[1], "name": name, "cpu_us": d[0] / 1e3 / tokens,
                     "wait_us": d[1] / 1e3 / tokens, "wakeups": d[2] / tokens, "preempted": d[3] / tokens})
    return rows


def main():
    argv = sys.argv[1:]
    kind = None
    if len(argv) > 4 and argv[2] == "--threads":
        kind = argv[3]
        argv = argv[:2] + argv[4:]
    if len(argv) < 4 or argv[0] != "--tree" or argv[2] != "--":
        sys.exit("usage: served_cpu.py --tree PID [--threads KIND] -- COMMAND...")
    tree, cmd = int(argv[1]), argv[3:]
    t0 = thread_stats(tree, kind) if kind else {}
    k0 = by_kind(tree)
    r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    out = subprocess.run(cmd, check=True, stdout=subprocess.PIPE, text=True).stdout
    r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    k1 = by_kind(tree)
    t1 = thread_stats(tree, kind) if kind else {}
    res = json.loads(out)
    tokens = max(int(res["total_output_tokens"]), 1)
    per = {k: {"cpu_us": (v[0] - k0.get(k, [0.0, 0])[0]) * 1e6 / tokens,
               "wakeups": (v[1] - k0.get(k, [0.0, 0])[1]) / tokens} for k, v in k1.items()}
    # the client's own figures over the run (llmbus-bench's client_cpu_s): its start-up before
    # the run (loading the tokenizer, ~20-25 ms) is not on the served path; else the whole process
    if "client_cpu_s" in res:
        per["client"] = {"cpu_us": res["client_cpu_s"] * 1e6 / tokens,
                         "wakeups": res["client_voluntary_ctxt_switches"] / tokens}
    else:
        per["client"] = {"cpu_us": (r1.ru_utime + r1.ru_stime - r0.ru_utime - r0.ru_stime) * 1e6 / tokens,
                         "wakeups": (r1.ru_nvcsw - r0.ru_nvcsw) / tokens}
    print(json.dumps(res))
    print(json.dumps({"tokens": tokens, "per_token": per}))
    if kind:
        print(json.dumps({"kind": kind, "threads": per_thread(t0, t1, tokens)}))


if __name__ == "__main__":
    main()
