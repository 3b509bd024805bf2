"""Three hosts on one machine: a 3-node NATS cluster and one engine per node, each node in its own
network namespace (ip netns + veth on a bridge; 127.77.0.0/24 addresses with route_localnet,
so nothing can leave the machine), and a client namespace that sends streamed
/v1/completions requests to the nodes' api servers round-robin.

Mid-load the test SIGKILLs one node's nats-server (its actors reconnect to the other two) and
the whole `llmbus serve` of another node (its engine, input processor and api server). Then:
  - every node's NATS clients reconnected: the surviving engines keep answering, and every
    request started once the failures have settled completes, with the full text;
  - the routers stopped sending work to the dead engine (its stats fell silent);
  - a request the client had been told was accepted and then lost is counted and reported
    (DESIGN.md §6: the durable request stream is what removes that loss; the engines run
    `--no-durable` here, because that stream on this 3-node cluster lost its availability with
    the killed node in some runs — open).
A request refused before it was accepted (connection refused by the dead api server) is retried
on the next node, as any HTTP client of a multi-host deployment does.

Needs root (network namespaces): otherwise it prints the reason and exits 77 (skipped).
Environment as tests/e2e/api_stack.py: LLMBUS_BUILD_DIR, LLMBUS_MODEL, LLMBUS_SOURCE_DIR."""
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request

SKIP = 77
NODES = 3
SUBNET = "127.77.0"
CLIENT_ADDR = f"{SUBNET}.10"
HTTP_PORT = 8000
CONCURRENCY = 6
MAX_TOKENS = 24
KILL_AFTER_S = 5.0       # into the load
SETTLE_S = 8.0           # after the kills: reconnects done, dead engine out of the routers
LOAD_S = KILL_AFTER_S + SETTLE_S + 15.0  # clients start requests until then
TAG = f"llb{os.getpid() % 100000}"


def skip(reason):
    print(f"SKIP: {reason}")
    sys.exit(SKIP)


def sh(*args, check=True, **kw):
    return subprocess.run(list(args), check=check, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, **kw)


def ns(i):
    return f"{TAG}n{i}"


