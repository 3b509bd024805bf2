#!/usr/bin/env python3
"""Chaos: SIGKILL the actors of a running `llmbus serve` (and its nats-server) while clients
stream completions, and check what docs/design.md §6 promises: every request completes with
exactly the text of the fault-free run; a client never hangs and is never silently truncated.
The api server's own death breaks its TCP connections: a client sees a clear failure (the
stream ends without `data: [DONE]`, or the connection is refused or reset) and its retry
completes, with the fault-free text.

One run: the N requests (greedy and seeded, in turn; ignore_eos, so each is exactly
--max-tokens long) first without faults (the reference), then again while every victim
in --victims is killed --kills times, spread over the run by progress (kill k fires when
k/(K+1) of the requests have completed, plus --jitter-s of random delay), each kill while
requests are streaming and once work resumed after the previous kill (a token came since), so
that each kill's recovery is measured on its own. `llmbus serve` restarts each victim (nats-server on the same port,
JetStream store kept).

Printed: completed, token-identical to the reference, first-attempt errors by reason,
hangs (no byte for --hang-s), added latency p50/p99 (chaos minus reference, per request,
retries included), per kill the time to the next token any client received, and the
recovery of the requests it interrupted (those streaming when it fired): the time from the
kill to each one's next token, its median and max. With several engines (--serve-args
"--engines 16 --device sim") the victim `engine` kills every process of one engine at once
(scheduler, kv_manager, worker, output processor, encoder cache: the ones started with its
--engine-id); the next token of any client then says little (other engines go on), the
interrupted requests' recovery says how long that engine's work stopped.
Exit 0 when every request completed token-identical, no hang, and every error was a broken
connection while the api server was the victim; 1 otherwise; 77 when something to run it
is missing (api_stack.skip).

  tests/chaos/chaos.py                        # short form (make test): 40 requests, 1 kill each
  tests/chaos/chaos.py --requests 200 --kills 10 --jitter-s 2   # make chaos
  tests/chaos/chaos.py --serve-args "--device sim --engines 16" --victims engine,nats_server,input_processor
  tests/chaos/chaos.py --serve-args "--engines 2 --roles prefill,decode --disagg-min-prompt-tokens 0" \
      --victims scheduler@0,gpu_worker@0,scheduler@1,gpu_worker@1,output_processor@1   # one engine's actor
"""
import argparse
import http.client
import json
import os
import random
import shlex
import shutil
import signal
import sys
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "e2e"))
from api_stack import Stack, child_pids, http_get  # noqa: E402

PROGRAMS = {
    "input_processor": "llmbus-input-processor",
    "scheduler": "llmbus-scheduler",
    "kv_manager": "llmbus-kv-manager",
    "gpu_worker": "llmbus-gpu-worker",
    "encoder_cache": "llmbus-encoder-cache",
    "output_processor": "llmbus-output-processor",
    "api_server": "llmbus-api-server",
    "nats_server": "nats-server",
    "engine": None,  # every process of one engine (its --engine-id): engine_pids
}
ENGINE_PROGRAMS = ["llmbus-scheduler", "llmbus-kv-manager", "llmbus-gpu-worker", "llmbus-output-processor",
                   "llmbus-encoder-cache"]
PROMPTS = [
    "Tell me about the moon.", "Describe a forest at night.", "Explain how a bicycle works.",
    "Write about a rainy city.", "What is a lighthouse for?", "Name a few kinds of clouds.",
    "Describe the sea in winter.", "How do bees make honey?",
]
STALL_S = 10.0  # a kill followed by no token for this long is reported with its time
RESUME_GOAL_S = 2.0  # issue 13: work resumes within this long of each kill (reported)
RESUME_WAIT_S = 30.0  # the next kill waits at most this long for the previous one's next token
RETRY_FOR_S = 90.0  # a client keeps retrying a failed request this long
API_RESTART_S = 15.0  # connections refused this long after an api server kill are its doing



