"""Three hosts on one machine: a 3-node NATS cluster and one engine per node, each node in its own
network namespace (ip netns + veth on a bridge; 127.77.0.0/24 addresses with route_localnet,
so nothing can leave the machine), and a client namespace that sends streamed
/v1/completions requests to the nodes' api servers round-robin.

The engines run durable (docs/design.md §6): EngineCoreRequests go through the JetStream requests
stream, created with `--stream-replicas 3`, so the stream and every engine's consumer live on
all three nodes. Mid-load the test SIGKILLs the nats-server that leads the stream (its replicas
elect a new leader in a few seconds: input processors retry their publishes with the same
Nats-Msg-Id meanwhile, schedulers fetch again; every NATS client of that node reconnects to
another) and every process of another node's `llmbus serve` (its engine, input processors and
api server: the host dies), then restarts that serve a few seconds later, as a host's service
manager does. A request routed to the dead engine before the routers noticed (its stats fall
silent after 4 s) stays in the stream until that engine is back: its restarted scheduler
replays it, and the client waiting on a surviving node's api server gets its whole answer
(chosen over moving another engine's backlog, which no engine can take from a consumer it does
not own; without the restart, the api server ends such a request with a clear 503 and the
client retries).

Asserted:
  - the stream and each engine's consumer have 3 replicas;
  - zero accepted-and-lost: every request whose HTTP status line was 200 on an api server that
    was not killed completes in that same attempt (all max_tokens, [DONE]); a request accepted
    by the killed api server (its connection broke with the host) completes when the client
    sends it again; no request is refused with a 4xx;
  - every request started once the failures have settled (the restarted node healthy)
    completes at its first attempt, and the restarted engine announces itself again.
A refused connection (the dead api server) and a clear 503 are retried on the next node, as any
HTTP client of a multi-host deployment does; their counts are printed.

Needs root (network namespaces): otherwise it prints the reason and exits 77 (skipped).
Environment as tests/e2e/api_stack.py: LLMBUS_BUILD_DIR, LLMBUS_MODEL, LLMBUS_SOURCE_DIR."""
import json
import os
import shutil
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
REPLICAS = 3
KILL_AFTER_S = 5.0       # into the load
RESTART_AFTER_S = 3.0    # the dead host's serve comes back this long after the kill
SETTLE_S = 8.0           # at least, after the kills: reconnects done, elections over
AFTER_SETTLE_S = 12.0    # clients keep starting requests this long once settled
MAX_LOAD_S = 240.0
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
                # the durable requests stream on every node (ops/cluster/README.md)
                "--stream-replicas", str(REPLICAS)]
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

    def jsz(self, i):
        """Node i's JetStream view: {stream: {...}, consumers: {name: {...}}} of the requests stream."""
        r = sh("ip", "netns", "exec", ns(i), "curl", "-sf",
               "http://127.0.0.1:8222/jsz?accounts=1&streams=1&consumers=1&config=1", check=False)
        if r.returncode != 0:
            return None
        for acc in json.loads(r.stdout).get("account_details", []):
            for st in acc.get("stream_detail", []):
                if st.get("name") == "LLM_REQUESTS":
                    return dict(stream=st, consumers={c["name"]: c for c in st.get("consumer_detail") or []})
        return None

    def kill_host(self, i):
        """SIGKILLs every process in node i's namespace but its nats-server: serve and every actor
        at once, as when the host dies (SIGKILL of serve alone lets its children end cleanly)."""
        r = sh("ip", "netns", "pids", ns(i), check=False)
        keep = self.nats[i].pid
        for pid in (int(p) for p in r.stdout.split() if p.strip().isdigit()):
            if pid != keep:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
        self.serve[i].wait()

    def recoveries(self):
        """From the serve logs: publishes sent again through the election (count, longest wait in
        ms) and requests replayed from the stream (delivered more than once)."""
        waits, replayed = [], 0
        for i in range(1, NODES + 1):
            try:
                with open(os.path.join(self.tmp, f"serve{i}.log"), errors="replace") as f:
                    for line in f:
                        if "event=js_publish_retried" in line:
                            waits += [int(w[len("waited_ms="):]) for w in line.split() if w.startswith("waited_ms=")]
                        replayed += "event=request_replayed" in line
            except OSError:
                pass
        return len(waits), max(waits, default=0), replayed

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


