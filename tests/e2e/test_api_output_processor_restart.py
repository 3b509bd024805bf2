"""A request that finishes while its output processor is down still reaches its client, whole.

The engine's outputs go to the output processor by plain publish: while it is dead they are
lost. A request still running when the new one starts is rebuilt from the scheduler's history
(the resync); one that finished in the gap would leave its client waiting for the api server's
60 s first-output timeout and a 503. The api server sees the new output processor in the
heartbeats and sends such a request again (seeded, so the same tokens; api_server_delta forwards only
what the client lacks): the stream ends with exactly the text of the fault-free run.

Made deterministic: `llmbus serve` is frozen (SIGSTOP) while its output processor is killed, so
nothing restarts it until the engine has finished the request (the engine's running gauge in
/metrics says 0); then serve goes on (SIGCONT) and restarts it."""
import os
import signal
import sys
import threading
import time

from api_stack import Stack, child_pid, metric, metrics, skip

try:
    import openai
except ImportError:
    skip("the openai package is missing (make venv)")

PROMPT = "Write a long story about a lighthouse keeper."
MAX_TOKENS = 96
CHUNKS_BEFORE_KILL = 8
HEARTBEAT_MS = 200
ENGINE_DONE_LIMIT_S = 120.0



def engine_running(st):
    return metric(metrics(st.base), "llmbus:num_requests_running_engine")


def main():
    # SchedulerStats every 100 ms while there is work: the engine's running gauge in /metrics
    # is at most that old (at the default 1 s it could still say 0 for a request already
    # streaming, and the output processor was killed while the request still ran)
    with Stack(args=["--heartbeat-ms", str(HEARTBEAT_MS), "--stats-interval-ms", "100"]) as st:
        if st.proc is None:
            skip("needs a stack of its own (LLMBUS_API_BASE is set)")
        client = openai.OpenAI(base_url=st.base + "/v1", api_key="unused", max_retries=0, timeout=300)
        for kw in (dict(temperature=0), dict(temperature=0.9)):  # greedy, then sampled (api-drawn seed)
            kw.update(model=st.model_name, prompt=PROMPT, max_tokens=MAX_TOKENS, extra_body={"ignore_eos": True})
            if kw["temperature"] == 0:
                reference = client.completions.create(**kw).choices[0].text
            got, errors, chunks = [], [], threading.Event()

            def stream():
                try:
                    for n, ch in enumerate(client.completions.create(stream=True, **kw)):
                        if ch.choices:
                            got.append(ch.choices[0].text)
                        if n + 1 >= CHUNKS_BEFORE_KILL:
                            chunks.set()
                except Exception as e:  # reported below
                    errors.append(repr(e))
                chunks.set()

            t = threading.Thread(target=stream)
            t.start()
            assert chunks.wait(120), "no stream chunks"
            seen = time.monotonic() + 5.0  # the gauge catches up with the running request
            while time.monotonic() < seen and not engine_running(st):
                time.sleep(0.05)
            op = child_pid(st.proc.pid, "llmbus-output-processor")
            assert op, "no llmbus-output-processor child of llmbus serve"
            os.kill(st.proc.pid, signal.SIGSTOP)  # nothing restarts the output processor now
            try:
                os.kill(op, signal.SIGKILL)
                limit = time.monotonic() + ENGINE_DONE_LIMIT_S
                while time.monotonic() < limit:
                    running = engine_running(st)
                    if running == 0:
                        break
                    time.sleep(0.1)
                assert engine_running(st) == 0, "the engine did not finish the request"
            finally:
                os.kill(st.proc.pid, signal.SIGCONT)
            t_go = time.monotonic()
            t.join(300)
            took = time.monotonic() - t_go
            text = "".join(got)
            print(f"temperature {kw['temperature']}: stream ended {took:.1f} s after serve went on; "
                  f"{len(text)} characters, errors {errors}")
            if errors:
                st.fail(f"the stream failed: {errors}")
            if kw["temperature"] == 0 and text != reference:
                st.fail(f"text differs from the fault-free run:\n{text!r}\nvs\n{reference!r}")
            if len(got) < MAX_TOKENS // 2:
                st.fail(f"the stream is short: {len(got)} chunks")
        st.log.flush()
        with open(st.log.name, errors="replace") as f:
            resent = sum("event=generate_resent" in ln and "reason=output_processor_restarted" in ln for ln in f)
        print(f"requests sent again after the output processor restart: {resent}")
        if resent < 2:
            st.fail("the api server did not send the requests again after the restart")
    print("ok")


if __name__ == "__main__":
    sys.exit(main())
