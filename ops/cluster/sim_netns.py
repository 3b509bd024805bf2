#!/usr/bin/env python3
"""Sim engines spread over three hosts in network namespaces (issue: scale measured, not assumed;
items 3 and 6): one NATS cluster, or three regions joined by gateways.

    sim_netns.py --topology cluster|gateways [--engines-per-node 1,2,4] [--concurrency-per-engine C]
                 [--prompts-per-engine P] [--out DIR]

Three host namespaces on a bridge (ops/cluster/netns.py) and a client namespace. Per engine count E:
  cluster   a 3-node NATS cluster (ops/cluster/nats-node.conf, JetStream on); each host runs
            `llmbus serve --device sim --engines E --stream-replicas 3` (durable requests, the
            stream and the engines' consumers on all three nodes);
  gateways  three single-node regions joined by gateways (ops/cluster/nats-gateway.conf, no
            JetStream); each host runs `llmbus serve --device sim --engines E --no-durable`.
The client sends `llmbus-bench serve` (C x 3E requests in flight, P x 3E random prompts) to host
1's api server; its input processors route to every engine they hear (3E), over routes or
gateways. One JSON line per run in OUT/sim-netns.jsonl, in sim-scale.sh's form (label "netns
cluster, 3 nodes" or "netns gateways, 3 regions"; plus the messages that crossed between nodes:
routes' or gateways' in+out msgs/s), so ops/bench/sim_scale_report.py draws them beside the
one-host curve. Needs root; exits 77 (skipped) with the reason otherwise.
"""
import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(ROOT, "ops", "bench"))
from netns import Netns  # noqa: E402
from proc_cpu import cpu_by_kind  # noqa: E402

NODES = 3
SUBNET = "127.78.0"
CLIENT = f"{SUBNET}.10"
TAG = f"lls{os.getpid() % 100000}"


def node(i):
    return f"{TAG}n{i}"


def url(i):
    return f"nats://{SUBNET}.{i}:4222"