def load_main(urls, stop_file, concurrency, max_tokens, model):
    """Runs inside the client namespace: streamed completions, round-robin over `urls`, until
    stop_file exists; prints one JSON summary. Each attempt records its node, outcome, whether
    it was accepted (the HTTP status line was 200) and its start/end (CLOCK_MONOTONIC, shared
    with the test's process)."""
    results = []
    lock = threading.Lock()
    t0 = time.monotonic()
    next_idx = [0]

    def attempt(url, body):
        """One try: (kind, accepted, detail); kind 'ok'|'refused'|'error'|'bad'|'truncated'."""
        req = urllib.request.Request(url + "/v1/completions", data=body, headers={"Content-Type": "application/json"})
        try:
            resp = urllib.request.urlopen(req, timeout=180)
        except urllib.error.HTTPError as e:
            detail = f"HTTP {e.code}: {e.read()[:200].decode(errors='replace')}"
            return ("error" if e.code in (429, 503) else "bad"), False, detail
        except OSError as e:
            return "refused", False, f"{type(e).__name__}"
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
                        return "error", True, f"SSE error event: {chunk['error'].get('message')}"
                    chunks += 1
                    for choice in chunk.get("choices", []):
                        finish = choice.get("finish_reason") or finish
        except (OSError, ValueError) as e:
            return "truncated", True, f"stream broken after {chunks} chunks: {type(e).__name__}"
        if done and finish == "length":  # ignore_eos: all of max_tokens came
            return "ok", True, ""
        return "truncated", True, f"ended after {chunks} chunks, finish_reason {finish}, [DONE] {'seen' if done else 'missing'}"

    def one(k):
        """A client of a multi-host deployment: a refused connection, a 503 / 429, an SSE error
        event or a broken stream is retried on the next node (as the OpenAI SDK retries)."""
        start = time.monotonic()
        body = json.dumps({"model": model, "prompt": f"Request {k}: list some colors.", "max_tokens": max_tokens,
                           "temperature": 0, "ignore_eos": True, "stream": True}).encode()
        history = []
        for a in range(len(urls) * 4):
            node = (k + a) % len(urls) + 1
            t_a = time.monotonic()
            kind, accepted, detail = attempt(urls[node - 1], body)
            history.append(dict(node=node, kind=kind, accepted=accepted, detail=detail, t0=t_a, t1=time.monotonic()))
            if kind in ("ok", "bad"):
                break
            time.sleep(0.2)
        return dict(k=k, start=start, ok=history[-1]["kind"] == "ok", history=history)

    def worker():
        while not os.path.exists(stop_file):
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


def check_replicas(c, failures):
    """The requests stream and every engine's consumer on all REPLICAS nodes; returns the node
    leading the stream."""
    deadline = time.monotonic() + 30
    while True:
        view = c.jsz(1)
        problems = []
        if not view:
            problems.append("node 1 shows no LLM_REQUESTS stream")
        else:
            st = view["stream"]
            if st["config"].get("num_replicas") != REPLICAS:
                problems.append(f"stream replicas {st['config'].get('num_replicas')}")
            if len((st.get("cluster") or {}).get("replicas") or []) != REPLICAS - 1:
                problems.append(f"stream peers {st.get('cluster')}")
            for eid in ("n1", "n2", "n3"):
                con = view["consumers"].get(f"engine_{eid}")
                peers = ((con or {}).get("cluster") or {}).get("replicas") or []
                if not con or len(peers) != REPLICAS - 1 or not con["cluster"].get("leader"):
                    problems.append(f"consumer engine_{eid}: {con and con.get('cluster')}")
        if not problems:
            leader = view["stream"]["cluster"]["leader"]
            print(f"ok   stream LLM_REQUESTS and consumers engine_n1..n3 on {REPLICAS} nodes; stream leader {leader}; "
                  "consumer leaders " + ", ".join(f"{n}: {c_['cluster']['leader']}" for n, c_ in
                                                  sorted(view["consumers"].items())))
            return int(leader[1:])
        if time.monotonic() > deadline:
            failures.append("replication: " + "; ".join(problems))
            return None
        time.sleep(1)


def backlog(c, node, consumer):
    """Messages of `consumer` not yet acknowledged (pending + delivered and held), seen from `node`."""
    view = c.jsz(node)
    con = view and view["consumers"].get(consumer)
    return (con.get("num_pending", 0) + con.get("num_ack_pending", 0)) if con else -1


