"""The Python client package (clients/python), installed with pip into the test venv as a user
installs it, against a live `llmbus serve` with the default model: generate (cumulative and
delta agree), tokenize / detokenize, abort when the consuming task is cancelled (before and
after the first output), errors carrying ErrorInfo (field, retry_after), status, the
connection file, and no responders.

usage: test_python_package.py            (ctest: LLMBUS_BUILD_DIR, LLMBUS_SOURCE_DIR, LLMBUS_MODEL)
Exit codes: 0 pass, 1 fail, 77 skipped (no venv package, binary or model; the reason is printed).
"""
import asyncio
import json
import os
import re
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "e2e"))
import api_stack  # noqa: E402

try:
    import flatbuffers
    import llmbus
    import llmbus.GenerateRequest  # noqa: F401 - the generated code is inside the package
    from llmbus.types import SamplingParams
except ImportError as exc:
    api_stack.skip(f"the llmbus client package is not installed in this Python ({exc}); "
                   "make venv installs it (pip install ./clients/python)")

GREEDY = dict(temperature=0.0, max_tokens=8)


def check(cond, what):
    if not cond:
        raise AssertionError(what)


def installed_like_a_user():
    """The package comes from site-packages (pip), not from the build tree or the checkout, and
    runs on the current flatbuffers runtime (the 2.0.x pin is gone)."""
    where = os.path.dirname(llmbus.__file__)
    check("site-packages" in where, f"llmbus imported from {where}, not from an installed package")
    check(os.path.exists(os.path.join(where, "RequestOutput.py")), "no generated modules in the package")
    major = int(flatbuffers.__version__.split(".")[0]) if hasattr(flatbuffers, "__version__") else 0
    check(major >= 23, f"flatbuffers runtime {getattr(flatbuffers, '__version__', '?')} is not current")


async def generate_cumulative_and_delta_agree(c):
    outs = [o async for o in c.generate("The capital of France is", **GREEDY)]
    last = outs[-1]
    check(last.finished and all(not o.finished for o in outs[:-1]), "only the last output is finished")
    comp = last.outputs[0]
    check(len(comp.token_ids) == 8 and comp.finish_reason == "length",
          f"8 tokens ending in length, got {len(comp.token_ids)} / {comp.finish_reason}")
    check(last.prompt_token_ids, "prompt_token_ids are reported")
    check(last.request_id and "@" in last.request_id, f"engine request id, got {last.request_id!r}")
    check(last.metrics is not None and last.metrics.num_generation_tokens == 8, "metrics count 8 tokens")
    text, ids = "", []
    async for o in c.generate("The capital of France is", output_kind="delta", **GREEDY):
        text += o.outputs[0].text
        ids += o.outputs[0].token_ids
    check(ids == comp.token_ids and text == comp.text,
          f"delta pieces add up to the cumulative output: {text!r} vs {comp.text!r}")
    chat = [o async for o in c.generate(messages=[{"role": "user", "content": "Say hi."}], **GREEDY)]
    check(chat[-1].outputs[0].token_ids, "a chat request (messages) generates")


async def tokenize_and_detokenize(c):
    ids = await c.tokenize("Hello world")
    check(ids == [19556, 905], f"tokenize 'Hello world' -> [19556, 905], got {ids}")
    text = await c.detokenize(ids)
    check(text == "Hello world", f"detokenize gives the text back, got {text!r}")
    chat_ids = await c.tokenize(messages=[{"role": "user", "content": "Hi"}])
    check(len(chat_ids) > len(await c.tokenize("Hi")), "messages are templated before tokenizing")
    check(await c.max_model_len() > 0, "max_model_len is reported")


def aborted_requests(metrics_base):
    """llmbus:request_success_total{finished_reason="abort"} summed over the actors' metrics ports."""
    total = 0.0
    for port in range(metrics_base, metrics_base + 10):
        status, _ = api_stack.http_get(f"http://127.0.0.1:{port}/metrics", timeout=2)
        if status == 200:
            v = api_stack.metric(api_stack.metrics(f"http://127.0.0.1:{port}"), "llmbus:request_success_total",
                                 finished_reason="abort")
            total += v or 0.0
    return total


