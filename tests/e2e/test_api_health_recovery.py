"""/health while the engine recovers from a gpu_worker failure: `llmbus serve` (heartbeats every
200 ms) serves a greedy streaming completion. First the worker is frozen (SIGSTOP) for 2 s
mid-stream: /health must answer 503 naming the reason (the worker's heartbeats are missing,
the scheduler recovering) while it is silent, then 200 again. Then it is SIGKILLed mid-stream
(the supervisor restarts it): /health must be 200 again soon. Both streams must end with
exactly the text of the fault-free run."""
import os
import signal
import sys
import threading
import time

from api_stack import Stack, child_pid, http_get, skip

try:
    import openai
except ImportError:
    skip("the openai package is missing (make venv)")

PROMPT = "Write a long story about a lighthouse keeper."
MAX_TOKENS = 96
CHUNKS_BEFORE_KILL = 8
RECOVERY_LIMIT_S = 30.0
HEARTBEAT_MS = 200
FREEZE_S = 2.0  # > 3 heartbeats: the scheduler and the api server both see the worker silent



def watch_health(st, fault, limit_s=RECOVERY_LIMIT_S):
    """Applies fault() and polls /health until it answered 503 and then 200 again (or limit_s).
    Returns (seconds to the first 503 or None, seconds to 200 after it or None, 503 bodies)."""
    fault()
    t0 = time.monotonic()
    first_503, reasons, back_s = None, set(), None
    while time.monotonic() - t0 < limit_s:
        status, body = http_get(st.base + "/health", timeout=2)
        now = time.monotonic() - t0
        if status == 503:
            first_503 = first_503 if first_503 is not None else now
            reasons.add(body.decode(errors="replace"))
        elif status == 200 and first_503 is not None:
            back_s = now
            break
        time.sleep(0.01)
    return first_503, back_s, reasons


def streamed_across(st, client, kw, fault):
    """Streams one completion, runs fault() after CHUNKS_BEFORE_KILL chunks; returns (text,
    stream errors, what fault() returned)."""
    got, chunks, errors = [], threading.Event(), []

    def stream():
        try:
            for n, ch in enumerate(client.completions.create(stream=True, **kw)):
                if ch.choices:
                    got.append(ch.choices[0].text)
                if n + 1 >= CHUNKS_BEFORE_KILL:
                    chunks.set()
        except Exception as e:  # reported by the caller
            errors.append(repr(e))
        chunks.set()

    t = threading.Thread(target=stream)
    t.start()
    assert chunks.wait(120), "no stream chunks"
    assert not errors, errors
    out = fault()
    t.join(300)
    return "".join(got), errors, out


def main():
    with Stack(args=["--heartbeat-ms", str(HEARTBEAT_MS)]) as st:
        if st.proc is None:
            skip("needs a stack of its own (LLMBUS_API_BASE is set)")
        client = openai.OpenAI(base_url=st.base + "/v1", api_key="unused", max_retries=0, timeout=300)
        kw = dict(model=st.model_name, prompt=PROMPT, max_tokens=MAX_TOKENS, temperature=0,
                  extra_body={"ignore_eos": True})
        r = client.completions.create(**kw)
        assert r.usage.completion_tokens == MAX_TOKENS, r.usage  # the faults land mid-generation
        reference = r.choices[0].text
        ok = True

        def worker():
            pid = child_pid(st.proc.pid, "llmbus-gpu-worker")
            assert pid, "no llmbus-gpu-worker child of llmbus serve"
            return pid

        # 1. frozen worker (alive, silent): 503 with the reason while it is silent, then 200
        def freeze():
            pid = worker()
            os.kill(pid, signal.SIGSTOP)
            threading.Timer(FREEZE_S, os.kill, (pid, signal.SIGCONT)).start()

        text, errors, (first_503, back_s, reasons) = streamed_across(
            st, client, kw, lambda: watch_health(st, freeze))
        print(f"frozen worker: /health 503 after {first_503} s, 200 again after {back_s} s; "
              f"reasons: {sorted(reasons)}")
        if errors or text != reference:
            print(f"FAIL frozen worker: stream errors {errors}, text\n{text!r}\nvs\n{reference!r}")
            ok = False
        if first_503 is None or back_s is None or back_s < FREEZE_S:
            print("FAIL /health did not answer 503 while the worker was silent, then 200")
            ok = False
        if not any("gpu_worker" in r or "recovering" in r for r in reasons):
            print(f"FAIL no 503 names the reason: {reasons}")
            ok = False

        # 2. killed worker (restarted by serve): the same text; /health 200 again soon (a 503
        # shows only when the restart outlasts the missed beats or the recovery a beat)
        def kill():
            os.kill(worker(), signal.SIGKILL)
            t0 = time.monotonic()
            while time.monotonic() - t0 < RECOVERY_LIMIT_S:
                status, body = http_get(st.base + "/health", timeout=2)
                if status == 503:
                    print(f"killed worker: /health 503 at {time.monotonic() - t0:.3f} s: {body.decode()}")
                time.sleep(0.02)
                if time.monotonic() - t0 > 2 and status == 200:
                    return True
            return False

        text, errors, healthy = streamed_across(st, client, kw, kill)
        if errors or text != reference:
            print(f"FAIL killed worker: stream errors {errors}, text\n{text!r}\nvs\n{reference!r}")
            ok = False
        if not healthy:
            print("FAIL /health not 200 again after the killed worker's restart")
            ok = False
        if not ok:
            print(st.tail(60))
            sys.exit(1)
        print("PASS health_reports_a_silent_worker_then_ok, streams_are_intact_across_freeze_and_kill")


if __name__ == "__main__":
    main()