class Cluster:
    def __init__(self):
        src = os.environ.get("LLMBUS_SOURCE_DIR", os.path.dirname(os.path.dirname(os.path.dirname(
            os.path.abspath(__file__)))))
        self.build = os.environ.get("LLMBUS_BUILD_DIR", os.path.join(src, "build"))
        self.llmbus = os.path.join(self.build, "cmd", "llmbus")
        self.model = os.environ.get("LLMBUS_MODEL", os.path.join(src, "models", "SmolLM2-135M-Instruct.Q4_1.gguf"))
        self.conf = os.path.join(src, "ops", "cluster", "nats-node.conf")
        self.tmp = tempfile.mkdtemp(prefix="llmbus-cluster-")
        self.namespaces = []
        self.nats = {}
        self.serve = {}

    def check(self):
        if os.geteuid() != 0:
            skip("network namespaces need root")
        for path in (self.llmbus, "/usr/sbin/nats-server"):
            if not os.access(path, os.X_OK):
                skip(f"{path} missing")
        if not os.path.exists(self.model):
            skip(f"model {self.model} missing (run ops/fetch-model.sh)")
        r = sh("ip", "netns", "add", f"{TAG}probe", check=False)
        if r.returncode != 0:
            skip(f"cannot create a network namespace: {r.stdout.strip()}")
        sh("ip", "netns", "del", f"{TAG}probe", check=False)

    def add_ns(self, name, addr, idx):
        sh("ip", "netns", "add", name)
        self.namespaces.append(name)
        veth, peer = f"{TAG}v{idx}", f"{TAG}h{idx}"
        sh("ip", "link", "add", veth, "netns", name, "type", "veth", "peer", "name", peer, "netns", f"{TAG}hub")
        sh("ip", "-n", f"{TAG}hub", "link", "set", peer, "master", "br0")
        sh("ip", "-n", f"{TAG}hub", "link", "set", peer, "up")
        sh("ip", "-n", name, "link", "set", "lo", "up")
        sh("ip", "-n", name, "link", "set", veth, "up")
        # 127/8 on a real interface: the kernel routes it only with route_localnet
        sh("ip", "netns", "exec", name, "sysctl", "-qw", "net.ipv4.conf.all.route_localnet=1",
           f"net.ipv4.conf.{veth}.route_localnet=1")
        sh("ip", "-n", name, "addr", "add", f"{addr}/24", "dev", veth)

    def network(self):
        sh("ip", "netns", "add", f"{TAG}hub")
        self.namespaces.append(f"{TAG}hub")
        sh("ip", "-n", f"{TAG}hub", "link", "add", "br0", "type", "bridge")
        sh("ip", "-n", f"{TAG}hub", "link", "set", "br0", "up")
        for i in range(1, NODES + 1):
            self.add_ns(ns(i), f"{SUBNET}.{i}", i)
        self.add_ns(f"{TAG}c", CLIENT_ADDR, 9)

    def nats_url(self, first):
        order = [first] + [i for i in range(1, NODES + 1) if i != first]
        return ",".join(f"nats://{SUBNET}.{i}:4222" for i in order)

    def start_nats(self, i):
        env = dict(os.environ, NODE_NAME=f"n{i}", NODE_ADDR=f"{SUBNET}.{i}", STORE_DIR=os.path.join(self.tmp, f"js{i}"),
                   MONITOR_LISTEN="127.0.0.1:8222")
        peers = [j for j in range(1, NODES + 1) if j != i]
        env["PEER_1"], env["PEER_2"] = (f"nats-route://{SUBNET}.{j}:6222" for j in peers)
        log = open(os.path.join(self.tmp, f"nats{i}.log"), "ab")
        self.nats[i] = subprocess.Popen(["ip", "netns", "exec", ns(i), "nats-server", "-c", self.conf], env=env,
                                        stdout=log, stderr=subprocess.STDOUT, start_new_session=True)

    def wait_cluster(self, timeout_s=30):
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            routes = []
            for i in range(1, NODES + 1):
                r = sh("ip", "netns", "exec", ns(i), "curl", "-sf", "http://127.0.0.1:8222/routez", check=False)
                routes.append(json.loads(r.stdout).get("num_routes", 0) if r.returncode == 0 else 0)
            if all(n >= NODES - 1 for n in routes):
                return
            time.sleep(0.5)
        raise AssertionError(f"NATS cluster did not form: routes {routes}")

    def start_serve(self, i):
        log = open(os.path.join(self.tmp, f"serve{i}.log"), "ab")
        args = ["ip", "netns", "exec", ns(i), self.llmbus, "serve", "--nats", self.nats_url(i), "--model", self.model,
                "--http", f"{SUBNET}.{i}:{HTTP_PORT}", "--engine-id", f"n{i}", "--threads", "1",
                "--num-blocks", "256", "--max-num-batched-tokens", "128",
                # plain request subjects: a durable requests stream on this cluster lost its
                # availability with the killed node in some runs (open); what is tested here is
                # NATS failover and routing around a dead engine
                "--no-durable"]
        self.serve[i] = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)

    def client(self, *args, timeout=60):
        return sh("ip", "netns", "exec", f"{TAG}c", *args, check=False, timeout=timeout)

    def wait_healthy(self, timeout_s=240):
        deadline = time.monotonic() + timeout_s
        pending = set(range(1, NODES + 1))
        while pending and time.monotonic() < deadline:
            for i in sorted(pending):
                if self.serve[i].poll() is not None:
                    raise AssertionError(f"serve {i} exited: {self.tail(f'serve{i}.log')}")
                r = self.client("curl", "-sf", f"http://{SUBNET}.{i}:{HTTP_PORT}/health", timeout=10)
                if r.returncode == 0:
                    pending.discard(i)
            time.sleep(0.5)
        if pending:
            raise AssertionError(f"nodes {sorted(pending)} not healthy within {timeout_s} s")

    def engines_seen(self):
        r = subprocess.run(["ip", "netns", "exec", f"{TAG}c", self.llmbus, "status", "--nats", self.nats_url(1), "--json",
                            "--wait-ms", "2500"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                           check=False, timeout=60)
        try:
            return {e["engine_id"] for e in json.loads(r.stdout)["engines"]}
        except (ValueError, KeyError):
            return set()

    def tail(self, name, n=30):
        try:
            with open(os.path.join(self.tmp, name), errors="replace") as f:
                return "".join(f.readlines()[-n:])
        except OSError:
            return "(no log)"

    def kill(self, proc):
        if proc and proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()

    def teardown(self):
        for p in list(self.serve.values()):
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGTERM)
        for p in list(self.serve.values()):
            try:
                p.wait(timeout=40)
            except subprocess.TimeoutExpired:
                self.kill(p)
        for p in self.nats.values():
            self.kill(p)
        for name in reversed(self.namespaces):
            sh("ip", "netns", "del", name, check=False)