class Attempt:
    """One HTTP attempt: text, chunk arrival times, and how it ended."""

    def __init__(self):
        self.text, self.chunk_times, self.error, self.hang = "", [], None, False
        self.t_start = time.monotonic()
        self.t_end = None


def stream_once(port, body, hang_s, on_chunk):
    """POSTs a streamed completion; returns an Attempt. error: None (ended with [DONE]) or a
    reason: 'http <status>: <message>', 'sse error: <message>', 'truncated' (no [DONE]),
    'connection: <exception>'."""
    a = Attempt()
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=hang_s)
    try:
        conn.request("POST", "/v1/completions", body=body, headers={"Content-Type": "application/json"})
        r = conn.getresponse()
        if r.status != 200:
            try:
                msg = json.loads(r.read()).get("error", {}).get("message", "")
            except (ValueError, AttributeError, OSError, http.client.HTTPException):
                msg = ""
            a.error = f"http {r.status}: {msg}"
            return a
        done = False
        while True:
            line = r.readline()
            if not line:
                break
            line = line.strip()
            if not line.startswith(b"data: "):
                continue
            data = line[6:]
            if data == b"[DONE]":
                done = True
                break
            obj = json.loads(data)
            if "error" in obj:
                a.error = f"sse error: {obj['error'].get('message', '')}"
                continue
            for ch in obj.get("choices", []):
                if ch.get("text"):
                    a.text += ch["text"]
                    now = time.monotonic()
                    a.chunk_times.append(now)
                    on_chunk(now)
        if not done and a.error is None:
            a.error = "truncated"
    except TimeoutError:
        a.hang, a.error = True, "hang"
    except (OSError, http.client.HTTPException) as e:
        a.error = f"connection: {type(e).__name__}"
    finally:
        conn.close()
        a.t_end = time.monotonic()
    return a


class Run:
    """N requests at a fixed concurrency; optional kills as the run progresses."""

    def __init__(self, args, st, kills):
        self.args, self.st, self.kills = args, st, list(kills)
        self.lock = threading.Lock()
        self.next_index = 0
        self.completed = 0
        self.results = [None] * args.requests  # (attempts, t_start, t_end)
        self.last_chunk = 0.0
        self.kill_log = []  # (victim, pid, t_kill)
        self.in_flight = 0
        self.missed_kills = 0

    def body(self, i):
        req = {"model": self.st.model_name, "prompt": PROMPTS[i % len(PROMPTS)],
               "max_tokens": self.args.max_tokens, "ignore_eos": True, "stream": True}
        if i % 2:
            req.update(temperature=0.8, seed=1000 + i)
        else:
            req.update(temperature=0.0)
        return json.dumps(req).encode()

    def on_chunk(self, now):
        with self.lock:
            self.last_chunk = now
            for k in self.kill_log:
                if k["next_token_s"] is None and now > k["t"]:
                    k["next_token_s"] = now - k["t"]

    def client(self):
        while True:
            with self.lock:
                i = self.next_index
                if i >= self.args.requests:
                    return
                self.next_index += 1
                self.in_flight += 1
            t0 = time.monotonic()
            attempts = []
            while True:
                a = stream_once(self.st.port, self.body(i), self.args.hang_s, self.on_chunk)
                attempts.append(a)
                if a.error is None or a.hang or time.monotonic() - t0 > RETRY_FOR_S:
                    break
                time.sleep(0.2)
            with self.lock:
                self.results[i] = (attempts, t0, time.monotonic())
                self.completed += 1
                self.in_flight -= 1

    def killer(self):
        total = len(self.kills)
        for k, victim in enumerate(self.kills):
            threshold = k * self.args.requests // (total + 2)  # the first once tokens flow
            waited_from = time.monotonic()
            while True:
                with self.lock:
                    # each kill is measured on its own: the next one waits until work resumed
                    # after the previous one (a token came), or RESUME_WAIT_S passed (a stall,
                    # reported as such)
                    resumed = (not self.kill_log or self.kill_log[-1]["next_token_s"] is not None or
                               time.monotonic() - waited_from > RESUME_WAIT_S)
                    ready = (self.completed >= threshold and self.in_flight > 0 and self.last_chunk > 0
                             and resumed)
                    finished = self.completed >= self.args.requests
                if ready or finished:
                    break
                time.sleep(0.02)
            if finished:
                print(f"chaos: run ended before kill {k + 1}/{total} ({victim}): more --requests needed")
                self.missed_kills = total - k
                return
            time.sleep(random.uniform(0, self.args.jitter_s))
            pids = victim_pids(self.st.proc.pid, victim)
            if not pids:
                time.sleep(1.0)  # still restarting from an earlier kill
                pids = victim_pids(self.st.proc.pid, victim)
            if not pids:
                print(f"chaos: no {victim} process to kill")
                continue
            # the time before the kill: a client may see the broken connection before this
            # thread takes the lock, and its failure must still count as this kill's
            t_kill, wall = time.monotonic(), time.time()
            for pid in pids:
                os.kill(pid, signal.SIGKILL)
            pid = pids[0]
            with self.lock:
                self.kill_log.append({"victim": victim, "pid": pid, "t": t_kill, "wall": wall,
                                      "next_token_s": None, "in_flight": self.in_flight})

    def go(self):
        threads = [threading.Thread(target=self.client) for _ in range(self.args.concurrency)]
        if self.kills:
            threads.append(threading.Thread(target=self.killer))
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        return self