def summarize(res, kill_t, settled_t, dead_api, failures):
    kinds = {}
    for r in res:
        for h in r["history"]:
            kinds[h["kind"]] = kinds.get(h["kind"], 0) + 1
    def broken_by_kill(h):  # accepted by the api server that died with its host, in flight then
        return h["node"] == dead_api and h["t0"] <= kill_t + 0.5 and h["t1"] >= kill_t - 0.5
    lost, by_dead_api, refused_4xx = [], [], []
    for r in res:
        acc = [h for h in r["history"] if h["accepted"]]
        if any(h["kind"] == "bad" for h in r["history"]):
            refused_4xx.append(r)
        if acc and acc[0]["kind"] != "ok":
            (by_dead_api if broken_by_kill(acc[0]) else lost).append(r)
        elif not r["ok"]:
            lost.append(r)
    after = [r for r in res if r["start"] > settled_t]
    bad_after = [r for r in after if len(r["history"]) != 1 or not r["ok"]]
    print(f"load: {len(res)} requests: completed={sum(r['ok'] for r in res)} accepted_and_lost={len(lost)} "
          f"accepted_by_the_killed_api_server={len(by_dead_api)} (each completed on retry: "
          f"{sum(r['ok'] for r in by_dead_api)}) refused_4xx={len(refused_4xx)} started_after_settle={len(after)}; "
          f"attempts by outcome {kinds} (refused = the node was gone, not accepted; error = a clear 503/429 or SSE "
          "error; truncated = an accepted stream that broke)")
    for r in res:
        if not r["ok"] or any(h["kind"] != "ok" for h in r["history"]):
            print(f"     request {r['k']} (started {r['start'] - kill_t:+.1f} s from the kill): " + "; ".join(
                f"n{h['node']} {h['kind']}" + (f" ({h['detail']})" if h["detail"] else "") for h in r["history"]))
    if lost:
        failures.append(f"{len(lost)} accepted requests lost: " + ", ".join(str(r["k"]) for r in lost))
    if refused_4xx:
        failures.append(f"{len(refused_4xx)} requests refused with a 4xx")
    not_retried = [r for r in by_dead_api if not r["ok"]]
    if not_retried:
        failures.append(f"{len(not_retried)} requests of the killed api server never completed on retry")
    if not after:
        failures.append("no request started after the failures settled: load too short to show recovery")
    if bad_after:
        failures.append(f"{len(bad_after)} requests started after the failures settled needed a retry or failed")


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
        leader = check_replicas(c, failures)
        assert leader, "no stream leader"
        host = leader % NODES + 1  # another node's host dies
        urls = [f"http://{SUBNET}.{i}:{HTTP_PORT}" for i in range(1, NODES + 1)]
        stop_file = os.path.join(c.tmp, "stop-load")
        cfg = dict(urls=urls, stop_file=stop_file, concurrency=CONCURRENCY, max_tokens=MAX_TOKENS,
                   model=os.path.basename(c.model)[: -len(".gguf")])
        load = subprocess.Popen(["ip", "netns", "exec", f"{TAG}c", sys.executable, os.path.abspath(__file__), "--load",
                                 json.dumps(cfg)], stdout=subprocess.PIPE, text=True)
        time.sleep(KILL_AFTER_S)
        kill_t = time.monotonic()
        c.kill(c.nats[leader])  # the stream's leader: its replicas elect another
        c.kill_host(host)       # engine, input processors and api server of another node
        print(f"ok   killed nats-server n{leader} (the stream leader) and every llmbus process of node {host} mid-load")
        time.sleep(RESTART_AFTER_S)
        alive = next(i for i in range(1, NODES + 1) if i != leader)
        waiting = backlog(c, alive, f"engine_n{host}")
        c.start_serve(host)
        pending_deadline = time.monotonic() + 120
        while time.monotonic() < pending_deadline:
            r = c.client("curl", "-sf", f"http://{SUBNET}.{host}:{HTTP_PORT}/health", timeout=10)
            if r.returncode == 0:
                break
            time.sleep(0.5)
        healthy_t = time.monotonic()
        settled_t = max(healthy_t, kill_t + SETTLE_S)
        print(f"ok   node {host}'s serve restarted, healthy {healthy_t - kill_t:.1f} s after the kill; "
              f"{waiting} requests of its engine waited in the stream for it (pending + held by the dead scheduler)")
        while time.monotonic() < settled_t + AFTER_SETTLE_S and time.monotonic() < kill_t + MAX_LOAD_S:
            time.sleep(0.5)
        open(stop_file, "w").close()
        out, _ = load.communicate(timeout=900)
        summary = json.loads(out)
        summarize(summary["results"], kill_t, settled_t, host, failures)
        left = {}
        drain_deadline = time.monotonic() + 30  # the last requests' acks
        while time.monotonic() < drain_deadline:
            left = {f"engine_n{i}": backlog(c, alive, f"engine_n{i}") for i in range(1, NODES + 1)}
            if not any(left.values()):
                break
            time.sleep(1)
        if any(left.values()):
            failures.append(f"requests left unserved in the stream after the load: {left}")
        else:
            print("ok   every engine's consumer drained: nothing left in the stream")
        n_retried, max_wait_ms, replayed = c.recoveries()
        print(f"     publishes sent again through the election: {n_retried} (longest {max_wait_ms} ms); "
              f"requests replayed from the stream: {replayed}")
        seen = c.engines_seen()
        if seen != {"n1", "n2", "n3"}:
            failures.append(f"engines announcing themselves after the restart: {seen}")
    except AssertionError as e:
        failures.append(str(e))
    finally:
        if failures:
            for i in range(1, NODES + 1):
                print(f"--- serve{i}.log ---\n{c.tail(f'serve{i}.log')}")
            print(f"logs kept in {c.tmp}")
        c.teardown()
        if not failures:
            shutil.rmtree(c.tmp, ignore_errors=True)
    for f in failures:
        print(f"FAIL {f}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
