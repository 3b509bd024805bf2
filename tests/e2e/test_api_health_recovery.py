"""/health while the engine recovers from a killed gpu_worker: `llmbus serve` (heartbeats every
200 ms) serves a greedy streaming completion; the worker is SIGKILLed mid-stream (the
supervisor restarts it). /health must answer 503 naming the reason while the engine recovers
(the scheduler's heartbeat says not ready, or the worker's heartbeats are missing), then 200
again, and the stream must end with exactly the text of the fault-free run."""
import os
import signal
import sys
import threading
import time

from api_stack import Stack, http_get, skip

try:
    import openai
except ImportError:
    skip("the openai package is missing (make venv)")

PROMPT = "Write a long story about a lighthouse keeper."
MAX_TOKENS = 96
CHUNKS_BEFORE_KILL = 8
RECOVERY_LIMIT_S = 30.0


def child_pid(parent, program):
    """The pid of `program` among `parent`'s children (from /proc), or None."""
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            with open(f"/proc/{name}/cmdline", "rb") as f:
                argv0 = f.read().split(b"\0", 1)[0].decode(errors="replace")
        except (OSError, ValueError, IndexError):
            continue
        if ppid == parent and os.path.basename(argv0) == program:
            return int(name)
    return None


def main():
    with Stack(args=["--heartbeat-ms", "200"]) as st:
        if st.proc is None:
            skip("needs a stack of its own (LLMBUS_API_BASE is set)")
        client = openai.OpenAI(base_url=st.base + "/v1", api_key="unused", max_retries=0, timeout=300)
        kw = dict(model=st.model_name, prompt=PROMPT, max_tokens=MAX_TOKENS, temperature=0)
        reference = client.completions.create(**kw).choices[0].text

        got, chunks, errors = [], threading.Event(), []

        def stream():
            try:
                for n, ch in enumerate(client.completions.create(stream=True, **kw)):
                    if ch.choices:
                        got.append(ch.choices[0].text)
                    if n + 1 >= CHUNKS_BEFORE_KILL:
                        chunks.set()
            except Exception as e:  # reported by the main thread
                errors.append(repr(e))
            chunks.set()

        t = threading.Thread(target=stream)
        t.start()
        assert chunks.wait(120), "no stream chunks"
        assert not errors, errors
        pid = child_pid(st.proc.pid, "llmbus-gpu-worker")
        assert pid, "no llmbus-gpu-worker child of llmbus serve"
        os.kill(pid, signal.SIGKILL)
        t_kill = time.monotonic()
        first_503, reasons, back_s = None, set(), None
        while time.monotonic() - t_kill < RECOVERY_LIMIT_S:
            status, body = http_get(st.base + "/health", timeout=2)
            now = time.monotonic() - t_kill
            if status == 503:
                first_503 = first_503 if first_503 is not None else now
                reasons.add(body.decode(errors="replace"))
            elif status == 200 and first_503 is not None:
                back_s = now
                break
            time.sleep(0.01)
        t.join(300)
        print(f"/health: 503 after {first_503} s, 200 again after {back_s} s; reasons: {sorted(reasons)}")
        ok = True
        if errors:
            print(f"FAIL stream: {errors}")
            ok = False
        if "".join(got) != reference:
            print(f"FAIL text after the kill differs:\n{''.join(got)!r}\nvs\n{reference!r}")
            ok = False
        if first_503 is None or back_s is None:
            print("FAIL /health did not go 503 and back to 200 around the kill")
            ok = False
        if not any("recovering" in r or "gpu_worker" in r for r in reasons):
            print(f"FAIL no 503 names the reason: {reasons}")
            ok = False
        if not ok:
            print(st.tail(60))
            sys.exit(1)
        print("PASS health_reports_recovery_then_ok_and_stream_is_intact")


if __name__ == "__main__":
    main()