def program_of(pid):
    """The program name of process pid ("" when gone)."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return os.path.basename(f.read().split(b"\0")[0].decode(errors="replace"))
    except OSError:
        return ""


def engine_pids(parent):
    """{engine id: [pids]} of serve's per-engine processes, from their --engine-id argument."""
    out = {}
    for prog in ENGINE_PROGRAMS:
        for pid in child_pids(parent, prog):
            try:
                with open(f"/proc/{pid}/cmdline", "rb") as f:
                    argv = f.read().decode(errors="replace").split("\0")
            except OSError:
                continue
            eid = argv[argv.index("--engine-id") + 1] if "--engine-id" in argv[:-1] else "0"
            out.setdefault(eid, []).append(pid)
    return out


def victim_pids(parent, victim):
    """The pids one kill of `victim` takes: one process of its program, that program's process of
    one engine (`scheduler@1`: engine 1's), or all of one engine's."""
    if "@" in victim:
        name, eid = victim.split("@", 1)
        return [pid for pid in engine_pids(parent).get(eid, []) if program_of(pid) == PROGRAMS[name]]
    if victim != "engine":
        pids = child_pids(parent, PROGRAMS[victim])
        return [random.choice(pids)] if pids else []
    engines = engine_pids(parent)
    return engines[random.choice(sorted(engines))] if engines else []


def interrupted_recovery(chaos, kill):
    """Seconds from `kill` to the next token of each request that was streaming when it fired
    (its own next chunk, or its retry's first; None when it never got one)."""
    out = []
    for attempts, t0, t1 in chaos.results:
        if not (t0 <= kill["t"] <= t1):
            continue
        times = [c for a in attempts for c in a.chunk_times]
        if not any(c < kill["t"] for c in times):
            continue  # not streaming yet (waiting for its first token)
        after = [c for c in times if c > kill["t"]]
        out.append(after[0] - kill["t"] if after else None)
    return out


def percentile(xs, p):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(p / 100.0 * (len(xs) - 1))))] if xs else float("nan")