class Hosts:
    def __init__(self, a):
        self.a = a
        self.build = os.environ.get("BUILD_DIR", os.path.join(ROOT, "build-release"))
        self.llmbus = os.path.join(self.build, "cmd", "llmbus")
        self.bench_bin = os.path.join(self.build, "cmd", "llmbus-bench")
        self.model = os.path.join(ROOT, "models", "SmolLM2-135M-Instruct.Q4_1.gguf")
        self.net = Netns(TAG)
        self.nats, self.serve = {}, {}

    def log(self, name):
        return open(os.path.join(self.a.out, name), "ab")

    def start_nats(self, run):
        for i in range(1, NODES + 1):
            env = dict(os.environ, NODE_NAME=f"n{i}", NODE_ADDR=f"{SUBNET}.{i}", MONITOR_LISTEN="127.0.0.1:8222")
            others = [j for j in range(1, NODES + 1) if j != i]
            if self.a.topology == "cluster":
                env.update(STORE_DIR=os.path.join(self.a.out, f"js-{run}-{i}"),
                           PEER_1=f"nats-route://{SUBNET}.{others[0]}:6222",
                           PEER_2=f"nats-route://{SUBNET}.{others[1]}:6222")
                conf = os.path.join(HERE, "nats-node.conf")
            else:
                env.update(REGION=f"r{i}", GW_1_NAME=f"r{others[0]}", GW_1_URL=f"nats://{SUBNET}.{others[0]}:7222",
                           GW_2_NAME=f"r{others[1]}", GW_2_URL=f"nats://{SUBNET}.{others[1]}:7222")
                conf = os.path.join(HERE, "nats-gateway.conf")
            self.nats[i] = self.net.popen(node(i), ["nats-server", "-c", conf], self.log(f"nats-{run}-{i}.log"), env=env)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if all(self.links(i) >= NODES - 1 for i in range(1, NODES + 1)):
                return
            time.sleep(0.5)
        raise RuntimeError(f"NATS {self.a.topology} did not form (see {self.a.out}/nats-{run}-*.log)")

    def monitor(self, i, path):
        r = self.net.run(node(i), "curl", "-sf", f"http://127.0.0.1:8222/{path}", timeout=20)
        try:
            return json.loads(r.stdout) if r.returncode == 0 else {}
        except ValueError:
            return {}

    def links(self, i):
        """Routes (cluster) or outbound gateways (gateways) node i has up."""
        if self.a.topology == "cluster":
            return self.monitor(i, "routez").get("num_routes", 0)
        return len(self.monitor(i, "gatewayz").get("outbound_gateways") or {})

    def crossing(self):
        """(msgs, bytes) in + out over every route or gateway of every node so far."""
        msgs = byts = 0
        for i in range(1, NODES + 1):
            if self.a.topology == "cluster":
                conns = self.monitor(i, "routez").get("routes") or []
            else:
                gz = self.monitor(i, "gatewayz")
                conns = [g.get("connection", {}) for g in (gz.get("outbound_gateways") or {}).values()]
                conns += [c.get("connection", {}) for cs in (gz.get("inbound_gateways") or {}).values() for c in cs]
            for c in conns:
                msgs += c.get("in_msgs", 0) + c.get("out_msgs", 0)
                byts += c.get("in_bytes", 0) + c.get("out_bytes", 0)
        return msgs, byts

    def varz(self):
        tot = dict(in_msgs=0, out_msgs=0, in_bytes=0, out_bytes=0)
        for i in range(1, NODES + 1):
            v = self.monitor(i, "varz")
            for k in tot:
                tot[k] += v.get(k, 0)
        return tot

    def start_serve(self, run, e):
        for i in range(1, NODES + 1):
            urls = ",".join(url(j) for j in [i] + [j for j in range(1, NODES + 1) if j != i])
            argv = [self.llmbus, "serve", "--nats", urls, "--model", self.model, "--http", f"{SUBNET}.{i}:8000",
                    "--metrics-port", "0", "--device", "sim", "--engines", str(e), "--engine-id", f"n{i}-"]
            argv += ["--stream-replicas", "3"] if self.a.topology == "cluster" else ["--no-durable"]
            if self.a.sim_cost:
                argv += ["--sim-cost", self.a.sim_cost]
            self.serve[i] = self.net.popen(node(i), argv, self.log(f"serve-{run}-{i}.log"))
        deadline = time.monotonic() + 300
        healthy, seen = [], 0
        while time.monotonic() < deadline:
            healthy = [self.net.run(f"{TAG}c", "curl", "-sf", f"http://{SUBNET}.{i}:8000/health").returncode == 0
                       for i in range(1, NODES + 1)]
            seen = self.engines_seen() if all(healthy) else 0
            if seen >= NODES * e:
                return
            for i, p in self.serve.items():
                if p.poll() is not None:
                    raise RuntimeError(f"serve on host {i} exited (see {self.a.out}/serve-{run}-{i}.log)")
            time.sleep(1)
        raise RuntimeError(f"not ready in 300 s: api servers healthy {healthy}, {seen} of {NODES * e} engines heard "
                           f"(see {self.a.out}/serve-{run}-*.log)")

    def engines_seen(self):
        """Engines `llmbus status` hears from the client namespace (its JSON is the line that
        starts with '{': the run merges its log lines in)."""
        r = self.net.run(f"{TAG}c", self.llmbus, "status", "--nats", url(1), "--json", "--wait-ms", "2500")
        for line in r.stdout.splitlines():
            if line.startswith("{"):
                try:
                    return len(json.loads(line)["engines"])
                except (ValueError, KeyError):
                    return 0
        return 0

    def bench(self, n, prompts, extra):
        """llmbus-bench serve from the client namespace against host 1's api server: its JSON."""
        res = os.path.join(self.a.out, f"bench-{n}.json")
        argv = [self.bench_bin, "serve", "--base-url", f"http://{SUBNET}.1:8000", "--model", self.model, "--no-progress",
                "--no-memory", "--json", "--num-prompts", str(prompts), "--max-concurrency",
                str(self.a.concurrency_per_engine * n), "--input-len", str(self.a.input_len), "--output-len",
                str(self.a.output_len), "--ignore-eos", "--result-file", res] + extra
        self.net.run(f"{TAG}c", *argv, timeout=3600)
        with open(res) as f:
            return json.load(f)

    def cpu(self):
        """CPU seconds by process kind of every serve's tree and the nats-servers ("ip netns exec"
        execs in place: the pids are theirs)."""
        by = cpu_by_kind([p.pid for p in self.serve.values()])
        by["nats-server"] = cpu_by_kind([p.pid for p in self.nats.values()]).get("nats-server", 0.0)
        return by

    def stop(self):
        for procs in (self.serve, self.nats):
            for p in procs.values():
                if p.poll() is None:
                    os.killpg(p.pid, signal.SIGTERM)
            for p in procs.values():
                try:
                    p.wait(timeout=40)
                except subprocess.TimeoutExpired:
                    os.killpg(p.pid, signal.SIGKILL)
                    p.wait()
            procs.clear()