def load_main(urls, duration, concurrency, max_tokens, model):
    """Runs inside the client namespace: streamed completions, round-robin over `urls`; prints
    one JSON summary. A request counts as accepted once the HTTP status line came back."""
    results = []
    lock = threading.Lock()
    t0 = time.monotonic()
    next_idx = [0]

    def attempt(url, body):
        """One try: ('ok'|'refused'|'error'|'truncated', detail)."""
        req = urllib.request.Request(url + "/v1/completions", data=body, headers={"Content-Type": "application/json"})
        try:
            resp = urllib.request.urlopen(req, timeout=180)
        except urllib.error.HTTPError as e:
            detail = f"HTTP {e.code}: {e.read()[:160].decode(errors='replace')}"
            return ("error" if e.code in (429, 503) else "bad"), detail
        except OSError as e:
            return "refused", f"{type(e).__name__}"
        chunks, done, finish = 0, False, None
        try:
            for line in resp:
                line = line.decode(errors="replace").strip()
                if line == "data: [DONE]":
                    done = True
                    break
                if line.startswith("data: "):
                    chunk = json.loads(line[6:])
                    if "error" in chunk:
                        return "error", f"SSE error event: {chunk['error'].get('message')}"
                    chunks += 1
                    for choice in chunk.get("choices", []):
                        finish = choice.get("finish_reason") or finish
        except (OSError, ValueError) as e:
            return "truncated", f"stream broken after {chunks} chunks: {type(e).__name__}"
        if done and finish == "length":  # ignore_eos: all of max_tokens came
            return "ok", ""
        return "truncated", f"ended after {chunks} chunks, finish_reason {finish}, [DONE] {'seen' if done else 'missing'}"

    def one(k):
        """A client of a multi-host deployment: a refused connection, a 503 / 429 or an SSE error
        event is retried on the next node (as the OpenAI SDK retries 503s)."""
        start = time.monotonic() - t0
        body = json.dumps({"model": model, "prompt": f"Request {k}: list some colors.", "max_tokens": max_tokens,
                           "temperature": 0, "ignore_eos": True, "stream": True}).encode()
        history = []
        for a in range(len(urls) * 3):
            kind, detail = attempt(urls[(k + a) % len(urls)], body)
            history.append((kind, detail))
            if kind in ("ok", "bad"):
                break
            time.sleep(0.2)
        return dict(k=k, start=start, ok=history[-1][0] == "ok", history=history)

    def worker():
        while time.monotonic() - t0 < duration:
            with lock:
                k = next_idx[0]
                next_idx[0] += 1
            r = one(k)
            with lock:
                results.append(r)
            time.sleep(0.05)

    threads = [threading.Thread(target=worker) for _ in range(concurrency)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    print(json.dumps({"results": results, "elapsed": time.monotonic() - t0}))


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "--load":
        cfg = json.loads(sys.argv[2])
        load_main(**cfg)
        return 0
    c = Cluster()
    c.check()
    failures = []
    try:
        c.network()
        for i in range(1, NODES + 1):
            c.start_nats(i)
        c.wait_cluster()
        print("ok   3-node NATS cluster formed")
        for i in range(1, NODES + 1):
            c.start_serve(i)
        c.wait_healthy()
        deadline = time.monotonic() + 30
        while c.engines_seen() != {"n1", "n2", "n3"} and time.monotonic() < deadline:
            time.sleep(1)
        seen = c.engines_seen()
        assert seen == {"n1", "n2", "n3"}, f"engines seen on the bus: {seen}"
        print("ok   3 engines announced on the cluster")
        urls = [f"http://{SUBNET}.{i}:{HTTP_PORT}" for i in range(1, NODES + 1)]
        cfg = dict(urls=urls, duration=LOAD_S, concurrency=CONCURRENCY, max_tokens=MAX_TOKENS,
                   model=os.path.basename(c.model)[: -len(".gguf")])
        load = subprocess.Popen(["ip", "netns", "exec", f"{TAG}c", sys.executable, os.path.abspath(__file__), "--load",
                                 json.dumps(cfg)], stdout=subprocess.PIPE, text=True)
        time.sleep(KILL_AFTER_S)
        c.kill(c.nats[3])   # a NATS node: its clients reconnect to n1/n2
        c.kill(c.serve[2])  # an engine (and node 2's api server and input processor)
        print("ok   killed nats-server n3 and engine n2 mid-load")
        out, _ = load.communicate(timeout=900)
        summary = json.loads(out)
        res = summary["results"]
        after = [r for r in res if r["start"] > KILL_AFTER_S + SETTLE_S]
        kinds = {}
        for r in res:
            for kind, _ in r["history"]:
                kinds[kind] = kinds.get(kind, 0) + 1
        print(f"load: {len(res)} requests in {summary['elapsed']:.1f} s: completed={sum(r['ok'] for r in res)} "
              f"failed={sum(not r['ok'] for r in res)} started_after_settle={len(after)}; attempts by outcome "
              f"{kinds} (error = a clear 503/429/SSE error; truncated = lost after accept without an error; "
              f"refused = the node was gone, not accepted)")
        for r in res:
            if not r["ok"] or any(k not in ("ok", "refused") for k, _ in r["history"]):
                print(f"     request {r['k']} (started {r['start']:.1f} s): " +
                      "; ".join(f"{k}: {d}" if d else k for k, d in r["history"]))
        if not after:
            failures.append("no request started after the failures settled: load too short to show recovery")
        bad_after = [r for r in after if not r["ok"] or any(k not in ("ok", "refused") for k, _ in r["history"])]
        if bad_after:
            failures.append(f"{len(bad_after)} requests started after the failures settled met an error or failed")
        failed = [r for r in res if not r["ok"]]
        if failed:
            failures.append(f"{len(failed)} requests never completed, even retried on the other nodes")
        seen = c.engines_seen()
        if "n2" in seen:
            # `llmbus status` lists what announced itself within its window: n2 must be silent
            failures.append(f"dead engine n2 still announcing itself: {seen}")
    except AssertionError as e:
        failures.append(str(e))
    finally:
        if failures:
            for i in range(1, NODES + 1):
                print(f"--- serve{i}.log ---\n{c.tail(f'serve{i}.log')}")
        c.teardown()
    for f in failures:
        print(f"FAIL {f}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