def report(args, ref, chaos):
    n = args.requests
    completed = identical = hangs = 0
    errors, bad = {}, []
    added = []
    if chaos.missed_kills:
        bad.append(f"{chaos.missed_kills} kills did not happen (the run ended first)")
    api_kills = [k["t"] for k in chaos.kill_log if k["victim"] == "api_server"]

    def api_died_around(a):  # a broken connection is the api server's death only then
        return any(a.t_start - API_RESTART_S <= t <= a.t_end for t in api_kills)
    for i in range(n):
        attempts, t0, t1 = chaos.results[i]
        last = attempts[-1]
        ref_attempts, r0, r1 = ref.results[i]
        hangs += sum(a.hang for a in attempts)
        for a in attempts:
            if a.error:
                errors[a.error] = errors.get(a.error, 0) + 1
                if not (api_died_around(a) and (a.error == "truncated" or a.error.startswith("connection:"))):
                    bad.append(f"request {i}: {a.error}")
        if last.error is None:
            completed += 1
            if last.text == ref_attempts[-1].text:
                identical += 1
            else:
                bad.append(f"request {i}: text differs from the fault-free run:\n  ref  {ref_attempts[-1].text!r}\n"
                           f"  got  {last.text!r}")
        else:
            bad.append(f"request {i}: did not complete ({last.error})")
        added.append((t1 - t0) - (r1 - r0))
    print(f"chaos: {n} requests (concurrency {args.concurrency}, {args.max_tokens} tokens, greedy and seeded), "
          f"kills: {len(chaos.kill_log)}")
    print(f"chaos: completed {completed}/{n}, token-identical {identical}/{n}, hangs {hangs}")
    for why, count in sorted(errors.items(), key=lambda kv: -kv[1]):
        print(f"chaos: first-attempt error x{count}: {why}")
    print(f"chaos: added latency p50 {percentile(added, 50):.2f} s, p99 {percentile(added, 99):.2f} s, "
          f"max {max(added):.2f} s")
    by_victim = {}
    for k in chaos.kill_log:
        by_victim.setdefault(k["victim"], []).append(k)
    for victim, ks in by_victim.items():
        shown = ", ".join(("none" if k["next_token_s"] is None else f"{k['next_token_s']:.2f}") +
                          f" ({k['in_flight']} in flight)" for k in ks)
        print(f"chaos: kill {victim} x{len(ks)}: next token after [{shown}] s")
        rec = []
        for k in ks:
            r = interrupted_recovery(chaos, k)
            got = sorted(x for x in r if x is not None)
            rec.append(f"{len(r)} interrupted, median {percentile(got, 50):.2f} max "
                       f"{max(got) if got else float('nan'):.2f}" + (f", {r.count(None)} never" if None in r else ""))
        print(f"chaos: kill {victim}: recovery of the requests it interrupted [{'; '.join(rec)}] s")
    if chaos.kill_log:
        # a kill with no request in flight (the last requests had just ended) has nothing to resume
        measured = [k for k in chaos.kill_log if k["in_flight"] > 0 or k["next_token_s"] is not None]
        slow = [k for k in measured if k["next_token_s"] is None or k["next_token_s"] > RESUME_GOAL_S]
        times = sorted(k["next_token_s"] for k in measured if k["next_token_s"] is not None)
        print(f"chaos: work resumed within {RESUME_GOAL_S:.0f} s of {len(measured) - len(slow)}/"
              f"{len(measured)} kills with requests in flight (kill -> next token p50 "
              f"{percentile(times, 50):.2f} s, p99 {percentile(times, 99):.2f} s, max "
              f"{max(times) if times else float('nan'):.2f} s)" +
              (": slower after " + ", ".join(f"{k['victim']}" for k in slow) if slow else ""))
    for k in chaos.kill_log:  # a long gap is worth reading in the serve log: say when it began
        if k["next_token_s"] is None or k["next_token_s"] > STALL_S:
            gap = "no token after it" if k["next_token_s"] is None else f"next token {k['next_token_s']:.1f} s later"
            print(f"chaos: stall: kill of {k['victim']} (pid {k['pid']}) at "
                  f"{time.strftime('%H:%M:%S', time.gmtime(k['wall']))}.{int(k['wall'] % 1 * 1000):03d} UTC, {gap}")
    for line in bad[:20]:
        print(f"FAIL {line}")
    if len(bad) > 20:
        print(f"FAIL ... {len(bad) - 20} more")
    return 0 if not bad and completed == n and identical == n and hangs == 0 else 1


# Log events of the engine's recoveries, counted in the serve log after the run.
EVENTS = ["child_exited", "peer_failure_detected", "engine_recovered", "request_replayed",
          "request_dead_lettered", "resync_asked", "request_resynced", "generate_resent",
          "bus_reconnected", "stale_reply_dropped"]


