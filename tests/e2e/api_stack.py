"""Shared helpers of the api e2e tests: start `llmbus serve` with the real model on a free
port, wait for /health, stop it with SIGTERM at the end.

Environment: LLMBUS_API_BASE ("http://127.0.0.1:PORT") uses a stack already running instead;
LLMBUS_BUILD_DIR (set by ctest) holds cmd/llmbus and the actor binaries;
LLMBUS_MODEL overrides the model (default: models/SmolLM2-135M-Instruct.Q4_1.gguf under
LLMBUS_SOURCE_DIR). A missing binary or model skips the test (exit code 77) with the reason.
"""
import json
import os
import signal
import random
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request

SKIP = 77


def skip(reason):
    print(f"SKIP: {reason}")
    sys.exit(SKIP)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def free_port_run(n):
    """A base port with n free ports after it."""
    for _ in range(200):
        base = random.randint(20000, 60000 - n)
        socks = []
        try:
            for i in range(n):
                s = socket.socket()
                s.bind(("127.0.0.1", base + i))
                socks.append(s)
            return base
        except OSError:
            continue
        finally:
            for s in socks:
                s.close()
    raise RuntimeError("no run of free ports")


def child_pids(parent, program):
    """The pids of `program` (basename of argv[0]) among `parent`'s children, from /proc."""
    out = []
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
            out.append(int(name))
    return out


def child_pid(parent, program):
    """The pid of one `program` child of `parent`, or None."""
    pids = child_pids(parent, program)
    return pids[0] if pids else None


def http_get(url, timeout=5.0):
    """(status, body bytes) of a GET; status 0 when nothing answers."""
    try:
        with urllib.request.urlopen(url, timeout=timeout) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()
    except (OSError, urllib.error.URLError):
        return 0, b""


def metrics(base):
    """Parsed /metrics: {'name{labels}': value}."""
    status, body = http_get(base + "/metrics")
    assert status == 200, f"/metrics answered {status}"
    out = {}
    for line in body.decode().splitlines():
        if line and not line.startswith("#"):
            key, _, value = line.rpartition(" ")
            out[key] = float(value)
    return out


def metric(values, name, **labels):
    """Sum of every sample of `name` whose labels include `labels`."""
    total, found = 0.0, False
    for key, v in values.items():
        if key.split("{", 1)[0] != name:
            continue
        if all(f'{k}="{val}"' in key for k, val in labels.items()):
            total += v
            found = True
    return total if found else None


class Stack:
    """`llmbus serve` for the duration of a `with` block."""

    def __init__(self, ready_timeout_s=180.0, args=()):
        self.args = list(args)  # more `llmbus serve` flags (engine limits, policy)
        if "--metrics-port" not in self.args:  # no fixed ports: tests may run beside a stack
            self.args += ["--metrics-port", "0"]
        src = os.environ.get("LLMBUS_SOURCE_DIR", os.path.dirname(os.path.dirname(os.path.dirname(
            os.path.abspath(__file__)))))
        build = os.environ.get("LLMBUS_BUILD_DIR", os.path.join(src, "build"))
        self.llmbus = os.path.join(build, "cmd", "llmbus")
        self.model = os.environ.get("LLMBUS_MODEL",
                                    os.path.join(src, "models", "SmolLM2-135M-Instruct.Q4_1.gguf"))
        self.model_name = os.path.basename(self.model)[: -len(".gguf")]
        self.external = os.environ.get("LLMBUS_API_BASE")  # a stack already running, e.g. by hand
        if self.external:
            self.base = self.external.rstrip("/")
            self.port = int(self.base.rsplit(":", 1)[1])
            self.proc = None
            return
        if not os.access(self.llmbus, os.X_OK):
            skip(f"{self.llmbus} not built")
        for prog in ("llmbus-api-server", "llmbus-input-processor", "llmbus-scheduler",
                     "llmbus-kv-manager", "llmbus-gpu-worker", "llmbus-output-processor"):
            if not os.access(os.path.join(build, "cmd", prog), os.X_OK):
                skip(f"{prog} not built in {build}/cmd")
        if not os.path.exists(self.model):
            skip(f"model {self.model} missing (run ops/fetch-model.sh)")
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        self.ready_timeout_s = ready_timeout_s
        self.proc = None
        self.log = tempfile.NamedTemporaryFile(prefix="llmbus-serve-", suffix=".log", delete=False)

    def __enter__(self):
        if self.external:
            return self
        self.proc = subprocess.Popen(
            [self.llmbus, "serve", "--model", self.model, "--http", f"127.0.0.1:{self.port}"] + self.args,
            stdout=self.log, stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.monotonic() + self.ready_timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                self.fail(f"llmbus serve exited with {self.proc.returncode}")
            status, _ = http_get(self.base + "/health", timeout=2)
            if status == 200:
                return self
            time.sleep(0.25)
        self.fail(f"/health not 200 within {self.ready_timeout_s} s")
        return self

    def tail(self, n=40):
        if self.external:
            return "(external stack)"
        self.log.flush()
        with open(self.log.name, errors="replace") as f:
            return "".join(f.readlines()[-n:])

    def nats_login(self, user="tenant-default"):
        """(url, user, password file) of the embedded nats-server `llmbus serve` started: its
        log's event=nats_ready url=... and the credentials directory of event=nats_auth_generated
        (cmd/supervisor/serve_nats_config.h: every client logs in; tenant-default is the default tenant)."""
        import re
        with open(self.log.name, errors="replace") as f:
            text = f.read()
        url = re.search(r"event=nats_ready url=(\S+)", text)
        auth = re.search(r"event=nats_auth_generated dir=(\S+)", text)
        assert url and auth, "serve logged no nats_ready / nats_auth_generated line"
        return url.group(1), user, os.path.join(auth.group(1), f"{user}.password")

    def nats_cli_args(self, user="tenant-default"):
        """`--nats URL --nats-user U --nats-password-file F` for llmbus generate/chat/status."""
        url, user, pw = self.nats_login(user)
        return ["--nats", url, "--nats-user", user, "--nats-password-file", pw]

    def fail(self, why):
        print(f"FAIL: {why}\n--- serve log (tail) ---\n{self.tail()}")
        self.stop()
        sys.exit(1)

    def stop(self):
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        self.proc = None

    def __exit__(self, *exc):
        if self.external:
            return False
        alive = self.proc is not None and self.proc.poll() is None
        self.stop()
        if not alive:
            print(f"--- serve log (tail) ---\n{self.tail()}")
        return False


def run_cases(cases):
    """Runs [(name, fn)], prints one line each; returns the number of failures."""
    failures = 0
    for name, fn in cases:
        t0 = time.monotonic()
        try:
            fn()
            print(f"ok   {name} ({time.monotonic() - t0:.2f} s)")
        except Exception as e:  # noqa: BLE001 - report every failure and go on
            failures += 1
            print(f"FAIL {name}: {type(e).__name__}: {e}")
    return failures


def dumps(obj):
    return json.dumps(obj).encode()
