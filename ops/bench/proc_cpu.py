#!/usr/bin/env python3
"""CPU seconds (user + system, from /proc) of llmbus processes by kind (the sim benchmarks).

    proc_cpu.py --tree PID [--tree PID ...] [--named NAME=PID ...]   prints one JSON object

A kind is the actor a process runs (scheduler, kv_manager, gpu_worker, output_processor,
input_processor, api_server, encoder_cache), supervisor for `llmbus` itself, else its command
name; --tree adds a process and all its descendants, --named one process under a name of its
own (nats-server). Importable: cpu_by_kind(trees, named).
"""
import argparse
import json
import os

KINDS = {"llmbus": "supervisor", "schedule": "scheduler", "kv-manag": "kv_manager", "gpu-work": "gpu_worker",
         "output-p": "output_processor", "input-pr": "input_processor", "api-serv": "api_server",
         "encoder-": "encoder_cache"}


def processes():
    """{pid: (ppid, comm, cpu seconds)} of every process now."""
    tick = os.sysconf("SC_CLK_TCK")
    out = {}
    for p in os.listdir("/proc"):
        if not p.isdigit():
            continue
        try:
            with open(f"/proc/{p}/stat") as f:
                st = f.read()
            fields = st[st.rindex(")") + 2:].split()
            out[int(p)] = (int(fields[1]), st[st.index("(") + 1:st.rindex(")")], (int(fields[11]) + int(fields[12])) / tick)
        except (OSError, ValueError):
            pass
    return out


def kind_of(comm):
    return KINDS.get(comm.replace("llmbus-", "")[:8], comm)


def descendants(procs, trees):
    """The pids of `trees` and of all their descendants that are in `procs` (processes()), each once."""
    children = {}
    for pid, (ppid, _, _) in procs.items():
        children.setdefault(ppid, []).append(pid)
    seen, stack = set(), list(trees)
    while stack:
        q = stack.pop()
        if q not in seen:
            seen.add(q)
            stack += children.get(q, [])
    return [q for q in seen if q in procs]


def cpu_by_kind(trees=(), named=None):
    procs = processes()
    by = {}
    for q in descendants(procs, trees):
        k = kind_of(procs[q][1])
        by[k] = by.get(k, 0.0) + procs[q][2]
    for name, pid in (named or {}).items():
        if pid in procs:
            by[name] = by.get(name, 0.0) + procs[pid][2]
    return by


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tree", type=int, action="append", default=[])
    ap.add_argument("--named", action="append", default=[], help="NAME=PID")
    a = ap.parse_args()
    named = {n.split("=", 1)[0]: int(n.split("=", 1)[1] or 0) for n in a.named if "=" in n}
    print(json.dumps(cpu_by_kind([t for t in a.tree if t > 0], named)))


if __name__ == "__main__":
    main()