async def abort_on_cancel(c, stack, metrics_base, after_first_output):
    """Cancelling the task that consumes generate() sends AbortRequest: the engine finishes that
    request with finish_reason abort (its output processor counts it) long before its 2000
    tokens could have been generated."""
    before = aborted_requests(metrics_base)
    seen = {}

    async def consume():
        async for o in c.generate("Count: 1, 2, 3,", temperature=0.0, max_tokens=2000, ignore_eos=True):
            seen["id"] = o.request_id

    task = asyncio.ensure_future(consume())
    if after_first_output:
        while "id" not in seen:
            check(not task.done(), "generation ended before its first output")
            await asyncio.sleep(0.02)
    else:
        await asyncio.sleep(0)  # the request is on its way, no output yet
    task.cancel()
    try:
        await task
    except asyncio.CancelledError:
        pass
    if not after_first_output:
        check("id" not in seen, "cancelled before any output, yet one arrived")
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if aborted_requests(metrics_base) >= before + 1:
            return
        await asyncio.sleep(0.25)
    raise AssertionError(f"the engine counted no aborted request:\n{stack.tail()}")


async def errors_carry_error_info(c):
    try:
        async for _ in c.generate("Hi", temperature=-1.0, max_tokens=4):
            pass
    except llmbus.RequestError as e:
        check(e.status == "INVALID_ARGUMENT" and e.field and "temperature" in e.field,
              f"a bad temperature names its field: {e!r} field={e.field}")
        check(e.retry_after is None, "a bad argument has no retry_after")
    else:
        raise AssertionError("temperature -1 was accepted")


async def rate_limit_has_retry_after(url, login_dir):
    """Tenant `slow` (tokens_per_s=1, burst 64): a 40-token request (41 with its prompt) passes,
    and by the third one (`serve` runs two input processors, each with its own bucket) one is
    refused with QUEUE_FULL and a retry_after from the token bucket."""
    async with llmbus.Client(url, user="tenant-slow",
                             password_file=os.path.join(login_dir, "tenant-slow.password")) as c:
        check(c.tenant == "slow", f"tenant from the user name, got {c.tenant}")
        for attempt in range(3):
            try:
                async for _ in c.generate("Hi", temperature=0.0, max_tokens=40):
                    pass
            except llmbus.RateLimitError as e:
                check(attempt > 0, "the first request was refused")
                check(e.status == "QUEUE_FULL" and e.retry_after and e.retry_after > 1.0,
                      f"QUEUE_FULL with retry_after > 1 s: {e!r}")
                return
        raise AssertionError("three 41-token requests passed two 64-token buckets")


async def status_sees_engine_and_actors(url, login_dir, model_name):
    async with llmbus.Client(url, user="operator",
                             password_file=os.path.join(login_dir, "operator.password")) as op:
        st = await op.status()
        check(any(e.model.startswith(model_name) for e in st.engines), f"an engine of {model_name}: {st.engines}")
        kinds = {a.actor for a in st.actors}
        check({"scheduler", "gpu_worker", "kv_manager"} <= kinds, f"actors heard: {sorted(kinds)}")


async def status_refused_to_a_tenant(c):
    try:
        await c.status(wait=1.0)
    except llmbus.LlmbusError as e:
        check("operator" in str(e), f"the refusal says whose credentials to use: {e}")
    else:
        raise AssertionError("a tenant read the engines' stats")


async def connection_file_is_found(url, login_dir, serve_pid):
    """Client() with no url takes the newest live connection file; a newer one of a dead serve
    is skipped; connection=NAME picks one."""
    with tempfile.TemporaryDirectory() as runtime:
        d = os.path.join(runtime, "llmbus")
        os.makedirs(d)
        good = {"nats_url": url, "nats_user": "tenant-default", "http_url": None, "models": ["m"],
                "nats_password_file": os.path.join(login_dir, "tenant-default.password"), "pid": serve_pid,
                "operator_user": "operator", "operator_password_file": os.path.join(login_dir, "operator.password")}
        with open(os.path.join(d, "live.json"), "w") as f:
            json.dump(good, f)
        time.sleep(0.02)
        dead = subprocess.Popen(["true"])
        dead.wait()
        with open(os.path.join(d, "stale.json"), "w") as f:
            json.dump(dict(good, nats_url="nats://127.0.0.1:1", pid=dead.pid), f)
        old = {k: os.environ.get(k) for k in ("XDG_RUNTIME_DIR", "HOME")}
        os.environ["XDG_RUNTIME_DIR"] = runtime
        os.environ["HOME"] = runtime  # ~/.cache/llmbus of this machine may hold real serves' files
        try:
            async with llmbus.Client() as c:
                check(c.url == url, f"the live file was chosen, got {c.url}")
                check(await c.tokenize("Hello world") == [19556, 905], "works through the file's login")
                st = await c.status(wait=2.5)
                check(st.engines, "status() uses the operator's login the file names")
            check(llmbus.Client(connection="stale").url == "nats://127.0.0.1:1", "connection=NAME picks it")
            os.remove(os.path.join(d, "live.json"))
            try:
                llmbus.Client()
            except llmbus.ConnectionFileError as e:
                check("llmbus serve" in str(e), f"the error says what to start: {e}")
            else:
                raise AssertionError("a dead serve's file was used")
        finally:
            for k, v in old.items():
                if v is None:
                    del os.environ[k]
                else:
                    os.environ[k] = v