def machine_busy():
    with open("/proc/stat") as f:
        v = [float(x) for x in f.readline().split()[1:8]]
    return v[0] + v[1] + v[2] + v[5] + v[6], sum(v)


def one_run(h, a, e, label):
    n = NODES * e
    run = f"{a.topology}-{e}"
    h.start_nats(run)
    try:
        h.start_serve(run, e)
        h.bench(n, a.concurrency_per_engine * n, ["--output-len", "8", "--seed", "999"])  # warm-up
        c0, v0, x0, b0, l0 = h.cpu(), h.varz(), h.crossing(), machine_busy(), os.getloadavg()[0]
        r = h.bench(n, a.prompts_per_engine * n, ["--seed", "1"])
        c1, v1, x1, b1, l1 = h.cpu(), h.varz(), h.crossing(), machine_busy(), os.getloadavg()[0]
        dur = r["duration"]
        return dict(engines=n, repeat=1, label=label, concurrency_per_engine=a.concurrency_per_engine,
                    completed=r["completed"], failed=r["failed"], duration_s=dur,
                    output_throughput=r["output_throughput"], mean_ttft_ms=r["mean_ttft_ms"],
                    median_ttft_ms=r["median_ttft_ms"], median_tpot_ms=r["median_tpot_ms"],
                    output_tokens=r["total_output_tokens"],
                    cpu_s={k: c1.get(k, 0) - c0.get(k, 0) for k in set(c0) | set(c1)},
                    machine_busy_cores=(b1[0] - b0[0]) / max(b1[1] - b0[1], 1e-9) * os.cpu_count(),
                    load_start=l0, load_end=l1,
                    nats_in_msgs_s=(v1["in_msgs"] - v0["in_msgs"]) / dur,
                    nats_out_msgs_s=(v1["out_msgs"] - v0["out_msgs"]) / dur,
                    nats_in_bytes_s=(v1["in_bytes"] - v0["in_bytes"]) / dur,
                    nats_out_bytes_s=(v1["out_bytes"] - v0["out_bytes"]) / dur,
                    crossing_msgs_s=(x1[0] - x0[0]) / dur, crossing_bytes_s=(x1[1] - x0[1]) / dur)
    finally:
        h.stop()


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--topology", choices=["cluster", "gateways"], default="cluster")
    ap.add_argument("--engines-per-node", default="1,2,4")
    ap.add_argument("--concurrency-per-engine", type=int, default=8)
    ap.add_argument("--prompts-per-engine", type=int, default=24)
    ap.add_argument("--input-len", type=int, default=64)
    ap.add_argument("--output-len", type=int, default=64)
    ap.add_argument("--sim-cost", default="")
    ap.add_argument("--out", default="")
    a = ap.parse_args()
    a.out = a.out or tempfile.mkdtemp(prefix="llb-sim-netns-")
    os.makedirs(a.out, exist_ok=True)
    h = Hosts(a)
    ok, why = h.net.check()
    if not ok:
        print(f"SKIP: {why}")
        return 77
    label = "netns cluster, 3 nodes" if a.topology == "cluster" else "netns gateways, 3 regions"
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # the finally below still tears down
    try:
        h.net.network()
        for i in range(1, NODES + 1):
            h.net.add(node(i), f"{SUBNET}.{i}")
        h.net.add(f"{TAG}c", CLIENT)
        for e in (int(x) for x in a.engines_per_node.split(",")):
            print(f"sim-netns: {a.topology}, {NODES} x {e} engines (load average {os.getloadavg()[0]:.1f})",
                  file=sys.stderr)
            rec = one_run(h, a, e, label)
            with open(os.path.join(a.out, "sim-netns.jsonl"), "a") as f:
                f.write(json.dumps(rec) + "\n")
            print(json.dumps({k: rec[k] for k in ("engines", "output_throughput", "mean_ttft_ms", "median_tpot_ms",
                                                  "failed", "crossing_msgs_s", "nats_in_msgs_s")}))
    finally:
        h.stop()
        h.net.teardown()
    print(f"sim-netns: results in {a.out}/sim-netns.jsonl", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