def log_events(st):
    counts = dict.fromkeys(EVENTS, 0)
    st.log.flush()
    with open(st.log.name, errors="replace") as f:
        for line in f:
            for ev in EVENTS:
                if f"event={ev} " in line:
                    counts[ev] += 1
    return counts


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--requests", type=int, default=40)
    ap.add_argument("--concurrency", type=int, default=8)
    ap.add_argument("--max-tokens", type=int, default=24)
    ap.add_argument("--kills", type=int, default=1, help="kills per victim")
    ap.add_argument("--victims", default=",".join(v for v in PROGRAMS if v != "engine"),
                    help="comma-separated, of: " + ", ".join(PROGRAMS) + " (default: all but engine); an "
                    "engine's actor as NAME@EID (scheduler@0: engine 0's scheduler)")
    ap.add_argument("--jitter-s", type=float, default=0.3, help="random delay before each kill, at most")
    ap.add_argument("--hang-s", type=float, default=120.0, help="no byte for this long is a hang")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--heartbeat-ms", type=int, default=500)
    ap.add_argument("--no-nats-auth", action="store_true", help="run serve without NATS accounts")
    ap.add_argument("--serve-args", default="", help="more `llmbus serve` flags, e.g. \"--device sim --engines 16\"")
    ap.add_argument("--keep-log", action="store_true",
                    help="keep the whole serve log even when the run passes (for reading a stall)")
    args = ap.parse_args()
    random.seed(args.seed)
    victims = [v for v in args.victims.split(",") if v]
    for v in victims:
        name = v.split("@", 1)[0]
        if name not in PROGRAMS or ("@" in v and PROGRAMS[name] not in ENGINE_PROGRAMS):
            ap.error(f"unknown victim {v}")
    kills = victims * args.kills
    random.shuffle(kills)
    # With serve's NATS accounts, as users run it: a restarted nats-server forgets the reply
    # mappings of its service imports, which the api server survives by sending its requests
    # in flight again (api_server_resend_after_reconnect).
    stack_args = (["--heartbeat-ms", str(args.heartbeat_ms)] + (["--no-nats-auth"] if args.no_nats_auth else []) +
                  shlex.split(args.serve_args))
    with Stack(args=stack_args) as st:
        if st.proc is None:
            print("chaos: needs a stack of its own (LLMBUS_API_BASE is set)")
            return 1
        t0 = time.monotonic()
        ref = Run(args, st, []).go()
        for i, (attempts, _, _) in enumerate(ref.results):
            if attempts[-1].error or len(attempts) > 1:
                st.fail(f"fault-free request {i}: {attempts[-1].error or 'needed a retry'}")
        print(f"chaos: fault-free run {time.monotonic() - t0:.1f} s")
        t1 = time.monotonic()
        chaos = Run(args, st, kills).go()
        print(f"chaos: run with kills {time.monotonic() - t1:.1f} s")
        rc = report(args, ref, chaos)
        print("chaos: serve log events: " + ", ".join(f"{k}={v}" for k, v in log_events(st).items()))
        for _ in range(50):  # the last kill may have hit the api server: give it its restart
            status, _ = http_get(st.base + "/health", timeout=5)
            if status == 200:
                break
            time.sleep(0.2)
        print(f"chaos: /health after the run: {status}")
        if rc:
            print(f"--- serve log (tail) ---\n{st.tail(60)}")
        if rc or args.keep_log:
            keep = os.environ.get("LLMBUS_CHAOS_LOG_DIR", os.getcwd())
            dest = os.path.join(keep, f"chaos-serve-{int(time.time())}.log")
            try:
                st.log.flush()
                shutil.copyfile(st.log.name, dest)
                print(f"chaos: the whole serve log is kept in {dest}")
            except OSError as e:
                print(f"chaos: could not keep the serve log: {e}")
        return rc


if __name__ == "__main__":
    sys.exit(main())
