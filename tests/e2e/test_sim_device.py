"""`llmbus serve --device sim`: every actor real, only the forward simulated
(actors/gpu_worker/runner_sim.h).

- Two sim engines behind the input processors: a seeded request sent twice comes back
  token-identical, another seed gives other tokens, a greedy one ignores its seed; every
  request runs to max_tokens (the sim never draws an end-of-generation token); both engines
  took requests and `llmbus status` lists every actor of both.
- A step lasts at least its cost model's time (a --sim-cost file with 25 ms a step; a lower
  bound, which load cannot break) and spends it asleep: the workers' CPU time is a small part
  of the wall time they modelled.
- Preemption: one engine with KV blocks for about three requests gets eight at once; the
  scheduler preempts (status counts it) and every request's tokens equal its tokens alone.
- What needs logits (logprobs) is a 400 naming the sim, not made-up values.
- An engine in a long step (6 s, by its model) still publishes its stats: routers would take a
  silent engine for gone.
"""
import concurrent.futures
import json
import os
import subprocess
import sys
import tempfile
import time
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from api_stack import Stack, child_pids, run_cases  # noqa: E402

MAX_TOKENS = 24


def generate(stack, prompt, seed, temperature=1.0, max_tokens=MAX_TOKENS):
    """Token ids and finish reason of one request through `llmbus generate --json`."""
    url, _, _ = stack.nats_login()
    out = subprocess.run(
        [stack.llmbus, "generate", "--nats", url, "--json", "--raw", "--max-tokens", str(max_tokens),
         "--temperature", str(temperature), "--seed", str(seed), prompt],
        capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, f"generate failed: {out.stderr}"
    lines = [json.loads(line) for line in out.stdout.splitlines() if line.startswith("{")]
    assert lines and lines[-1]["finished"], out.stdout
    ids = [t for line in lines for t in line["outputs"][0]["token_ids"]]
    return ids, lines[-1]["outputs"][0]["finish_reason"]


def status(stack):
    url, _, _ = stack.nats_login()
    out = subprocess.run([stack.llmbus, "status", "--nats", url, "--json", "--wait-ms", "2500"],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def cpu_seconds(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def nats_login_no_auth(self, user="tenant-default"):
    """--no-nats-auth: the URL alone."""
    import re
    with open(self.log.name, errors="replace") as f:
        url = re.search(r"event=nats_ready url=(\S+)", f.read())
    assert url, "serve logged no nats_ready line"
    return url.group(1), None, None


Stack.nats_login = nats_login_no_auth


def check_two_engines(cost_path):
    with Stack(args=["--no-nats-auth", "--device", "sim", "--engines", "2", "--sim-cost", cost_path,
                     "--router", "random"]) as stack:
        workers = child_pids(stack.proc.pid, "llmbus-gpu-worker")
        assert len(workers) == 2, f"{len(workers)} sim workers"
        cpu0 = sum(cpu_seconds(p) for p in workers)
        t0 = time.monotonic()
        a1, fin = generate(stack, "The bus goes", seed=11)
        assert fin == "length" and len(a1) == MAX_TOKENS, (fin, len(a1))
        elapsed = time.monotonic() - t0
        # 24 steps of at least 25 ms each: the wait is real, whatever the machine's load
        assert elapsed >= MAX_TOKENS * 0.025, f"{MAX_TOKENS} tokens in {elapsed:.3f} s"
        a2, _ = generate(stack, "The bus goes", seed=11)
        assert a1 == a2, f"replay differs:\n{a1}\n{a2}"
        b, _ = generate(stack, "The bus goes", seed=12)
        assert b != a1, "another seed gave the same tokens"
        g1, _ = generate(stack, "The bus goes", seed=1, temperature=0)
        g2, _ = generate(stack, "The bus goes", seed=2, temperature=0)
        assert g1 == g2, "greedy tokens depend on the seed"
        # spread over both engines (random routing): 8 more requests
        with concurrent.futures.ThreadPoolExecutor(8) as pool:
            outs = list(pool.map(lambda s: generate(stack, f"prompt {s}", seed=s), range(8)))
        assert all(f == "length" and len(ids) == MAX_TOKENS for ids, f in outs)
        busy = time.monotonic() - t0
        cpu = sum(cpu_seconds(p) for p in workers) - cpu0
        # the workers slept through the modelled time: their CPU is a small part of it
        assert cpu < 0.25 * busy, f"sim workers used {cpu:.2f} s of CPU in {busy:.2f} s"
        st = status(stack)
        engines = {e["engine_id"]: e for e in st["engines"]}
        assert set(engines) == {"0", "1"}, engines
        assert all(e["generation_tokens_total"] > 0 for e in engines.values()), engines
        actors = {(a["engine_id"], a["actor"]) for a in st["actors"]}
        for eid in ("0", "1"):
            for actor in ("scheduler", "kv_manager", "gpu_worker", "output_processor"):
                assert (eid, actor) in actors, f"{actor} of engine {eid} missing: {sorted(actors)}"
        # logprobs need logits: a clear 400
        req = urllib.request.Request(stack.base + "/v1/completions", method="POST",
                                     headers={"Content-Type": "application/json"},
                                     data=json.dumps({"model": stack.model_name, "prompt": "Hi",
                                                      "max_tokens": 4, "logprobs": 1}).encode())
        try:
            urllib.request.urlopen(req, timeout=60)
            raise AssertionError("logprobs on a sim worker answered 200")
        except urllib.error.HTTPError as e:
            body = e.read().decode()
            assert e.code == 400 and "sim" in body, (e.code, body)


def check_preemption_replays():
    args = ["--no-nats-auth", "--device", "sim", "--num-blocks", "16", "--block-size", "16",
            "--max-num-batched-tokens", "64"]
    with Stack(args=args) as stack:
        prompts = [f"request number {i} asks for something" for i in range(8)]
        alone = [generate(stack, p, seed=100 + i, max_tokens=64)[0] for i, p in enumerate(prompts)]
        with concurrent.futures.ThreadPoolExecutor(8) as pool:
            together = list(pool.map(lambda i: generate(stack, prompts[i], seed=100 + i, max_tokens=64)[0],
                                     range(8)))
        assert together == alone, "a preempted request's tokens changed"
        pre = sum(e["num_preemptions"] for e in status(stack)["engines"])
        assert pre > 0, "no preemption happened: the check proved nothing"


def check_long_step_keeps_announcing():
    """A step of 6 s (the sim's model says so): the scheduler still publishes its stats while it
    waits for the worker, so `llmbus status` hears the engine in a window well inside the step
    (before, the stats stopped for the step and the routers dropped the engine after 4 s)."""
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        json.dump({"name": "6 s a step", "fixed_s": 6.0, "token_s": 0, "sampled_row_s": 0, "attention_s": 0}, f)
        slow = f.name
    try:
        with Stack(args=["--no-nats-auth", "--device", "sim", "--sim-cost", slow]) as stack:
            with concurrent.futures.ThreadPoolExecutor(1) as pool:
                fut = pool.submit(generate, stack, "one long step", 5, 0.0, 1)
                time.sleep(1.5)  # the step began; the stats before it are over a second old
                t0 = time.monotonic()
                st = status(stack)  # hears stats for 2.5 s: well inside the 6 s step
                heard = time.monotonic() - t0
                ids, fin = fut.result(timeout=120)
            assert fin == "length" and len(ids) == 1, (fin, ids)
            assert [e["engine_id"] for e in st["engines"]] == ["0"], \
                f"no stats from the engine in {heard:.1f} s of its 6 s step: {st['engines']}"
    finally:
        os.unlink(slow)


def main():
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        json.dump({"name": "25 ms a step", "fixed_s": 0.025, "token_s": 0, "sampled_row_s": 0,
                   "attention_s": 0}, f)
        cost_path = f.name
    try:
        failures = run_cases([
            ("two sim engines: replays token-identical, waits asleep, every actor real",
             lambda: check_two_engines(cost_path)),
            ("preempted requests get the tokens they get alone", check_preemption_replays),
            ("an engine in a 6 s step still announces itself", check_long_step_keeps_announcing),
        ])
    finally:
        os.unlink(cost_path)
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