async def no_responders_is_a_clear_error(workdir):
    nats_bin = "/usr/sbin/nats-server"
    proc = subprocess.Popen([nats_bin, "-a", "127.0.0.1", "-p", "-1", "--ports_file_dir", workdir],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        ports = os.path.join(workdir, f"nats-server_{proc.pid}.ports")
        for _ in range(500):
            if os.path.exists(ports) and "nats://" in open(ports).read():
                break
            time.sleep(0.01)
        url = re.search(r"nats://[\d.]+:\d+", open(ports).read()).group(0)
        async with llmbus.Client(url, timeout=10) as c:
            try:
                async for _ in c.generate("Hi"):
                    pass
            except llmbus.NoEngineError as e:
                check("llmbus serve" in str(e), f"the error says what is missing: {e}")
            else:
                raise AssertionError("generate on an empty bus did not fail")
            try:
                await c.tokenize("Hi")
            except llmbus.NoEngineError:
                pass
            else:
                raise AssertionError("tokenize on an empty bus did not fail")
    finally:
        proc.terminate()
        proc.wait()


def main():
    installed_like_a_user()
    print("ok   installed_like_a_user")
    workdir = tempfile.mkdtemp(prefix="llmbus-pyclient-")
    tenants = os.path.join(workdir, "tenants")
    with open(tenants, "w") as f:
        f.write("default\nslow tokens_per_s=1 burst_tokens=64\n")
    failures = 0
    metrics_base = api_stack.free_port_run(10)
    with api_stack.Stack(args=["--tenants", tenants, "--metrics-port", str(metrics_base)]) as stack:
        url, user, pw = stack.nats_login()
        login_dir = os.path.dirname(pw)

        async def run_all():
            nonlocal failures
            async with llmbus.Client(url, user=user, password_file=pw) as c:
                cases = [
                    ("generate_cumulative_and_delta_agree", lambda: generate_cumulative_and_delta_agree(c)),
                    ("tokenize_and_detokenize", lambda: tokenize_and_detokenize(c)),
                    ("abort_on_cancel_after_first_output", lambda: abort_on_cancel(c, stack, metrics_base, True)),
                    ("abort_on_cancel_before_any_output", lambda: abort_on_cancel(c, stack, metrics_base, False)),
                    ("errors_carry_error_info", lambda: errors_carry_error_info(c)),
                    ("rate_limit_has_retry_after", lambda: rate_limit_has_retry_after(url, login_dir)),
                    ("status_sees_engine_and_actors",
                     lambda: status_sees_engine_and_actors(url, login_dir, stack.model_name)),
                    ("status_refused_to_a_tenant", lambda: status_refused_to_a_tenant(c)),
                    ("connection_file_is_found", lambda: connection_file_is_found(url, login_dir, stack.proc.pid)),
                    ("no_responders_is_a_clear_error", lambda: no_responders_is_a_clear_error(workdir)),
                ]
                for name, fn in cases:
                    t0 = time.monotonic()
                    try:
                        await fn()
                        print(f"ok   {name} ({time.monotonic() - t0:.2f} s)")
                    except Exception as e:  # noqa: BLE001 - report every case
                        failures += 1
                        print(f"FAIL {name}: {type(e).__name__}: {e}")

        asyncio.run(run_all())
        if failures:
            print(f"--- serve log (tail) ---\n{stack.tail(60)}")
    print(f"{11 - failures} passed, {failures} failed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
